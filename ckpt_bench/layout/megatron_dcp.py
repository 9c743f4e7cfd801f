"""What every rank of a Megatron-LM job writes when it saves its sharded state through PyTorch DCP, computed
without torch.

The state is `megatron_shapes`' (the same shards, keys and global offsets the `torch_dist` engine saves: the
model's, and the optimizer's, the distributed optimizer's `dp_reshardable` buckets included), as a DCP user
of that model hands it to `torch.distributed.checkpoint.save`: one entry per key, a `ShardedTensor` of the
rank's shards of it at their global offsets (`dcp_state_order` gives the order). megatron-core's
`ShardedObject`s (the linear modules' empty `_extra_state`s, the optimizer's bucket sizes) are its own
bookkeeping, not tensors, and are left out.

Who writes what is DCP's, not megatron's: DCP's default planner (`DefaultSavePlanner`, torch 2.13's
`dedup_save_plans`) gathers every rank's plan and keeps each write item -- a (key, offset) chunk -- on one of
the ranks that hold it. It visits the items in the order they first appear, rank 0's plan first, and gives
each to the holder with the fewest bytes planned so far (the first of the holders' set on a tie). What it
counts as an item's bytes is the size of its whole global tensor, not of the chunk (`WriteItem.
tensor_storage_size` reads `TensorWriteData.size`, a shard's global shape), so the ranks' written bytes are
balanced only roughly. `dcp_writers` replays that step by step, so `RankShare.bytes` is what each rank writes:
replicated shards once, each shard once, over the whole job (not per data-parallel group, as megatron's
fully-parallel save does). Files: `__<rank>_<thread>.distcp` per writer thread and rank 0's `.metadata`
(`engines.ENGINES["dcp"]`).

`--subset` (the first N ranks): the absent ranks' shards leave holes in the global tensors, which DCP refuses
to index, so each running rank writes what the full job's DCP would give it, each shard as a global tensor of
its own (keyed `Shard.name`), as the `torch_dist` engine does in a subset. Plain Python.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence

from ckpt_bench.layout.checkpoint_layout import Layout
from ckpt_bench.layout.megatron_shapes import (
    MegatronGPT,
    Shard,
    fully_parallel_bytes,
    megatron_job,
    rank_layout,
)
from ckpt_bench.layout.workload import DTYPE_BYTES, Workload
from ckpt_bench.model.parallel import RankCoordinates

__all__ = ["DcpWriters", "dcp_state_order", "dcp_writers", "layout", "plan_items"]


def dcp_state_order(shards: list[Shard]) -> dict[str, list[Shard]]:
    """A rank's shards by key, as its DCP state dict holds them: keys in the order they first appear, each
    key's shards in the rank's order. DCP plans a rank's write items in exactly this order."""
    by_key: dict[str, list[Shard]] = {}
    for shard in shards:
        by_key.setdefault(shard.key, []).append(shard)
    return by_key


def plan_items(gpt: MegatronGPT) -> Iterator[list[Shard]]:
    """Every rank's shards (model and optimizer), rank by rank, each rank's in the order DCP plans them
    (`dcp_state_order`). Ranks at the same tensor, pipeline, expert and expert-tensor coordinates hold the
    same model shards (only their replica ids, which DCP does not see, differ): built once per such class."""
    model_by_class: dict[RankCoordinates, list[Shard]] = {}
    for rank in range(gpt.world_size):
        c = gpt.coordinates(rank)
        probe = gpt.class_coordinates(c)
        model = model_by_class.get(probe)
        if model is None:
            model = model_by_class[probe] = gpt.model_shards(probe)
        optimizer = gpt.optimizer_shards(c, model)
        yield [shard for shards in dcp_state_order(model + optimizer).values() for shard in shards]


@dataclasses.dataclass(frozen=True)
class DcpWriters:
    """DCP's deduplication of one save over the whole job."""

    written: tuple[int, ...]
    """Tensor bytes each rank of the job writes."""
    mine: frozenset[str]
    """The shards (`Shard.name`) the rank asked about writes."""


def dcp_writers(gpt: MegatronGPT, rank: int | None = None) -> DcpWriters:
    """Which rank DCP's default planner has write each chunk of the job's state (`dedup_save_plans`,
    `save_to_lowest_rank=False`), replayed: per-rank bytes, and the shards `rank` writes."""
    holders: dict[str, set[int]] = {}  # insertion order: each chunk where it first appears
    chunks: dict[str, Shard] = {}
    for holder, shards in enumerate(plan_items(gpt)):
        for shard in shards:
            ranks = holders.get(shard.name)
            if ranks is None:
                ranks = holders[shard.name] = set()
                chunks[shard.name] = shard
            ranks.add(holder)
    planned = [0] * gpt.world_size
    written = [0] * gpt.world_size
    mine = set()
    for name, ranks in holders.items():
        # min over the same set, built by the same additions, ties resolved as DCP's own min() resolves them
        writer = min(ranks, key=planned.__getitem__)
        shard = chunks[name]
        planned[writer] += math.prod(shard.global_shape) * DTYPE_BYTES[shard.dtype] or 1
        written[writer] += shard.nbytes
        if writer == rank:
            mine.add(name)
    return DcpWriters(tuple(written), frozenset(mine))


def layout(workload: Workload, world_size: int | None = None, run_ranks: Sequence[int] | None = None) -> Layout:
    """Every rank's bytes and files for one DCP save of `workload`'s Megatron state (of the ranks that run:
    `run_ranks`, default all). `RankShare.bytes`: the tensor bytes DCP has it write; `resident_bytes`: what it
    holds (as for `torch_dist`), which is also what it reads per load: a DCP load reads every shard of the
    rank's state, its replicas included. Raises `WorkloadError`."""
    gpt, running = megatron_job(workload, world_size, run_ranks)
    _, resident = fully_parallel_bytes(gpt)
    return rank_layout(gpt, running, dcp_writers(gpt).written, resident, read=resident)
