"""The workload backend's plan as both sides read it: `WorkloadSpec` is written into worker.json by the
launcher and read back, field for field, by every rank (no torch here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ckpt_bench.backends.workload.engines import ENGINES, state_layout
from ckpt_bench.core.worker_spec import WorkerSpec
from ckpt_bench.layout.checkpoint_layout import Layout
from ckpt_bench.layout.workload import Workload

SECTION = "workload"  # worker.json: {"workload": WorkloadSpec fields, "checkpoint_dir": ..., ...}


@dataclass(kw_only=True)
class WorkloadSpec(WorkerSpec):
    """What every rank of a workload run does: whose share it holds, through which engine, how often."""

    workload: dict
    """The `Workload`'s fields (`workload.Workload`), as resolved from the catalog or a file."""
    world_size: int
    """Ranks of the whole job the workload describes."""
    run_ranks: list[int] | None
    """The job ranks that run, in the order they run, when only some do (`--subset`: the first N, or whole
    hosts picked by their bytes); None: all of them."""
    engine: str
    """`torch-save`, `torch_dist`, `torch` or `dcp` (`engines.ENGINES`)."""
    save_calls: int
    """Saves per run; each goes to its own iteration folder (`iter_0000001`, ...)."""
    load_calls: int
    """Loads per run, of saves 1..load_calls, each cold unless `warm_load`; 0: no load pass."""
    time_between_checkpoints: float
    """Seconds every rank waits before each save and each load (DLIO's compute time between them)."""
    sync_files: bool
    """fsync every file before a save counts as complete (local disk; S3 is durable on upload)."""
    async_save: bool
    """The engine's asynchronous save: training would resume after scheduling (`torch_dist`, `dcp`)."""
    thread_count: int
    """Writer threads per rank (`dcp`; `torch_dist`'s thread count per rank)."""
    dist_backend: str
    """gloo on CPU, nccl on GPUs: the process group for the barriers and the engines' collectives."""
    storage: dict
    """`CheckpointStorage.describe()`: how a rank reaches the storage."""
    seed: int
    """Seeds each rank's random tensors (rank added)."""
    async_strategy: str | None = None
    """`torch_dist` on megatron-core 0.17+: the async strategy its saves take (nvrx or mcore), as the launcher
    resolved it (ckpt_bench.core.megatron_release); None where the release has none."""
    section: ClassVar[str] = SECTION

    def layout(self) -> Layout:
        """The layout of what the engine saves (`engines.state_layout`: DLIO's tensors, or a Megatron GPT's)."""
        return state_layout(ENGINES[self.engine], Workload(**self.workload), self.world_size, self.run_ranks)
