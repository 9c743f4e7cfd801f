"""The two checkpoint formats of Megatron-LM, as Megatron-LM's `checkpointing.py` writes them.

    torch_dist  <save>/iter_0000002/{__R_N.distcp, .metadata, common.pt, metadata.json}
                one sharded checkpoint written by all ranks through megatron-core's
                `dist_checkpointing` (model and optimizer `sharded_state_dict`s); can be async.
    torch       <save>/iter_0000002/mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt
                one `torch.save` file per model-parallel rank, written by its data-parallel
                rank 0 (expert-data-parallel rank 0 with experts); synchronous only.

Both hold `args`, `checkpoint_version` and `iteration` next to `model` and `optimizer`, as
Megatron-LM's `generate_state_dict` does. (No `rng_state` and no scheduler: as with Megatron-LM's
`--no-save-rng`, and the worker's learning rate is constant.)

A format also says which bytes a rank wrote and whose integrity manifest a rank's loaded state is
checked against (its own for torch_dist; the writer of its file for torch), and marks the phases of its
saves and loads on its `phases` clock (ckpt_bench.worker.phases): torch_dist from megatron-core's own
steps (ckpt_bench.worker.megatron_phases), its loads ending in copy_in (into the model and optimizer);
torch's save is one phase, write (torch.save serializing and writing one file, no fsync), its load
read | copy_in.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
from megatron.core import dist_checkpointing, parallel_state
from megatron.core.dist_checkpointing.serialization import (
    get_default_load_sharded_strategy,
    get_default_save_sharded_strategy,
)
from megatron.core.dist_checkpointing.strategies.async_utils import AsyncRequest
from megatron.core.dist_checkpointing.strategies.fully_parallel import (
    FullyParallelLoadStrategyWrapper,
    FullyParallelSaveStrategyWrapper,
)
from megatron.core.msc_utils import MultiStorageClientFeature
from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

from ckpt_bench.backends.megatron.training import Trainer
from ckpt_bench.core import megatron_release
from ckpt_bench.core.checkpoint_dir import TRACKER_FILE, tracker_iteration
from ckpt_bench.core.events import Phase
from ckpt_bench.worker.megatron_phases import common_check_hook, mark_load_strategy, mark_save_strategy
from ckpt_bench.worker.phases import PhaseClock

CHECKPOINT_VERSION = 3.0


def use_msc(enabled: bool) -> None:
    """megatron-core's checkpoint I/O through multi-storage-client (`enabled`: its writers' `msc.open`, the
    `MultiStorageFileSystemReader` of `get_default_load_sharded_strategy`) or through the file system. Chosen, not
    inherited: megatron-core 0.16.1 turns MSC on whenever multistorageclient imports, local paths included."""
    if enabled:
        MultiStorageClientFeature.enable()
    else:
        MultiStorageClientFeature.disable()


def checkpoint_path(path: str) -> Path:
    """`path` as megatron-core reaches it: an MSC path (msc:// or local) where MSC is on, else a file system one."""
    if MultiStorageClientFeature.is_enabled():
        return MultiStorageClientFeature.import_package().Path(path)
    return Path(path)


class TorchDistFormat:
    name = "torch_dist"
    # A load of a checkpoint reads the bytes its save wrote (each shard once): the report may size one by the other.
    load_reads_what_save_wrote = True

    def __init__(self, args: argparse.Namespace, trainer: Trainer):
        self.args = args
        self.trainer = trainer
        self.rank = torch.distributed.get_rank()
        self._save_strategy = None  # built once: the fully-parallel wrapper caches its distribution
        self.phases = PhaseClock()
        self.first_save_phase = Phase.STATE_DICT
        self.first_load_phase = Phase.METADATA

    def state_dict(self, iteration: int, is_loading: bool = False) -> dict:
        metadata = _sharded_state_dict_metadata(self.args)
        model = self.trainer.model.module.sharded_state_dict(metadata=metadata)
        return {
            "args": self.args,
            "checkpoint_version": CHECKPOINT_VERSION,
            "iteration": iteration,
            "model": model,
            "optimizer": self.trainer.optimizer.sharded_state_dict(model, is_loading=is_loading, metadata=metadata),
        }

    def prepare(self, directory: str) -> None:
        """Before the timed save. As Megatron-LM: rank 0 creates the folder, the others write into it
        only after the planning collectives."""
        if self.rank == 0:
            checkpoint_path(directory).mkdir(parents=True, exist_ok=True)

    def save(self, directory: str, state_dict: dict) -> AsyncRequest | None:
        """Writes (sync) or plans (async: returns the request to schedule) `state_dict` (this format's
        `state_dict()`, built before the timed call: dist_checkpointing modifies it in place)."""
        # The common part's consistency hook changes nothing: it marks where the sharding check begins.
        return dist_checkpointing.save(
            state_dict, directory, self._strategy(), async_sharded_save=self.args.async_save,
            preprocess_common_before_consistancy_check=common_check_hook(self.phases),
            **megatron_release.save_arguments(self.args.async_strategy))

    def _strategy(self):
        if self._save_strategy is None:
            strategy = get_default_save_sharded_strategy(self.name)
            # As Megatron-LM: with a constant structure the save plan is computed once, then reused.
            strategy.use_cached_ckpt_structure = bool(self.args.ckpt_assume_constant_structure)
            base = strategy
            if self.args.ckpt_fully_parallel_save:
                strategy = FullyParallelSaveStrategyWrapper(
                    strategy,
                    parallel_state.get_data_parallel_group(with_context_parallel=True),
                    self.args.ckpt_assume_constant_structure,
                )
            self._save_strategy = mark_save_strategy(strategy, self.phases, not self.args.async_save, base)
        return self._save_strategy

    def load(self, directory: str, iteration: int) -> int | None:
        """Loads into the model and optimizer. Returns None: how many bytes this rank read is not
        observable here (a fully-parallel load reads a part and exchanges the rest)."""
        strategy = get_default_load_sharded_strategy(directory)
        if self.args.ckpt_fully_parallel_load:
            strategy = FullyParallelLoadStrategyWrapper(
                strategy, parallel_state.get_data_parallel_group(with_context_parallel=True)
            )
        mark_load_strategy(strategy, self.phases)
        self.phases.begin(Phase.STATE_DICT)
        _init_distributed_optimizer_state(self.trainer.optimizer)
        state_dict = self.state_dict(iteration, is_loading=True)
        self.phases.begin(Phase.VALIDATE_COMMON)
        state = dist_checkpointing.load(state_dict, directory, strategy, strict=self.args.dist_ckpt_strictness)
        if isinstance(state, tuple):  # the return_* strictness modes add the missing and unexpected keys
            state = state[0]
        self.phases.begin(Phase.COPY_IN)
        self.trainer.model.module.load_state_dict(state["model"])
        with torch.no_grad():  # the DistributedOptimizer copies into leaf params that require grad
            self.trainer.optimizer.load_state_dict(state["optimizer"])
        return None

    def written_bytes(self, directory: str) -> int:
        return rank_written_bytes(directory, self.rank)

    tracked = True  # its folder's latest_checkpointed_iteration.txt names the latest checkpoint

    def latest(self, root: str) -> int | None:
        """The iteration the tracker in `root` names (read through MSC where it is on)."""
        return tracker_iteration(checkpoint_path(root) / TRACKER_FILE)

    @property
    def writes(self) -> bool:
        return True

    @property
    def manifest_rank(self) -> int:
        return self.rank


def _init_distributed_optimizer_state(optimizer) -> None:
    """Give a fresh DistributedOptimizer the state its `sharded_state_dict` reads.

    Without Apex or Transformer Engine the inner optimizer is torch's Adam, which keeps a `step`
    per parameter and creates it on its first step only; `DistributedOptimizer.state_dict` asserts
    on it. megatron-core's own remedy (used for its fsdp_dtensor loads) is a zero-gradient step on
    the optimizer's shards; whatever it changes is overwritten by the load that follows.
    """
    for inner in getattr(optimizer, "chained_optimizers", [optimizer]):
        if isinstance(inner, DistributedOptimizer) and not inner.optimizer.state:
            inner._init_optimizer_states_with_dummy_values()


def rank_written_bytes(directory: str, rank: int) -> int:
    """Bytes of the files `rank` wrote into a torch_dist checkpoint: its `__<rank>_*.distcp` shards
    (megatron-core's FileSystemWriterAsync prefix), and `common.pt`, which rank 0 writes (up to 0.16.1; 0.19 keeps the
    common state in the shards)."""
    root = checkpoint_path(directory)
    files = list(root.glob(f"__{rank}_*.distcp"))
    if rank == 0:
        files.append(root / "common.pt")
    return sum(f.stat().st_size for f in files if f.is_file())


class TorchFormat:
    name = "torch"
    # Every rank of a model-parallel position loads the file its data-parallel rank 0 wrote.
    load_reads_what_save_wrote = False

    def __init__(self, args: argparse.Namespace, trainer: Trainer):
        self.args = args
        self.trainer = trainer
        # Replicas of the same model-parallel shard: the first one writes, all of them read.
        group = parallel_state.get_expert_data_parallel_group()
        self.writer_rank = torch.distributed.get_global_rank(group, 0)
        self.phases = PhaseClock()
        self.first_save_phase = Phase.WRITE
        self.first_load_phase = Phase.READ

    def file(self, directory: str) -> str:
        """Megatron-LM's `get_checkpoint_name` for the legacy format."""
        name = f"mp_rank_{parallel_state.get_tensor_model_parallel_rank():02d}"
        if self.args.pipeline_model_parallel_size > 1:
            name += f"_{parallel_state.get_pipeline_model_parallel_rank():03d}"
        if self.args.expert_model_parallel_size > 1:
            name += f"_{parallel_state.get_expert_model_parallel_rank():03d}"
        return os.path.join(directory, name, "model_optim_rng.pt")

    def state_dict(self, iteration: int) -> dict:
        return {
            "args": self.args,
            "checkpoint_version": CHECKPOINT_VERSION,
            "iteration": iteration,
            "model": self.trainer.model.module.state_dict_for_save_checkpoint(),
            "optimizer": self.trainer.optimizer.state_dict(),
        }

    def prepare(self, directory: str) -> None:
        if self.writes:
            os.makedirs(os.path.dirname(self.file(directory)), exist_ok=True)

    def save(self, directory: str, state_dict: dict) -> None:
        if self.writes:
            torch.save(state_dict, self.file(directory))

    def load(self, directory: str, iteration: int) -> int:
        path = self.file(directory)
        state = torch.load(path, map_location="cpu", weights_only=False)
        self.phases.begin(Phase.COPY_IN)
        self.trainer.model.module.load_state_dict(state["model"])
        self.trainer.optimizer.load_state_dict(state["optimizer"])
        return os.path.getsize(path)

    def written_bytes(self, directory: str) -> int:
        return os.path.getsize(self.file(directory)) if self.writes else 0

    tracked = True
    latest = TorchDistFormat.latest

    @property
    def writes(self) -> bool:
        return torch.distributed.get_rank() == self.writer_rank

    @property
    def manifest_rank(self) -> int:
        return self.writer_rank


class LocalFormat(TorchDistFormat):
    """Megatron-LM's non-persistent `local` checkpoints: the same sharded state, through nvidia-resiliency-ext's
    `LocalCheckpointManager` (one `torch.save` file a rank in `<root>/<rank>/`, its older ones removed once saved),
    with `--replication`: `CliqueReplicationStrategy` copies each rank's file to `replication_factor - 1` peers
    `replication_jump` ranks apart before it is written, so a rank whose copy is lost retrieves it from a peer.
    Built as Megatron-LM's `save_checkpoint`/`_load_non_persistent_base_checkpoint` build it: megatron-core's
    `MCoreTensorAwareStateDict` with `non_persistent_local_ckpt_algo` over the data-parallel x context-parallel
    group. No fsync (the manager's torch.save); synchronous."""

    # Its saves hold replicas of the peers' files; a load reads a rank's own file only.
    load_reads_what_save_wrote = False

    name = "local"
    tracked = False  # the manager finds the latest complete checkpoint over every rank's files

    def __init__(self, args: argparse.Namespace, trainer: Trainer, root: str):
        super().__init__(args, trainer)
        from nvidia_resiliency_ext.checkpointing.local.ckpt_managers.local_manager import LocalCheckpointManager
        from nvidia_resiliency_ext.checkpointing.local.replication.strategies import CliqueReplicationStrategy

        replication = (CliqueReplicationStrategy.from_replication_params(args.replication_jump,
                                                                         args.replication_factor)
                       if args.replication else None)
        self.manager = LocalCheckpointManager(root, repl_strategy=replication)
        self.group = parallel_state.get_data_parallel_group(with_context_parallel=True)

    def prepare(self, directory: str) -> None:
        pass  # the manager makes each rank's folder

    def save(self, directory: str, state_dict: dict) -> None:
        from megatron.core.dist_checkpointing.tensor_aware_state_dict import MCoreTensorAwareStateDict

        tensor_aware, _ = MCoreTensorAwareStateDict.from_state_dict(
            state_dict, algo=self.args.non_persistent_local_ckpt_algo, parallelization_group=self.group)
        self.phases.begin(Phase.WRITE)  # the replicas' exchange, each file's torch.save, the manager's finalize
        self.manager.save(tensor_aware, state_dict["iteration"], is_async=False)

    def latest(self, root: str) -> int | None:
        iteration = self.manager.find_latest()
        return iteration if iteration >= 0 else None

    def load(self, directory: str, iteration: int) -> int:
        """Loads through the manager (a lost file retrieved from a peer's replica). Returns None: which files a
        rank read depends on which were lost."""
        self.phases.begin(Phase.STATE_DICT)
        _init_distributed_optimizer_state(self.trainer.optimizer)
        state_dict = self.state_dict(iteration, is_loading=True)
        self.phases.begin(Phase.READ)
        tensor_aware, _ = self.manager.load()
        state = tensor_aware.to_state_dict(state_dict, algo=self.args.non_persistent_local_ckpt_algo,
                                           parallelization_group=self.group)
        self.phases.begin(Phase.COPY_IN)
        self.trainer.model.module.load_state_dict(state["model"])
        with torch.no_grad():
            self.trainer.optimizer.load_state_dict(state["optimizer"])
        return None

    def written_bytes(self, directory: str) -> int:
        """This rank's files of the checkpoint: its own and the replicas it holds of its peers'."""
        iteration = os.path.basename(directory)
        return sum(f.stat().st_size for f in Path(self.manager.local_ckpt_dir).glob(f"{iteration}_*"))


def _sharded_state_dict_metadata(args: argparse.Namespace) -> dict:
    """Megatron-LM's `_build_sharded_state_dict_metadata`."""
    metadata = {"singleton_local_shards": False, "chained_optim_avoid_prefix": True}
    if args.use_distributed_optimizer:
        metadata["distrib_optim_sharding_type"] = (
            "fully_reshardable" if args.dist_ckpt_optim_fully_reshardable else "dp_reshardable"
        )
    return metadata


def checkpoint_format(args: argparse.Namespace, trainer: Trainer) -> TorchDistFormat | TorchFormat:
    return TorchDistFormat(args, trainer) if args.ckpt_format == "torch_dist" else TorchFormat(args, trainer)


# Megatron-LM's folders of non-persistent checkpoints inside --save: its default `non_persistent_global_ckpt_dir`,
# and ours for the local ones (Megatron-LM asks for --non-persistent-local-ckpt-dir; here the run's folder holds it).
NON_PERSISTENT_FOLDERS = {"global": "non_persistent", "local": "non_persistent_local"}


def non_persistent_format(args: argparse.Namespace, trainer: Trainer) -> tuple[TorchDistFormat, str] | None:
    """The format and folder of Megatron-LM's non-persistent checkpoints (`non_persistent_ckpt_type`), or None."""
    kind = args.non_persistent_ckpt_type
    if kind is None:
        return None
    root = os.path.join(args.save, NON_PERSISTENT_FOLDERS[kind])
    return (TorchDistFormat(args, trainer) if kind == "global" else LocalFormat(args, trainer, root)), root
