"""What a plan says the run is, typed: `RunInfo`, which the lifecycle writes into run.json (`run_info`) and
the report shows (the Primus checkpoint tool's configuration keys at its top level, the rest under `config`).

Every runner states its name and where its ranks ran (`Ranks`); a runner that saves states how
(`SaveConfig`: the report's configuration keys, `report.engine.CONFIG_KEYS`, and fsync) and, where it
reports it, its storage. A backend's own facts are the fields of its subclass (`DcpRunInfo`, ...), beside
its launcher. run.json holds one flat object, so a report can be rebuilt from a run.json of any version.
"""

from __future__ import annotations

from dataclasses import dataclass

from ckpt_bench.core.run_facts import stated
from ckpt_bench.launcher.torchrun import Topology


@dataclass(kw_only=True)
class Ranks:
    """Where a run's ranks ran."""

    world_size: int
    nnodes: int
    nproc_per_node: int

    @classmethod
    def of(cls, topology: Topology) -> Ranks:
        return cls(world_size=topology.world_size, nnodes=topology.nnodes, nproc_per_node=topology.nproc_per_node)


@dataclass(kw_only=True)
class SaveConfig:
    """How a run saves. Beside `fsync` and `sync_files`, the fields are the report's configuration keys; one a
    backend has no such setting for stays None and is left out of run.json (the report shows it null)."""

    data_parallel_size: int
    ckpt_format: str
    async_save: bool
    params_dtype: str
    fsync: bool | None
    """Every file was fsynced before a save counted as complete; None on object storage, where an upload is
    durable once acknowledged."""
    ckpt_fully_parallel_save: bool | None = None
    ckpt_fully_parallel_load: bool | None = None
    save_interval: int | None = None
    optimizer: str | None = None
    use_distributed_optimizer: bool | None = None
    main_params_dtype: str | None = None
    exp_avg_dtype: str | None = None
    exp_avg_sq_dtype: str | None = None
    sync_files: bool | None = None
    """--sync-files, where the backend has the option."""


def object_store(storage: dict) -> bool:
    """Whether a storage (`CheckpointStorage.describe()`) is an object store, where nothing is fsynced: an upload is
    durable once acknowledged (s3://, or an msc:// profile of any provider but a POSIX folder)."""
    return storage["storage"] == "s3" or (storage["storage"] == "msc" and storage.get("msc_provider") != "file")


def fsynced(sync_files: bool, storage: dict) -> bool | None:
    """`SaveConfig.fsync` of a backend that fsyncs as --sync-files says: None on object storage (`object_store`)."""
    return sync_files if not object_store(storage) else None


@dataclass(kw_only=True)
class RunInfo:
    """A run as its plan decided it: the runner, its ranks, how it saves and where. Backends with facts
    of their own subclass it."""

    backend: str
    """The runner (`--backend` or `--framework` name)."""
    ranks: Ranks
    saves: SaveConfig | None = None
    """None: the run saves no checkpoint (the comms sweep)."""
    storage: dict | None = None
    """`CheckpointStorage.describe()` of the checkpoints' storage, where the backend reports it."""
    experiment: str | None = None
    """The experiment file the run came from, beside its exp_name (`core.experiment.experiment_label`)."""

    @property
    def fsync(self) -> bool | None:
        return self.saves.fsync if self.saves is not None else None

    def to_json(self) -> dict:
        """run.json's `run_info`: one flat object of every fact, the ranks', the saves' and the storage's
        among them."""
        facts = stated(self)
        backend, ranks = facts.pop("backend"), facts.pop("ranks")
        saves, storage = facts.pop("saves", None), facts.pop("storage", None)
        return {"backend": backend, **stated(ranks), **facts, **(stated(saves) if saves is not None else {}),
                **(storage or {})}

