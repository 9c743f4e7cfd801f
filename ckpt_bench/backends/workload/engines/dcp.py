"""`--engine dcp`: PyTorch Distributed Checkpoint of the workload's own state (`engines.saved_state`).

DLIO's tensors (`DcpEngine`): every tensor keeps a name unique across the job (its DLIO file and key), so
each rank writes exactly its own share, as a sharded FSDP state is written.

A Megatron GPT's sharded state (`MegatronDcpEngine`, a Primus/Megatron experiment): each rank holds the
shards `megatron_shapes` gives the torch_dist engine (model and optimizer) and hands DCP, per key, a
`ShardedTensor` of its shards at their global offsets, built from local shards without a collective. Global
offsets are what DCP indexes, so replicas -- the same (key, offset) on several ranks -- are written once, by
the rank DCP's planner picks (`megatron_dcp.dcp_writers` replays it for the plan), and each shard once. A
DTensor cannot say this: its placements shard evenly over a device mesh, and megatron's layout (the
distributed optimizer's flat buckets cut at parameter boundaries, experts over EP and ETP) is not that.

Both: `thread_count` writer threads per rank, one `.distcp` file per thread, the coordinator's `.metadata`;
loads read in place into the rank's tensors, replicas included.
"""

from __future__ import annotations

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed._shard.metadata import ShardMetadata
from torch.distributed._shard.sharded_tensor import Shard as TorchShard
from torch.distributed._shard.sharded_tensor import ShardedTensor, ShardedTensorMetadata, TensorProperties

from ckpt_bench.backends.dcp.phases import mark_load, mark_save
from ckpt_bench.backends.workload.engines import ENGINES, saved_state
from ckpt_bench.backends.workload.engines.base import Engine, Pending, RankState, allocate_shards
from ckpt_bench.backends.workload.spec import WorkloadSpec
from ckpt_bench.layout.checkpoint_layout import Layout
from ckpt_bench.layout.megatron_dcp import dcp_state_order, dcp_writers
from ckpt_bench.layout.megatron_shapes import MegatronGPT, Shard, rank_shards
from ckpt_bench.storage.base import WorkerStorage
from ckpt_bench.worker.entry import WorkerContext

Box = tuple[tuple[int, ...], tuple[int, ...]]  # (offsets, sizes)


class DcpEngine(Engine):
    """DLIO's tensors through DCP; `_dcp_state` is what a save writes and a load reads into."""

    def prepare(self, state: RankState, location: str) -> None:
        # Untimed, as s3torchbenchmarking does: building a writer or reader creates the S3 client.
        self._writer = self.storage.dcp_writer(location, self.spec.thread_count, self.spec.sync_files)
        self._reader = self.storage.dcp_reader(location)
        background = self.background if self.spec.async_save else self.phases
        self._save_planner = mark_save(self._writer, self.spec.sync_files, self.phases, background)
        self._load_planner = mark_load(self._reader, self.phases)
        self._dcp_state = self.dcp_state(state)

    def dcp_state(self, state: RankState) -> dict:
        """The state dict DCP gets: the rank's tensors by name."""
        return state.tensors

    def save(self, state: RankState, location: str) -> Pending | None:
        if not self.spec.async_save:
            dcp.save(self._dcp_state, storage_writer=self._writer, planner=self._save_planner)
            return None
        return dcp.async_save(self._dcp_state, storage_writer=self._writer, planner=self._save_planner).result

    def load(self, state: RankState, location: str) -> dict[str, torch.Tensor]:
        dcp.load(self._dcp_state, storage_reader=self._reader, planner=self._load_planner)
        return state.tensors


class MegatronDcpEngine(DcpEngine):
    """A Megatron GPT's sharded state through DCP, as `ShardedTensor`s at megatron's global offsets.

    In a `--subset` the absent ranks' shards would leave holes in the global tensors, which DCP refuses to
    index: each running rank saves the shards the full job's DCP has it write (`dcp_writers`), each a tensor
    of its own named `Shard.name`, and loads what it wrote."""

    def __init__(self, spec: WorkloadSpec, layout: Layout, context: WorkerContext, storage: WorkerStorage):
        super().__init__(spec, layout, context, storage)
        gpt = MegatronGPT(layout.workload, layout.world_size)
        self.shards = rank_shards(gpt, self.share.rank)
        held = [shard for shards in dcp_state_order(list(self.shards.shards)).values() for shard in shards]
        if layout.is_subset:
            mine = dcp_writers(gpt, self.share.rank).mine
            held = [shard for shard in held if shard.name in mine]
        self._checkpointed = held
        self._tensors: dict[str, torch.Tensor] = {}

    def _allocate(self, fill: bool) -> RankState:
        """The checkpointed shards, filled (a save) or not (a load); the perturbed shard is the one megatron's
        layout picks where this rank saves it (else the worker picks the smallest)."""
        self._tensors = allocate_shards(self._checkpointed, self.spec.seed, self.layout.workload.randomize_tensor,
                                        self.context.device, fill)
        perturbed = self.shards.perturbed if self.shards.perturbed in self._tensors else None
        return RankState(dict(self._tensors), [], perturbed=perturbed)

    def allocate(self) -> RankState:
        return self._allocate(fill=True)

    def allocate_for_load(self) -> RankState:
        return self._allocate(fill=False)

    def dcp_state(self, state: RankState) -> dict:
        """Per key, a `ShardedTensor` of the rank's shards at their global offsets (a subset: the tensors)."""
        if self.layout.is_subset:
            return state.tensors
        return {key: self._sharded_tensor(shards, state.tensors)
                for key, shards in dcp_state_order(self._checkpointed).items()}

    def _sharded_tensor(self, shards: list[Shard], tensors: dict[str, torch.Tensor]) -> ShardedTensor:
        """The rank's `shards` of one key as a `ShardedTensor`, without a collective. Its metadata must cover the
        global tensor, so the parts other ranks hold are listed as a few boxes placed on another rank: DCP
        plans and indexes the local shards alone, and never reads those entries."""
        rank, world = self.context.rank, self.layout.world_size
        local = []
        for shard in shards:
            view = tensors[shard.name].view((1,) * shard.prepend_axis_num + shard.local_shape)
            local.append(TorchShard.from_tensor_and_offsets(view, list(shard.global_offset), rank))
        boxes = [(tuple(s.metadata.shard_offsets), tuple(s.metadata.shard_sizes)) for s in local]
        elsewhere = f"rank:{(rank + 1) % world}/{self.context.device}"
        rest = [ShardMetadata(list(offsets), list(sizes), elsewhere)
                for offsets, sizes in uncovered(shards[0].global_shape, boxes)]
        first = local[0].tensor
        metadata = ShardedTensorMetadata(
            [s.metadata for s in local] + rest, torch.Size(shards[0].global_shape),
            TensorProperties(dtype=first.dtype, layout=first.layout, requires_grad=False,
                             memory_format=torch.contiguous_format, pin_memory=False))
        return ShardedTensor._init_from_local_shards_and_global_metadata(local, metadata)


def uncovered(size: tuple[int, ...], boxes: list[Box]) -> list[Box]:
    """The parts of a tensor of shape `size` that none of the disjoint `boxes` covers, as a few boxes: cut
    along the first axis at every box's edges; a slab no box crosses is one box, the others recurse on the
    remaining axes."""
    if not size:
        return []
    cuts = sorted({0, size[0], *(o[0] for o, _ in boxes), *(o[0] + s[0] for o, s in boxes)})
    rest: list[Box] = []
    for start, stop in zip(cuts, cuts[1:], strict=False):
        inside = [(o[1:], s[1:]) for o, s in boxes if o[0] <= start and stop <= o[0] + s[0]]
        if not inside:
            rest.append(((start, *(0,) * (len(size) - 1)), (stop - start, *size[1:])))
        else:
            rest += [((start, *o), (stop - start, *s)) for o, s in uncovered(size[1:], inside)]
    return rest


def make_engine(spec: WorkloadSpec, layout: Layout, context: WorkerContext, storage: WorkerStorage) -> Engine:
    """The engine for the state this workload's dcp run saves (`engines.saved_state`)."""
    megatron = saved_state(ENGINES[spec.engine], layout.workload) == "megatron"
    return (MegatronDcpEngine if megatron else DcpEngine)(spec, layout, context, storage)


ENGINE = make_engine
