"""The worker's input: a JSON spec written by the launcher.

    {
      "megatron": {<Megatron-LM argument name>: value, ...},
      "checkpoint_dir": "/abs/run/checkpoints",  # optional: the run's checkpoint folder; when set it
                                              # is `save` and `load` (the launcher writes it here)
      "events_dir": "/abs/run/events",        # one rank-R.jsonl of CheckpointEvents per rank
      "integrity_dir": "/abs/run/integrity",  # per-save manifests and per-rank load verdicts
      "warm_load": false,                     # true: load without evicting the page cache first
      "run_dir": "/abs/run",                  # where rank 0 writes measurements.json
      "training_impact": false,               # true: time the save pass's iterations without and with saves
      "load_layout": {"tensor_model_parallel_size": 1, ...}  # optional: the load pass's parallel sizes
    }

Keys under "megatron" are Megatron-LM's own argument names (as in Primus YAML overrides), so a
config written for Megatron-LM means the same here. `MEGATRON_DEFAULTS`
(`ckpt_bench.backends.megatron.arguments`) fills what is missing. The launcher has refused names no
Megatron-LM knows and put the ones this worker does not act on into the report's notes; they show in
the arguments dump too. The arguments the worker acts on:

    model        num_layers hidden_size ffn_hidden_size num_attention_heads group_query_attention
                 num_query_groups seq_length max_position_embeddings vocab_size
                 make_vocab_size_divisible_by position_embedding_type rotary_percent rotary_base
                 normalization norm_epsilon swiglu
                 untie_embeddings_and_output_weights add_bias_linear hidden_dropout
                 attention_dropout init_method_std num_experts moe_router_topk moe_grouped_gemm
                 bf16 fp16
    parallelism  tensor_model_parallel_size pipeline_model_parallel_size
                 expert_model_parallel_size context_parallel_size sequence_parallel
    training     micro_batch_size global_batch_size train_iters seed log_interval
    optimizer    optimizer lr weight_decay adam_beta1 adam_beta2 adam_eps sgd_momentum clip_grad
                 use_distributed_optimizer accumulate_allreduce_grads_in_fp32
    checkpoint   save load save_interval ckpt_format (torch_dist | torch) async_save
                 use_persistent_ckpt_worker ckpt_fully_parallel_save ckpt_fully_parallel_load
                 ckpt_assume_constant_structure dist_ckpt_optim_fully_reshardable

Derived values are added the way Megatron-LM's `validate_args` adds them: world_size,
data_parallel_size, padded_vocab_size, params_dtype, and the defaults that depend on others
(ffn_hidden_size = 4 * hidden_size, global_batch_size = micro_batch_size * data_parallel_size, ...).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass

import torch

from ckpt_bench.backends.megatron.arguments import MEGATRON_DEFAULTS
from ckpt_bench.backends.megatron.rules import check, check_worker_limits
from ckpt_bench.core.errors import ConfigError


class SpecError(ValueError):
    """The spec asks for something this worker cannot run; the message says what and why."""


@dataclass(frozen=True)
class WorkerSpec:
    megatron: dict
    events_dir: str
    integrity_dir: str
    warm_load: bool = False
    checkpoint_dir: str | None = None
    run_dir: str | None = None
    training_impact: bool = False  # train twice, without and with saves (ckpt_bench.backends.megatron.worker)
    load_layout: dict | None = None  # parallel sizes of the load pass when they differ from the save's

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> WorkerSpec:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
        return cls(
            megatron=dict(raw.get("megatron") or {}),
            events_dir=raw["events_dir"],
            integrity_dir=raw["integrity_dir"],
            warm_load=bool(raw.get("warm_load", False)),
            checkpoint_dir=raw.get("checkpoint_dir"),
            run_dir=raw.get("run_dir"),
            training_impact=bool(raw.get("training_impact", False)),
            load_layout=raw.get("load_layout"),
        )

    def megatron_args(self, world_size: int, phase: str = "save") -> argparse.Namespace:
        """Megatron-LM style `args`: defaults, then the spec (with the load layout in the load phase),
        then derived values; validated."""
        layout = (self.load_layout or {}) if phase == "load" else {}
        args = argparse.Namespace(**{**MEGATRON_DEFAULTS, **self.megatron, **layout})
        if self.checkpoint_dir is not None:
            args.save = args.load = self.checkpoint_dir
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
        raise SpecError("the spec names no checkpoint folder (checkpoint_dir or megatron.save)")
    try:
        check(vars(args), args.world_size)
        check_worker_limits(vars(args))
    except ConfigError as error:
        raise SpecError(str(error)) from None
