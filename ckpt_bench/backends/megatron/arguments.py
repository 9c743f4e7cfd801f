"""Which trainer arguments exist, and which the built-in worker acts on; nothing is silently ignored.

    MEGATRON_LM        every argument name Megatron-LM's own parser defines (its `dest`s and spellings,
                       the union over Megatron-LM core_v0.12.3, core_v0.16.1 and a 2026 main): megatron-core,
                       which the worker uses, ships no parser, so the names were taken from Megatron-LM
                       by tools/megatron_lm_arguments.py into megatron_lm_arguments.txt
    MEGATRON_DEFAULTS  the arguments the built-in worker acts on, with its defaults

    check_known(sources)          a name no Megatron-LM knows: ConfigError, one line, the closest names
    not_acted_on(args, given)     names Megatron-LM knows that the worker ignores: the report's notes

No torch here: the launcher checks names before deciding to launch anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

from ckpt_bench.core.errors import ConfigError, did_you_mean

_NAMES_FILE = Path(__file__).with_name("megatron_lm_arguments.txt")

MEGATRON_DEFAULTS = {
    "num_layers": 2,
    "hidden_size": 64,
    "ffn_hidden_size": None,
    "num_attention_heads": 4,
    "group_query_attention": False,
    "num_query_groups": None,
    "seq_length": 64,
    "max_position_embeddings": None,
    "vocab_size": 1024,
    "make_vocab_size_divisible_by": 128,
    "position_embedding_type": "learned_absolute",
    "rotary_percent": 1.0,
    "rotary_base": 10000,
    "normalization": "LayerNorm",
    "norm_epsilon": 1e-5,
    "swiglu": False,
    "untie_embeddings_and_output_weights": False,
    "add_bias_linear": True,
    "hidden_dropout": 0.1,
    "attention_dropout": 0.1,
    "init_method_std": 0.02,
    "num_experts": None,
    "moe_router_topk": 2,
    "moe_grouped_gemm": False,
    "bf16": False,
    "fp16": False,
    "tensor_model_parallel_size": 1,
    "pipeline_model_parallel_size": 1,
    "expert_model_parallel_size": 1,
    "context_parallel_size": 1,
    "sequence_parallel": False,
    "micro_batch_size": 2,
    "global_batch_size": None,
    "train_iters": 6,
    "seed": 1234,
    "log_interval": 1,
    "optimizer": "adam",
    "lr": 1e-4,
    "weight_decay": 0.01,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_eps": 1e-8,
    "sgd_momentum": 0.9,
    "clip_grad": 1.0,
    "use_distributed_optimizer": False,
    "accumulate_allreduce_grads_in_fp32": False,
    "save": None,
    "load": None,
    "save_interval": None,
    "ckpt_format": "torch_dist",
    "async_save": False,
    "use_persistent_ckpt_worker": False,
    "ckpt_fully_parallel_save": True,
    "ckpt_fully_parallel_load": False,
    "ckpt_assume_constant_structure": False,
    "dist_ckpt_optim_fully_reshardable": False,
}


@cache
def megatron_lm_names() -> frozenset[str]:
    """Megatron-LM's argument names (see the module docstring), and the worker's own."""
    lines = _NAMES_FILE.read_text().splitlines()
    return frozenset(line for line in lines if line and not line.startswith("#")) | set(MEGATRON_DEFAULTS)


def check_known(sources: Mapping[str, str]) -> None:
    """Refuse the first key that is no Megatron-LM argument; `sources` maps each key to where it was
    given (`--set num_layer=3`, the experiment file), for the message."""
    known = megatron_lm_names()
    for key, source in sources.items():
        if key not in known:
            raise ConfigError(f"{source}: {key} is not a Megatron-LM argument{did_you_mean(key, known)}")


def not_acted_on(args: Mapping, given: Iterable[str]) -> list[str]:
    """The `given` keys (set by the user, not by our presets) that Megatron-LM knows and the built-in
    worker does not act on, as `key=value`."""
    return [f"{key}={args[key]!r}" for key in sorted(given) if key in args and key not in MEGATRON_DEFAULTS]
