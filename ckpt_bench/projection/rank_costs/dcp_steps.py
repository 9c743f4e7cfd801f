"""The global steps of a torch.distributed.checkpoint save and load at the job's size: the coordinator's global
plan, the finalize that writes `.metadata`, the restart's metadata read and load plan. torch_dist (megatron-core
saves through DCP) and dcp share them; each gives, per rank, the items of its plan (`Item`).

Everything here is torch's own: `SavePlan`/`WriteItem` as its planners make them for a tensor's local chunk,
the planner's `create_global_plan` (dedup, the global metadata, `_validate_global_plan`), `FileSystemWriter.
finish` (the `.metadata` file, written into a temporary folder), `create_default_global_load_plan`.
"""

from __future__ import annotations

import dataclasses
import math
import pickle
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.default_planner import create_default_global_load_plan
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    ReadItem,
    SavePlan,
    TensorWriteData,
    WriteItem,
    WriteItemType,
)
from torch.distributed.checkpoint.storage import WriteResult

from ckpt_bench.layout.workload import TORCH_DTYPE
from ckpt_bench.projection.rank_costs.base import (
    EVERY_RANK,
    SAMPLE_BYTES,
    Budget,
    RankSample,
    RankSums,
    Step,
    built_or_floor,
    gather_bytes,
    pickled_size,
    run_step,
    unpickled,
)
from ckpt_bench.projection.rank_costs.pairwise_checks import counted_validation

__all__ = ["DcpSteps", "Item", "load_plan", "save_plan"]


@dataclass(frozen=True, slots=True)
class Item:
    """One entry of a rank's DCP plan: a tensor's chunk at its global offsets, or (shape None) a bytes object."""

    fqn: str
    offsets: tuple[int, ...] = ()
    sizes: tuple[int, ...] = ()
    global_shape: tuple[int, ...] | None = None
    dtype: str = "fp32"
    nbytes: int = 0


DTYPES = {name: getattr(torch, attr) for name, attr in TORCH_DTYPE.items()}


def _write_item(item: Item) -> WriteItem:
    if item.global_shape is None:
        return WriteItem(index=MetadataIndex(item.fqn), type=WriteItemType.BYTE_IO)
    offsets = torch.Size(item.offsets)  # one object in the index and the chunk, as DCP's planner shares it
    return WriteItem(index=MetadataIndex(item.fqn, offsets), type=WriteItemType.SHARD,
                     tensor_data=TensorWriteData(chunk=ChunkStorageMetadata(offsets, torch.Size(item.sizes)),
                                                 # one a write item, as the planner makes them
                                                 properties=TensorProperties(dtype=DTYPES[item.dtype]),
                                                 size=torch.Size(item.global_shape)))


def _one_name_a_key(items: Iterable[Item]) -> list[Item]:
    """The items with one string object per key, as a rank's state dict has them (pickle then writes each once)."""
    names: dict[str, str] = {}
    return [dataclasses.replace(item, fqn=names.setdefault(item.fqn, item.fqn)) for item in items]


def save_plan(items: Iterable[Item], flattened: bool = False) -> SavePlan:
    """A rank's local save plan, as DCP's planner makes it for these chunks; `flattened`: with the mapping of
    each flat key to its path a planner that flattens the state dict keeps (`DefaultSavePlanner`'s default)."""
    writes = [_write_item(item) for item in _one_name_a_key(items)]
    mappings = {write.index.fqn: (write.index.fqn,) for write in writes} if flattened else None
    return SavePlan(writes, planner_data=mappings)


def load_plan(items: Iterable[Item]) -> LoadPlan:
    """A rank's local load plan: each chunk read whole into the tensor at the same offsets. As DCP's planner makes
    it, the destination's index comes from the state dict and the storage's from the metadata (with its chunk's
    position): separate objects, each pickled in full."""
    reads = []
    for item in _one_name_a_key(items):
        if item.global_shape is None:
            reads.append(ReadItem(LoadItemType.BYTE_IO, MetadataIndex(item.fqn), torch.Size([0]),
                                  MetadataIndex(item.fqn, index=0), torch.Size([0]), torch.Size([0])))
            continue
        rank = len(item.sizes)
        reads.append(ReadItem(LoadItemType.TENSOR, MetadataIndex(item.fqn, torch.Size(item.offsets)),
                              torch.Size([0] * rank), MetadataIndex(item.fqn, torch.Size(item.offsets), 0),
                              torch.Size([0] * rank), torch.Size(item.sizes)))
    return LoadPlan(reads)


def _write_results(rank: int, plan: SavePlan, sizes: dict[MetadataIndex, int], threads: int) -> list[WriteResult]:
    """What a rank's writer returns for its plan: each item in one of its `threads` files, at its offset."""
    offsets = [0] * threads
    files = [f"__{rank}_{thread}.distcp" for thread in range(threads)]  # one string a file, as the writer's
    results = []
    for number, item in enumerate(plan.items):
        thread = number % threads
        length = sizes.get(item.index, 0)
        results.append(WriteResult(item.index, length, _StorageInfo(files[thread], offsets[thread], length)))
        offsets[thread] += length
    return results


class DcpSteps:
    """The DCP steps of one job: `plans(rank)` gives each rank's save items, `reads(rank)` its load items."""

    def __init__(self, world_size: int, threads: int, budget: Budget, plans: Callable[[int], Sequence[Item]],
                 reads: Callable[[int], Sequence[Item]]):
        self.world, self.threads, self.budget = world_size, threads, budget
        self.plans, self.reads = plans, reads
        self.metadata = None
        self.metadata_bytes: int | None = None
        self._metadata_file: bytes | None = None  # `.metadata` as the finalize wrote it, for the restart's read
        self.global_plans: list[SavePlan] | None = None
        self._sizes: dict[MetadataIndex, int] = {}

    def _local_plans(self, flattened: bool, payloads: list[bytes]) -> None:
        """Every rank's local plan, pickled as its gather_object sends it (appended to `payloads`)."""
        for rank in range(self.world):
            self.budget.check()
            items = self.plans(rank)
            for item in items:
                if item.global_shape is not None:
                    self._sizes[MetadataIndex(item.fqn, torch.Size(item.offsets))] = item.nbytes
            payloads.append(pickle.dumps(save_plan(items, flattened), protocol=pickle.HIGHEST_PROTOCOL))

    def global_plan(self, planner, decentralized: bool, keep_local_plans: bool = False,
                    cached_away: bool = False) -> Step:
        """The coordinator's global plan over every rank's local plan: `planner.create_global_plan`; decentralized,
        each rank keeps its own plan (nothing scattered), and with `keep_local_plans` the global metadata holds
        every local plan (megatron-core's, to check a later save's structure against)."""
        self.budget.restart()
        step = Step("global plan", "save",
                    f"every rank's local save plan gathered to rank 0 (gather_object), {type(planner).__name__}."
                    "create_global_plan there (dedup, the global metadata, _validate_global_plan)"
                    + ("" if decentralized else ", the global plans scattered back (scatter_object_list)"),
                    cached_away=cached_away, collective=f"gather_object over {self.world} ranks"
                    + ("" if decentralized else " + scatter_object_list"))
        payloads = built_or_floor(step, self.budget, lambda kept: self._local_plans(planner.flatten_state_dict, kept),
                                  unpickled)
        if payloads is None:
            return step
        largest, scattered, local = max(map(len, payloads)), 0, []

        def work() -> None:
            nonlocal scattered
            checked.clear()
            local[:] = unpickled(payloads, self.budget)  # what the coordinator's gather_object hands it
            with counted_validation() as validation:
                self.global_plans, self.metadata = planner.create_global_plan(local)
            checked.append(validation)
            if keep_local_plans:
                self.metadata.all_local_plans = local
            if not decentralized:
                scattered = max(map(pickled_size, self.global_plans))

        checked: list = []
        run_step(step, self.budget, work, counted=lambda: checked[-1].counted_s() if checked else 0.0)
        if step.complete and checked and checked[-1].pairwise:
            step.pairwise = checked[-1].pairwise.as_dict()
        if decentralized:
            self.global_plans = local
        step.units = sum(len(plan.items) for plan in local) or None
        step.host_bytes = gather_bytes(self.world, largest) + gather_bytes(self.world, scattered)
        return step

    def finalize(self) -> Step:
        """The finalize: every rank's write results gathered to rank 0, which writes `.metadata`
        (`FileSystemWriter.finish`, here into a temporary folder: its size is the checkpoint's at this scale)."""
        self.budget.restart()
        step = Step("finalize", "save", "every rank's write results gathered to rank 0 (gather_object), "
                    "FileSystemWriter.finish there: the global metadata with every item's file, offset and length, "
                    "pickled into .metadata", collective=f"gather_object over {self.world} ranks")
        if self.metadata is None or self.global_plans is None:
            step.why = "no global plan to finalize (the budget ran out before it)"
            return step
        def build(payloads: list) -> None:
            for rank, plan in enumerate(self.global_plans):
                self.budget.check()
                payloads.append(pickle.dumps(_write_results(rank, plan, self._sizes, self.threads),
                                             protocol=pickle.HIGHEST_PROTOCOL))

        payloads = built_or_floor(step, self.budget, build, unpickled)
        if payloads is None:
            return step
        largest = max(map(len, payloads))
        with tempfile.TemporaryDirectory(prefix="ckpt-bench-metadata-") as folder:
            writer = FileSystemWriter(folder, sync_files=False)
            writer.set_up_storage_writer(True)

            def work() -> None:
                results = unpickled(payloads, self.budget)  # the gathered write results
                step.units = sum(map(len, results))
                writer.finish(self.metadata, results)

            run_step(step, self.budget, work)
            if step.complete:
                self._metadata_file = (Path(folder) / ".metadata").read_bytes()
                self.metadata_bytes = len(self._metadata_file)
        step.host_bytes = gather_bytes(self.world, largest)
        return step

    def metadata_read(self) -> Step:
        """A restart: every rank reads `.metadata` and unpickles it (its bytes are counted with the loads'): the file
        the finalize wrote (`FileSystemWriter.finish` pickled it), else the global metadata pickled here."""
        self.budget.restart()
        step = Step("metadata", "load", "every rank reads the checkpoint's .metadata and unpickles it "
                    "(FileSystemReader.read_metadata)")
        if self.metadata is None:
            step.why = "no global metadata (the budget ran out before the save's global plan)"
            return step
        payload, self._metadata_file = self._metadata_file, None
        if payload is None:  # the finalize's budget ran out
            payload = pickle.dumps(self.metadata, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(payload)  # once untimed: the classes it names imported, as in a training process
        run_step(step, self.budget, lambda: pickle.loads(payload))
        return step

    def load_plan(self, name: str = "load plan", reads: Callable[[int], Sequence[Item]] | None = None,
                  sums: RankSums = EVERY_RANK, sample: RankSample | None = None) -> Step:
        """A restart's plan: every rank's load plan (of `reads`, default the job's) gathered to rank 0 (which
        unpickles them all), `create_default_global_load_plan`, the plans pickled back to every rank
        (scatter_object_list). Nothing in it spans ranks (torch's `create_default_global_load_plan` returns the
        plans as they are), so with `sample` it runs over the sampled ranks' plans alone (again, up to
        `SAMPLE_BYTES`), its CPU scaled by the items the job's ranks hold to theirs (`RankSample.scaled`); where
        `sums` leaves the sums over the ranks to others (`sampled`'s copies), it is not computed."""
        step = Step(name, "load", "every rank's load plan gathered to rank 0 (gather_object: unpickled there), "
                    "create_default_global_load_plan, each rank's plan pickled and scattered back "
                    "(scatter_object_list)", collective=f"gather_object + scatter_object_list over {self.world} ranks")
        if sums.steps == "others":
            step.why = "a sum over the ranks: computed at the job's own size over a sample of them"
            return step
        self.budget.restart()
        reads = reads or self.reads

        ranks = sample.ranks if sample else range(self.world)
        items: dict[int, int] = {}

        def build(payloads: list) -> None:
            for rank in ranks:
                self.budget.check()
                plan = load_plan(reads(rank))
                items[rank] = len(plan.items)
                payloads.append(pickle.dumps(plan, protocol=pickle.HIGHEST_PROTOCOL))

        payloads = built_or_floor(step, self.budget, build, unpickled)
        if payloads is None:
            return step
        largest, repeats = max(map(len, payloads)), 1
        if sample:
            job_bytes, _ = sample.scaled({rank: len(payload) for rank, payload in zip(ranks, payloads, strict=True)})
            repeats = max(1, math.ceil(min(job_bytes, SAMPLE_BYTES) / sum(map(len, payloads))))

        def work() -> None:
            plans = unpickled(payloads * repeats, self.budget)
            for plan in create_default_global_load_plan(plans):
                self.budget.check()
                pickle.dumps(plan, protocol=pickle.HIGHEST_PROTOCOL)

        run_step(step, self.budget, work, once=sample is not None)
        step.units = sum(items.values())
        if sample and step.complete and step.cpu_s:
            total, error = sample.scaled(items)
            step.cpu_s = round(step.cpu_s * total / (step.units * repeats), 4)
            step.units = round(total)
            step.rank_sample = {"ranks": len(payloads), "of": self.world, "error": round(error, 3)}
        step.host_bytes = 2 * gather_bytes(self.world, largest)
        return step
