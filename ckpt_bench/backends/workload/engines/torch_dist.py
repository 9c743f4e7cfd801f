"""`--engine torch_dist`: megatron-core `dist_checkpointing`, Megatron-LM's default checkpoint format.

Each rank allocates the sharded state a Megatron GPT of the workload's shape and layout holds with the
distributed optimizer (`megatron_shapes`: its model shards, replicated over data-parallel ranks, and its own
`dp_reshardable` optimizer shards), without a model, and saves and loads it as Megatron-LM does:

save   `dist_checkpointing.save` through `TorchDistSaveShardedStrategy` (`--thread-count` writer processes
       per rank) wrapped, as the experiment's `ckpt_fully_parallel_save` says (Megatron-LM's default), in
       `FullyParallelSaveStrategyWrapper` over the rank's data-parallel group, so each replicated shard is
       written once, by the rank megatron assigns it to (without it, by its main replica's rank); with
       `ckpt_assume_constant_structure`, the distribution and plan cached and later saves unvalidated, as
       Megatron-LM does. With `--async-save`, megatron's
       async path: `async_sharded_save=True`, the request scheduled on a persistent `AsyncCallsQueue` (the
       spawned writer process Megatron-LM requires for async saves); the save is durable when the blocking
       finalize returns (every rank's writes done, rank 0's `.metadata` and `metadata.json` written). Its
       phases: the writer's write | fsync (SAVE_WRITTEN), awaiting_finalize (megatron's blocking wait polls
       for the writer every 0.1 s, then waits for every rank's), the finalize on the waiting thread.
load   `dist_checkpointing.load` into preallocated tensors: with `ckpt_fully_parallel_load` through
       `FullyParallelLoadStrategyWrapper` (each rank reads part of the replicated shards and the data-parallel
       group exchanges the rest); without it (Megatron-LM's and Primus's default) every rank reads every shard it
       holds, replicas included.

fsync: megatron-core decides it, not this engine. Every `__{rank}_{thread}.distcp` is `os.fsync`ed by the
process that wrote it (`FileSystemWriterAsync.write_preloaded_data`, `use_fsync=True`, no switch), and the
coordinator's `.metadata` is written to a temporary file, fsynced and renamed (torch's `FileSystemWriter`,
`sync_files=True`); `common.pt` and `metadata.json` are not fsynced, nor is any directory. So the launcher
refuses `--no-sync-files` for this engine.

`--subset` (the first N ranks of a larger job): the fully-parallel save needs every rank of a data-parallel
group, and some are absent, so each rank writes what the full job's distribution assigns it (`megatron_shapes`
reproduces megatron's algorithm) through the plain strategy. The running ranks' shards do not cover
megatron's global tensors, and torch DCP refuses to finalize a global index with holes, so in a subset each
written shard (and object) is its own global tensor, keyed `<key>@<offset>`: every rank writes the same
tensors, bytes, write items and files as in the full job; only rank 0's `.metadata` indexes them differently.
A subset rank loads what it wrote.

The same code runs on GPUs with nccl: the tensors live on the rank's device and `cpu_compat` is inert.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.distributed as dist
from megatron.core import dist_checkpointing
from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor
from megatron.core.dist_checkpointing.serialization import get_default_load_sharded_strategy
from megatron.core.dist_checkpointing.strategies.async_utils import PersistentAsyncCaller
from megatron.core.dist_checkpointing.strategies.fully_parallel import (
    FullyParallelLoadStrategyWrapper,
    FullyParallelSaveStrategyWrapper,
)
from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy
from megatron.core.msc_utils import MultiStorageClientFeature

from ckpt_bench.backends.workload.engines.base import Engine, Pending, RankState, allocate_shards
from ckpt_bench.backends.workload.spec import WorkloadSpec
from ckpt_bench.core import megatron_release
from ckpt_bench.core.checkpoint_dir import ITER_DIR
from ckpt_bench.core.events import Phase
from ckpt_bench.layout.checkpoint_layout import Layout
from ckpt_bench.layout.megatron_shapes import (
    OPTIMIZER_SHARDING,
    MegatronGPT,
    ObjectShard,
    Shard,
    rank_shards,
)
from ckpt_bench.layout.workload import TORCH_DTYPE
from ckpt_bench.storage.base import WorkerStorage
from ckpt_bench.worker import cpu_compat
from ckpt_bench.worker.entry import WorkerContext
from ckpt_bench.worker.megatron_phases import (
    RecordWritten,
    common_check_hook,
    mark_finalize,
    mark_load_strategy,
    mark_save_strategy,
)

# Megatron-LM's `checkpoint_version` in common.pt (ckpt_bench.backends.megatron.formats writes the same; importing
# it would import the whole training side).
CHECKPOINT_VERSION = 3.0

# What Megatron-LM passes as `content_metadata` (its `_build_sharded_state_dict_metadata` with the distributed
# optimizer, cleaned of the process group): stored in common.pt, read back by Megatron-LM's loads.
CONTENT_METADATA = {
    "distrib_optim_sharding_type": OPTIMIZER_SHARDING,
    "singleton_local_shards": False,
    "chained_optim_avoid_prefix": True,
}


def _torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, TORCH_DTYPE[name])


# megatron-core's persistent async writer is a spawned process: it imports only what unpickling its target
# needs, and its first act is `torch.cuda.set_device(rank % torch.cuda.device_count())`, which fails without
# CUDA. The Megatron backend's worker installs `cpu_compat` at import for that reason (the spawned process
# re-imports it as __mp_main__); the workload worker imports engines lazily, so without CUDA the writer's
# target is replaced by this module's `_writer_loop`: unpickling it imports this module, whose import installs
# the redirections, and it then runs megatron's own loop. Where CUDA exists nothing is replaced.
cpu_compat.install()
_MEGATRON_WRITER_LOOP = PersistentAsyncCaller.async_loop


def _writer_loop(*args, **kwargs) -> None:
    """megatron-core's `PersistentAsyncCaller.async_loop`, in a writer process that has installed cpu_compat."""
    _MEGATRON_WRITER_LOOP(*args, **kwargs)


if not torch.cuda.is_available():
    PersistentAsyncCaller.async_loop = staticmethod(_writer_loop)


class TorchDistEngine(Engine):
    """One rank of a Megatron job's `torch_dist` checkpoint."""

    first_load_phase = Phase.METADATA  # the load strategy comes from the checkpoint's metadata.json

    def __init__(self, spec: WorkloadSpec, layout: Layout, context: WorkerContext, storage: WorkerStorage):
        super().__init__(spec, layout, context, storage)
        # A file system save dir: megatron-core's file I/O, chosen, not inherited (0.16.1 turns multi-storage-client
        # on for local paths too whenever it imports, and its writers' fsyncs are then not the file system's).
        MultiStorageClientFeature.disable()
        self.gpt = MegatronGPT(self.layout.workload, self.layout.world_size)
        self.shards = rank_shards(self.gpt, self.share.rank)
        self.subset = self.layout.is_subset
        # Built once, as Megatron-LM keeps its strategies between saves (`checkpointing_context`).
        self._group = None if self.subset else self._data_parallel_group()
        # The experiment's own settings, as Megatron-LM's save_checkpoint applies them (checkpointing.py 610-629).
        self.settings = self.gpt.job.checkpointing
        self._save_strategy = TorchDistSaveShardedStrategy("torch_dist", 1, thread_count=self.spec.thread_count)
        self._save_strategy.use_cached_ckpt_structure = self.settings.ckpt_assume_constant_structure
        base = self._save_strategy
        if not self.subset and self.settings.ckpt_fully_parallel_save:
            self._save_strategy = FullyParallelSaveStrategyWrapper(
                self._save_strategy, self._group, self.settings.ckpt_assume_constant_structure)
        self._saved_before = False  # Megatron-LM validates the sharding of a later save only without constant structure
        mark_save_strategy(self._save_strategy, self.phases, not self.spec.async_save, base)
        self._async_queue = (megatron_release.async_calls_queue(self.spec.async_strategy, persistent=True)
                             if self.spec.async_save else None)
        self._tensors: dict[str, torch.Tensor] = {}  # the allocated shards' tensors, by `Shard.name`
        self._state_dict: dict = {}  # the sharded state dict of the next save or load (dist_checkpointing edits it)
        self._writes_nothing = False  # the async save in flight has no writer on this rank

    def _data_parallel_group(self) -> dist.ProcessGroup:
        """This rank's data-parallel group; every rank creates all of them, in the same order."""
        gpt = self.gpt
        groups = [gpt.parallel.data_parallel_group(tp_rank, pp_rank) for pp_rank in range(gpt.pp)
                  for tp_rank in range(gpt.tp)]
        group, _ = dist.new_subgroups_by_enumeration(groups)
        return group

    # ---- state --------------------------------------------------------------------------------------------

    @property
    def _checkpointed(self) -> list[Shard]:
        """The shards in this rank's save and load state dicts, and so digested and checked after a load:
        all it holds (the wrapper picks the writers; a load reads or exchanges each), or in a subset those
        it writes."""
        return self.shards.written_shards if self.subset else list(self.shards.shards)

    def _allocate(self, fill: bool) -> RankState:
        """All the rank's shards, random (or ones, as the workload says), or for a load the checkpointed ones,
        uninitialized. The perturbed shard is the one megatron's layout picks where this rank checkpoints it
        (a subset rank may not write it: then the worker picks its smallest, as it loads only what it wrote)."""
        self._tensors = allocate_shards(self.shards.shards if fill else self._checkpointed, self.spec.seed,
                                        self.layout.workload.randomize_tensor, self.context.device, fill)
        checkpointed = {shard.name: self._tensors[shard.name] for shard in self._checkpointed}
        perturbed = self.shards.perturbed if self.shards.perturbed in checkpointed else None
        return RankState(checkpointed, [], perturbed=perturbed)

    def allocate(self) -> RankState:
        return self._allocate(fill=True)

    def allocate_for_load(self) -> RankState:
        return self._allocate(fill=False)

    def _sharded_tensor(self, shard: Shard) -> ShardedTensor:
        data, dtype = self._tensors[shard.name], _torch_dtype(shard.dtype)
        if self.subset:  # its own global tensor (see the module docstring)
            ones = (1,) * len(shard.local_shape)
            return ShardedTensor(shard.name, data, dtype, shard.local_shape, shard.local_shape, (0,) * len(ones), ones)
        return ShardedTensor(shard.key, data, dtype, shard.local_shape, shard.global_shape, shard.global_offset,
                             shard.axis_fragmentations, shard.replica_id, shard.prepend_axis_num)

    def _sharded_object(self, obj: ObjectShard) -> ShardedObject:
        value = None
        if obj.bucket_numels is not None:  # per buffer, keyed by its (param, grad) torch dtypes, as megatron does
            dtypes = tuple(map(_torch_dtype, self.gpt.buffer_dtypes))
            value = [{dtypes: list(numels)} for numels in obj.bucket_numels]
        if self.subset:
            return ShardedObject(obj.name, value, (1,), (0,), 0)
        return ShardedObject(obj.key, value, obj.global_shape, obj.global_offset, obj.replica_id)

    def _sharded_state_dict(self, iteration: int) -> dict:
        """Megatron-LM's checkpoint state dict: model, optimizer (its `param_state` and objects), common values."""
        checkpointed = {shard.name for shard in self._checkpointed}
        objects = self.shards.written_objects if self.subset else self.shards.objects
        optimizer = {o.name: self._sharded_object(o) for o in objects if o.key.startswith("optimizer.")}
        optimizer["param_state"] = {s.name: self._sharded_tensor(s) for s in self.shards.optimizer
                                    if s.name in checkpointed}
        optimizer["param_state_sharding_type"] = OPTIMIZER_SHARDING
        model = {s.name: self._sharded_tensor(s) for s in self.shards.model if s.name in checkpointed}
        model |= {o.name: self._sharded_object(o) for o in objects if not o.key.startswith("optimizer.")}
        return {"model": model, "optimizer": optimizer, "checkpoint_version": CHECKPOINT_VERSION,
                "iteration": iteration}

    def prepare(self, state: RankState, location: str) -> None:
        """Untimed, as Megatron-LM builds its state dict before the timed save: the sharded state dict over
        the rank's tensors, and the folder (rank 0 creates it; the others write only after the planning
        collectives)."""
        self._state_dict = self._sharded_state_dict(int(ITER_DIR.match(Path(location).name).group(1)))
        if self.context.rank == 0:
            Path(location).mkdir(parents=True, exist_ok=True)

    # ---- save and load ------------------------------------------------------------------------------------

    def save(self, state: RankState, location: str) -> Pending | None:
        validate = not (self._saved_before and self.settings.ckpt_assume_constant_structure)
        self._saved_before = True
        request = dist_checkpointing.save(self._state_dict, location, self._save_strategy,
                                          async_sharded_save=self.spec.async_save, content_metadata=CONTENT_METADATA,
                                          validate_access_integrity=validate,
                                          preprocess_common_before_consistancy_check=common_check_hook(self.phases),
                                          **megatron_release.save_arguments(self.spec.async_strategy))
        if request is None:
            return None
        # Phases: the persistent writer stages the state while this rank waits (schedule), then records its
        # write | fsync; the finalize functions run in `_finalize`, on the thread that waits for them.
        self._writes_nothing = request.async_fn is None
        if not self._writes_nothing:
            iteration = int(ITER_DIR.match(Path(location).name).group(1))
            request = request._replace(async_fn=RecordWritten(request.async_fn, self.spec.events_dir,
                                                              self.context.rank, iteration, location))
        request = mark_finalize(request, self.background)
        self.phases.begin(Phase.SCHEDULE)
        self._async_queue.schedule_async_request(request)  # every rank, even one with nothing to write
        return self._finalize

    def _finalize(self) -> None:
        """Wait for this save's writers on every rank and finalize it (collective). The worker calls it on a
        thread of its own, and megatron's finalize all-reduces on the current CUDA device, which is per thread."""
        if self._writes_nothing:  # no writer records this rank's part: it awaits the finalize from now
            self.background.open(Phase.AWAITING_FINALIZE, time.monotonic_ns())
        if self.context.device.type == "cuda":
            torch.cuda.set_device(self.context.device)
        self._async_queue.maybe_finalize_async_calls(blocking=True)

    def load(self, state: RankState, location: str) -> dict[str, torch.Tensor]:
        strategy = get_default_load_sharded_strategy(location)
        if not self.subset and self.settings.ckpt_fully_parallel_load:
            strategy = FullyParallelLoadStrategyWrapper(strategy, self._group)
        self.phases.begin(Phase.VALIDATE_COMMON)
        loaded = dist_checkpointing.load(self._state_dict, location, mark_load_strategy(strategy, self.phases))
        # megatron-core drops the empty dicts of a state: a subset rank that wrote no model tensor (a dense job's
        # replicated state spread over more data-parallel ranks than it has tensors) gets no "model" back.
        tensors = {**loaded.get("model", {}), **loaded.get("optimizer", {}).get("param_state", {})}
        return {name: tensors[name] for name in state.tensors}

    def close(self) -> None:
        if self._async_queue is not None:
            self._async_queue.close()  # finalizes what is left, stops the writer process


ENGINE = TorchDistEngine
