"""A rank's Megatron-LM `args`: its `MegatronSpec`'s arguments on the worker's defaults, with the values
Megatron-LM's `validate_args` derives (world_size, data_parallel_size, padded_vocab_size, params_dtype,
and the defaults that depend on others: ffn_hidden_size = 4 * hidden_size, global_batch_size =
micro_batch_size * data_parallel_size, ...), checked against Megatron's rules. The rank side: imports torch.
"""

from __future__ import annotations

import argparse

import torch

from ckpt_bench.backends.megatron.rules import check, check_worker_limits
from ckpt_bench.backends.megatron.spec import MegatronSpec
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.megatron_arguments import MEGATRON_DEFAULTS


class SpecError(ValueError):
    """The spec asks for something this worker cannot run; the message says what and why."""


def megatron_args(spec: MegatronSpec, world_size: int, phase: str = "save") -> argparse.Namespace:
    """Megatron-LM style `args`: defaults, then the spec's arguments (with the load layout in the load phase),
    then derived values; validated."""
    layout = (spec.load_layout or {}) if phase == "load" else {}
    args = argparse.Namespace(**{**MEGATRON_DEFAULTS, **spec.arguments, **layout})
    if spec.checkpoint_dir is not None:
        args.save = args.load = spec.checkpoint_dir
    _derive(args, world_size)
    _validate(args)
    return args


def _derive(args: argparse.Namespace, world_size: int) -> None:
    model_parallel = args.tensor_model_parallel_size * args.pipeline_model_parallel_size * args.context_parallel_size
    args.world_size = world_size
    args.data_parallel_size = max(1, world_size // model_parallel)  # rules.check refuses a remainder
    if args.ffn_hidden_size is None:
        args.ffn_hidden_size = 4 * args.hidden_size
    if args.max_position_embeddings is None:
        args.max_position_embeddings = args.seq_length
    if args.global_batch_size is None:
        args.global_batch_size = args.micro_batch_size * args.data_parallel_size
    if args.save_interval is None:
        args.save_interval = args.train_iters
    if args.load is None:
        args.load = args.save
    multiple = args.make_vocab_size_divisible_by * args.tensor_model_parallel_size
    args.padded_vocab_size = -(-args.vocab_size // multiple) * multiple
    args.params_dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else torch.float32


def _validate(args: argparse.Namespace) -> None:
    """Megatron's rules and the built-in worker's limits (ckpt_bench.backends.megatron.rules), on this spec."""
    if args.save is None:
        raise SpecError("the spec names no checkpoint folder (checkpoint_dir or arguments.save)")
    try:
        check(vars(args), args.world_size)
        check_worker_limits(vars(args))
    except ConfigError as error:
        raise SpecError(str(error)) from None
