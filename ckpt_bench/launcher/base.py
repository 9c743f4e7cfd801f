"""What every runner of a benchmark is: a `Backend` with typed options that turns a `LaunchConfig` into
a `Plan`; `ckpt_bench.benchmark.lifecycle` carries the plan out the same way for all of them.

A backend (the built-in Megatron worker, DCP, Lightning, the comms sweep) or a framework mode (Primus,
Megatron-LM) is its `Config` dataclass (its options, their defaults and checks) and `plan()`, whose `Plan`
carries the typed spec its ranks read (`core.worker_spec.WorkerSpec`) and what the report says the run is
(`launcher.run_info.RunInfo`). `ckpt_bench.benchmark.registry` lists them; the CLI, sweeps and `--emit` all
go through it.

Options several backends read are declared here once (`ASYNC_SAVE`, `SAVE_CALLS`, `LOAD_CALLS`,
`THREAD_COUNT`, `SYNC_FILES`, `DIST_BACKEND`, `SET`), each backend giving its own default.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ckpt_bench.core.options import Flag, Options
from ckpt_bench.core.worker_spec import WorkerSpec
from ckpt_bench.launcher.run_info import RunInfo

if TYPE_CHECKING:
    from ckpt_bench.core.rundir import RunDir
    from ckpt_bench.launcher.config import LaunchConfig
    from ckpt_bench.storage import CheckpointStorage

ConfigT = TypeVar("ConfigT", bound=Options)  # a runner's options (`Backend[DcpConfig]`)

ASYNC_SAVE = Flag(("--async-save",), "Save asynchronously: training resumes before the write ends.", type=bool,
                  toggle="--no-async-save")
SAVE_CALLS = Flag(("--save-calls",), "Number of saves.", type=int, min=1)
LOAD_CALLS = Flag(("--load-calls",), "Number of loads (0: no load pass).", type=int, min=0)
THREAD_COUNT = Flag(("--thread-count",), "Writer threads per rank.", type=int, min=1)
SYNC_FILES = Flag(("--sync-files",), "fsync files after writing (local disk; default on).", type=bool,
                  toggle="--no-sync-files")
DIST_BACKEND = Flag(("--dist-backend",), "torch.distributed backend (default: nccl on GPU, gloo on CPU).",
                    choices=("gloo", "nccl"))
PRIMUS_PATH = Flag(("--primus-path",), "Primus checkout: the experiment's presets are read from its "
                   "primus/configs/ (default: $PRIMUS_PATH, else the working directory or a folder above the "
                   "experiment when one holds primus/configs/).", metavar="DIR")
SET = Flag(("--set",), "Override a setting, e.g. --set num_layers=8 (repeatable): Megatron-LM arguments for the "
           "Megatron backend and frameworks, the demo model's sizes for Lightning.", multiple=True,
           metavar="KEY=VALUE")


@dataclass
class WorkerPass:
    name: str  # "save" | "load" | ...
    args: list[str]  # arguments to the worker module, after `--spec <worker.json>`
    module: str | None = None  # another worker than the plan's (the --preflight comms sweep)
    spec: bool = True  # pass `--spec <worker.json>` first; a framework's own script takes no spec
    # A framework's launcher that starts the ranks itself (e.g. Primus's run_pretrain.sh), run instead
    # of torchrun with `env` added and in `cwd`; its output is kept like a pass's console.log.
    command: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    show_progress: Callable[[str], bool] | None = None  # None: the plan's
    # Evict the run's checkpoints from this host's page cache before the pass (unless --warm-load): for
    # a framework's load, which does not do it itself (our workers do, before every load).
    evict_before: bool = False
    nproc_per_node: int | None = None  # ranks per node of this pass; None: the run's (--load-nproc-per-node)


@dataclass(kw_only=True)
class Plan:
    """What a backend wants run, decided and validated before anything is launched."""

    name: str  # run name (e.g. the experiment name)
    worker_module: str  # run with `python -m torch.distributed.run ... -m <worker_module>`
    resolved_config: dict[str, Any]  # written to resolved.yaml: the backend's document (Megatron: its experiment)
    # What the ranks read (worker.json, the lifecycle adds the run's paths); None: the run's paths alone
    # (the comms sweep, a framework's own script).
    spec: WorkerSpec | None = None
    run_info: RunInfo  # run.json's run_info: the report's configuration and the backend's own facts
    passes: list[WorkerPass]
    checkpoints: Checkpoints | None  # None: the passes save nothing (the comms sweep); the report is theirs
    show_progress: Callable[[str], bool] = lambda line: False
    verifies: bool = True  # the load pass checks what it loaded (ckpt_bench.worker.integrity); a framework's does not
    # Called on every node once the run directory and checkpoint folder exist (checkpoint_dir None
    # without checkpoints), to put their paths into the passes (a framework's --save, its YAML).
    bind: Callable[[RunDir, str | None], None] | None = None
    # Called on node 0 after the passes: turns what they left that is not events (a framework's
    # logs) into events under the run's events/; returns notes for the report.
    collect: Callable[[RunDir], list[str]] | None = None
    # Called on node 0 with the report once report.json is written: files in another tool's layout beside
    # it (a workload's DLIO-style summary.json).
    outputs: Callable[[RunDir, dict], None] | None = None
    notes: list[str] = field(default_factory=list)  # what the report should say about this plan
    # What the report projects the whole job from (`ckpt_bench.projection.projection_inputs`: the job's checkpoint
    # at its full size and the figures given), written into the run directory; None: no projection.
    projection_inputs: dict | None = None

    def preview(self, launch: LaunchConfig) -> dict:
        """`--plan` of any backend: the run's facts (run.json's run_info), its passes, the spec its ranks
        would read, where its checkpoints would go."""
        return {
            "backend": launch.runner,
            "name": self.name,
            "world_size": launch.topology.world_size,
            **dataclasses.asdict(self.run_info),
            "checkpoints": None if self.checkpoints is None else {
                "storage": self.checkpoints.storage.kind, "expected_bytes": self.checkpoints.expected_bytes,
                "writers_per_rank": self.checkpoints.writers_per_rank, "kept": self.checkpoints.keep},
            "passes": [{"name": p.name, "nproc_per_node": p.nproc_per_node or launch.topology.nproc_per_node}
                       for p in self.passes],
            "spec": None if self.spec is None else dataclasses.asdict(self.spec),
            "notes": self.notes,
        }


class Backend(ABC, Generic[ConfigT]):
    """A runner: the options it reads and the plan it makes of them. Subclasses name their `Config` as the
    type argument too (`Backend[DcpConfig]`), so that `plan` gets `launch.options` typed; they set the
    class attributes and implement `plan`."""

    name: ClassVar[str]  # --backend NAME (or --framework NAME when `framework`)
    title: ClassVar[str]  # its --help section
    Config: type[ConfigT]  # its typed options: build_launch makes `launch.options` of it
    framework: ClassVar[bool] = False  # chosen with --framework, not --backend
    selected_by: ClassVar[str | None] = None  # an option of its own that chooses it without --backend

    def preview(self, launch: LaunchConfig[ConfigT]) -> dict:
        """What the run would do (`--plan`), printed instead of running; creates nothing. By default its
        plan's facts: the ranks, what each pass runs, what the ranks would read, where checkpoints go."""
        return self.plan(launch).preview(launch)

    @classmethod
    def environment_options(cls, values: Mapping, environ: Mapping[str, str], given: set[str]) -> dict:
        """`values` (option name -> value) with what this runner takes from environment variables for
        the options not `given` on the command line (Lightning: dataflux's variables). Raises
        ConfigError for a bad value."""
        return dict(values)

    @abstractmethod
    def plan(self, launch: LaunchConfig[ConfigT]) -> Plan:
        """Resolve and validate; raise ConfigError with one line for a user mistake. Creates nothing."""


@dataclass(frozen=True)
class Checkpoints:
    """What the lifecycle does with a plan's checkpoints: where they go, whether they stay, how they
    are loaded."""

    storage: CheckpointStorage  # checked, then created by the lifecycle; the ranks write below it
    keep: bool  # False: removed after the report (only a folder the run created)
    warm_load: bool  # True: loads read from the page cache, not cold
    storage_baseline: bool = False  # after the passes, measure the storage with the save's I/O shape
    writers_per_rank: int = 1  # files a rank writes at once (DCP's thread_count): the baseline's concurrency
    # Bytes the run's checkpoints hold on storage at their peak (every save it keeps), when the plan can tell:
    # checked against the free space before anything starts.
    expected_bytes: int | None = None


@dataclass
class CheckpointOptions(Options):
    """Options of every runner that saves checkpoints."""

    section: ClassVar[str] = "Checkpoints (every backend that saves)"

    save_dir: str | None = Flag(
        ("--save-dir",), "Where checkpoints go: a new folder <save-dir>/<run-name>/ is created (default: inside "
        "the run directory). A path, s3://bucket/prefix, or another fsspec URL where the backend supports it.",
    ).field()
    keep_checkpoints: bool = Flag(
        ("--keep-checkpoints", "--no-remove-outputs"), "Keep the checkpoints after the report (default: remove "
        "the folder this run created).", type=bool,
    ).field(False)
    warm_load: bool = Flag(
        ("--warm-load",), "Load with the checkpoint in the page cache (default: evict it first, a cold load).",
        type=bool,
    ).field(False)

    storage_baseline: bool = Flag(
        ("--storage-baseline",), "After the benchmark, measure the storage itself with the checkpoint's I/O "
        "shape (same files, bytes, writers, fsync; fio where installed) and report the fraction of that peak "
        "each save and load reached.", type=bool,
    ).field(False)

    def checkpoints(self, storage: CheckpointStorage, writers_per_rank: int = 1,
                    expected_bytes: int | None = None) -> Checkpoints:
        """`writers_per_rank`: files each rank writes at once (the storage baseline writes as many);
        `expected_bytes`: what every checkpoint the run keeps adds up to, when known."""
        return Checkpoints(storage, keep=bool(self.keep_checkpoints), warm_load=bool(self.warm_load),
                           storage_baseline=bool(self.storage_baseline), writers_per_rank=writers_per_rank,
                           expected_bytes=expected_bytes)
