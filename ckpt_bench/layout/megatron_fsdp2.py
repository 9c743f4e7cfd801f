"""What every rank of a Megatron-LM job under PyTorch FSDP2 (`use_torch_fsdp2`) writes per save, computed without
torch: `torch_dist` (megatron-core's sharded state dict of DTensors) and `torch_dcp` (DCP of the same DTensors)
alike.

Megatron-LM wraps the model in megatron-core's `TorchFullyShardedDataParallel`: `fully_shard` over the data-parallel
x context-parallel group, every parameter a DTensor `Shard(0)` of its tensor-parallel shard. Data-parallel rank d
holds rows [d*c, min((d+1)*c, n)) of a parameter of n rows, c = ceil(n / group size) (torch.chunk's split: the
last ranks hold fewer rows, or none). megatron-core's `make_(tp_)sharded_tensor_for_checkpoint` turns each into a
`ShardedTensor` of that local chunk with data-parallel replica id 0, so no data-parallel rank's chunk is another's
replica: every rank writes its own share. A parameter replicated over tensor parallelism (norms) is written by
tensor-parallel rank 0, as without FSDP2. The optimizer is megatron's without distribution (Megatron-LM takes FSDP2
without `use_distributed_optimizer`), so its state (`exp_avg`, `exp_avg_sq`, and the fp32 copy of half-precision
weights) mirrors the same chunks (`MegatronGPT.optimizer_shards`).

Each rank's share is `megatron_shapes`' model shard at its tensor, pipeline and expert coordinates, split as above.
Not modelled, and refused in one line: FSDP2 with experts (their expert-data-parallel mesh), with the distributed
optimizer, and Megatron-FSDP (`use_megatron_fsdp`, `fsdp_dtensor`: its flat, bucketed DTensor buffers). Checked
against real FSDP2 saves on CPU ranks (tests/unit/test_workload_fsdp2.py). Plain Python.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ckpt_bench.layout.checkpoint_layout import Layout
from ckpt_bench.layout.megatron_shapes import MegatronGPT, Shard, megatron_job, rank_layout
from ckpt_bench.layout.workload import Workload, WorkloadError
from ckpt_bench.model.parallel import RankCoordinates

__all__ = ["fsdp2_chunk", "layout", "parameter_groups", "rank_state"]


def fsdp2_chunk(rows: int, group_size: int, group_rank: int) -> tuple[int, int]:
    """(first row, row count) of `group_rank`'s share of `rows` under `Shard(0)` over `group_size` ranks."""
    chunk = -(-rows // group_size)
    start = min(group_rank * chunk, rows)
    return start, min(chunk, rows - start)


def parameter_groups(shards: list[Shard]) -> list[list[Shard]]:
    """A rank's model shards grouped by the parameter tensor that holds them: megatron-core saves one parameter as
    several shards (SwiGLU's fc1 as its gate and its up half), FSDP2 shards the parameter as one tensor."""
    grouped: dict[tuple, list[Shard]] = {}
    for shard in shards:
        grouped.setdefault((shard.key, shard.global_offset[:shard.prepend_axis_num]), []).append(shard)
    return list(grouped.values())


def _fsdp2_shards(parameter: list[Shard], group_size: int, group_rank: int) -> list[Shard]:
    """The parts of `parameter`'s shards (its rows, in order) that FSDP2 leaves on data-parallel rank
    `group_rank`, at their rows' offsets; data-parallel replica id 0."""
    start, count = fsdp2_chunk(sum(shard.local_shape[0] for shard in parameter), group_size, group_rank)
    parts, first = [], 0
    for shard in parameter:
        rows = shard.local_shape[0]
        begin, end = max(start, first), min(start + count, first + rows)
        if begin < end or (count == 0 and shard is parameter[-1]):
            offset = list(shard.global_offset)
            # An empty chunk lies at the end of the parameter's rows, as torch places it (placement_types.Shard.
            # local_shard_size_and_offset: min(size, start)): at row 0 it would share rank 0's index, and DCP's
            # planner would keep one of the two.
            offset[shard.prepend_axis_num] += begin - first if begin < end else rows
            parts.append(dataclasses.replace(
                shard, local_shape=(max(end - begin, 0), *shard.local_shape[1:]), global_offset=tuple(offset),
                replica_id=(shard.replica_id[0], shard.replica_id[1], 0)))
        first += rows
    return parts


def rank_state(gpt: MegatronGPT, c: RankCoordinates, parameters: list[list[Shard]] | None = None) -> list[Shard]:
    """The model's and the optimizer's shards the rank at `c` holds under FSDP2 (`parameters`: `parameter_groups` of
    its model shards without FSDP2, the same for every data-parallel rank)."""
    model = [part for parameter in (parameters or parameter_groups(gpt.model_shards(c)))
             for part in _fsdp2_shards(parameter, gpt.dp, c.dp_rank)]
    return model + gpt.optimizer_shards(c, model)


def _check(gpt: MegatronGPT) -> None:
    if gpt.arch.moe is not None:
        raise WorkloadError(f"workload {gpt.workload.name!r}: use_torch_fsdp2 with experts (num_experts): how FSDP2 "
                            "shards experts over their expert-data-parallel mesh is not modelled")
    if gpt.job.distributed_optimizer:
        raise WorkloadError(f"workload {gpt.workload.name!r}: use_torch_fsdp2 with use_distributed_optimizer: "
                            "FSDP2 shards the optimizer state itself; set use_distributed_optimizer false")


def layout(workload: Workload, world_size: int | None = None, run_ranks: Sequence[int] | None = None) -> Layout:
    """Every rank's bytes and files for one save of `workload`'s Megatron GPT under FSDP2 (of the ranks that run:
    `run_ranks`, default all). Raises `WorkloadError`."""
    gpt, running = megatron_job(workload, world_size, run_ranks)
    _check(gpt)
    written, resident, replica = {}, {}, {}
    for rank in range(gpt.world_size):
        c = gpt.coordinates(rank)
        model = (c.tp_rank, c.pp_rank)  # the model shards FSDP2 splits: the same on every data-parallel rank
        if model not in replica:
            replica[model] = parameter_groups(gpt.model_shards(c))
        shards = rank_state(gpt, c, replica[model])
        written[rank] = sum(s.nbytes for s in shards if s.is_main_replica)
        resident[rank] = sum(s.nbytes for s in shards)
    return rank_layout(gpt, running, written, resident)
