"""What the built-in worker's ranks hold, estimated from the trainer arguments before anything starts,
so that a model this host cannot hold is refused in a second with one line rather than killed by the
kernel a minute later. No torch here.

    parameters(args)                  the GPT's parameters: (dense, expert), as megatron-core's local spec builds it
    rank_memory(args, sizes)          bytes one rank holds: weights, gradients, optimizer, async staging
    check_megatron_memory(args, sizes, ranks_per_host, on_gpus)

Per parameter a rank holds its weight (2 bytes in bf16/fp16, else 4), its gradient (4 when gradients
are reduced in fp32 or the weights are fp32, else 2), and the optimizer's fp32 state: a main copy of
the weight in half-precision training (4) and Adam's two moments (8; SGD's momentum: 4), divided by
the data-parallel size with the DistributedOptimizer. A rank holds 1/(TP x PP) of the dense weights
and 1/(EP x TP x PP) of the experts'. An async save stages the rank's share of the checkpoint in host
memory when the state lives on a GPU (on a CPU the tensors are already in host memory). Activations
and the allocator's slack are left out: the estimate is a floor, and a host below it cannot run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ckpt_bench.core.units import GIB
from ckpt_bench.launcher.resources import RANK_BASE_BYTES, check_host_memory


def parameters(args: Mapping) -> tuple[int, int]:
    """(dense, expert) parameter counts of the GPT the worker builds from `args`."""
    hidden, layers = args["hidden_size"], args["num_layers"]
    heads = args["num_attention_heads"]
    ffn = args.get("ffn_hidden_size") or 4 * hidden
    groups = args.get("num_query_groups") if args.get("group_query_attention") else heads
    bias = bool(args.get("add_bias_linear", True))
    norm = hidden * (2 if args.get("normalization", "LayerNorm") == "LayerNorm" else 1)  # weight (+ bias)
    multiple = args.get("make_vocab_size_divisible_by", 128) * args["tensor_model_parallel_size"]
    vocab = -(-args["vocab_size"] // multiple) * multiple

    qkv_width = hidden + 2 * groups * (hidden // heads)
    attention = hidden * qkv_width + bias * qkv_width + hidden * hidden + bias * hidden
    mlp = hidden * ffn * (2 if args.get("swiglu") else 1) + bias * ffn * (2 if args.get("swiglu") else 1) \
        + ffn * hidden + bias * hidden
    experts = args.get("num_experts") or 0
    per_layer = 2 * norm + attention + ((hidden + 1) * experts if experts else mlp)  # router: weight and bias
    embeddings = vocab * hidden * (2 if args.get("untie_embeddings_and_output_weights") else 1)
    if args.get("position_embedding_type", "learned_absolute") == "learned_absolute":
        embeddings += (args.get("max_position_embeddings") or args["seq_length"]) * hidden
    return layers * per_layer + embeddings + norm, layers * experts * mlp


def state_bytes_per_parameter(args: Mapping) -> tuple[int, int]:
    """(weight, optimizer state) bytes per parameter, as a rank holds them and a checkpoint saves them."""
    half = bool(args.get("bf16") or args.get("fp16"))
    return (2 if half else 4), (4 if half else 0) + (8 if args.get("optimizer", "adam") == "adam" else 4)


def checkpoint_bytes(args: Mapping) -> int:
    """Bytes of one checkpoint of the whole model: every parameter's weight and optimizer state."""
    dense, expert = parameters(args)
    return (dense + expert) * sum(state_bytes_per_parameter(args))


@dataclass(frozen=True)
class RankMemory:
    """Bytes one rank of the save pass holds at its peak, by what holds them."""

    weights: int
    gradients: int
    optimizer: int
    async_staging: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.async_staging


def rank_memory(args: Mapping, sizes: Mapping[str, int], on_gpus: bool) -> RankMemory:
    """What the largest rank holds (see the module docstring); `sizes` are rules.check's {tp, pp, ep, dp}."""
    dense, expert = parameters(args)
    per_rank = dense / (sizes["tp"] * sizes["pp"]) + expert / (sizes["ep"] * sizes["tp"] * sizes["pp"])
    half = bool(args.get("bf16") or args.get("fp16"))
    weight_bytes, optimizer_bytes = state_bytes_per_parameter(args)
    gradient_bytes = 4 if (not half or args.get("accumulate_allreduce_grads_in_fp32")) else 2
    shards = sizes["dp"] if args.get("use_distributed_optimizer") else 1
    optimizer = per_rank * optimizer_bytes / shards
    # A rank's share of the checkpoint: spread over the data-parallel ranks by a fully-parallel save or
    # the distributed optimizer, else the first data-parallel rank writes its model-parallel shard whole.
    spread = sizes["dp"] if (args.get("ckpt_fully_parallel_save") or args.get("use_distributed_optimizer")) else 1
    checkpoint_share = per_rank * (weight_bytes + optimizer_bytes) / spread
    staging = checkpoint_share if (args.get("async_save") and on_gpus) else 0
    return RankMemory(int(per_rank * weight_bytes), int(per_rank * gradient_bytes), int(optimizer), int(staging))


def check_megatron_memory(args: Mapping, sizes: Mapping[str, int], ranks_per_host: int, on_gpus: bool) -> None:
    """Refuse, with one line, a layout whose ranks cannot fit in this host's memory. On GPUs only the
    ranks' processes and their async staging live in host memory; the state lives on the devices."""
    rank = rank_memory(args, sizes, on_gpus)
    dense, expert = parameters(args)
    if on_gpus:
        in_host = rank.async_staging
        parts = f"async staging {rank.async_staging / GIB:.1f} GiB; the state itself is on the GPUs"
    else:
        in_host = rank.total
        parts = (f"weights {rank.weights / GIB:.1f}, gradients {rank.gradients / GIB:.1f}, optimizer "
                 f"{rank.optimizer / GIB:.1f} GiB")
    check_host_memory(
        ranks_per_host * (RANK_BASE_BYTES + in_host),
        f"{(dense + expert) / 1e9:.2f}B parameters: {ranks_per_host} rank(s) on this host at "
        f"{(RANK_BASE_BYTES + in_host) / GIB:.1f} GiB each ({parts}; the process {RANK_BASE_BYTES / GIB:.2f} GiB)",
        "use a smaller model (--set num_layers=...), more tensor/pipeline parallelism, "
        "--use-distributed-optimizer, or a host with more memory")
