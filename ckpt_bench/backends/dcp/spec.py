"""The DCP backend's worker.json: `DcpSpec`, built by its launcher and read by its ranks (no torch here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ckpt_bench.core.worker_spec import WorkerSpec


@dataclass(kw_only=True)
class DcpSpec(WorkerSpec):
    """What every rank of a DCP run saves and loads, and how."""

    section: ClassVar[str] = "dcp"

    model: str
    """A named model shape (`models.MODELS`), replicated on every rank as under DDP."""
    dtype: str
    """Its parameters' dtype (`models.DTYPES`)."""
    save_calls: int
    """Saves per run; loads read every one of them back."""
    thread_count: int
    """Writer threads per rank (FileSystemWriter / S3StorageWriter `thread_count`)."""
    sync_files: bool
    """fsync every file before a save counts as complete (local disk only)."""
    async_save: bool
    """`dcp.async_save` instead of `dcp.save`."""
    dist_backend: str
    """gloo on CPU, nccl on GPUs."""
    storage: dict
    """`CheckpointStorage.describe()`: how a rank reaches the storage."""
    seed: int
    """Seeds the state's random values."""
