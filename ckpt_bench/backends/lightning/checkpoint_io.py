"""The CheckpointIO stack the Trainer is given, and the wrapper that times async writes honestly.

    sync:   <storage IO>                          (the storage's own: ckpt_bench.storage's lightning_checkpoint_io())
    async:  AsyncCheckpointIO(RecordWriteEnd(<storage IO>))

`AsyncCheckpointIO.save_checkpoint` clones the tensors and hands the write to a thread, then
returns: that is where training resumes (SAVE_BLOCK_END, recorded by the worker). The checkpoint is
complete only when the storage IO's own `save_checkpoint` returns on that thread, so
`RecordWriteEnd` records SAVE_END right there, with its one phase, write -- recording it when someone later
notices completion would add unrelated waiting to the save time. It adds only that and changes nothing it wraps.

For a synchronous save no wrapper is needed: the write is done when `trainer.save_checkpoint`
returns, and the worker records SAVE_END itself.
"""

from __future__ import annotations

import os
import time
from typing import Any

from lightning.pytorch.plugins.io import AsyncCheckpointIO, CheckpointIO

from ckpt_bench.core.checkpoint_dir import ITER_DIR
from ckpt_bench.core.events import EventKind, EventRecorder, Phase
from ckpt_bench.storage import worker_storage
from ckpt_bench.worker.entry import error_text
from ckpt_bench.worker.phases import PhaseClock


def iteration_of(path: str) -> int | None:
    """The save call index from a path below `iter_NNNNNNN/` (works for local paths and URLs)."""
    for part in reversed(str(path).rstrip("/").split("/")):
        match = ITER_DIR.match(part)
        if match:
            return int(match.group(1))
    return None


def local_size(path: str) -> int | None:
    """Bytes of a local file just written; None for object storage (the launcher measures those)."""
    try:
        return os.stat(path).st_size if "://" not in str(path) else None
    except OSError:
        return None


class RecordWriteEnd(CheckpointIO):
    """Delegates everything to `inner`; records SAVE_END on the thread that did the write."""

    def __init__(self, inner: CheckpointIO, recorder: EventRecorder):
        super().__init__()
        self.inner = inner
        self.recorder = recorder

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        iteration = iteration_of(path)
        phases = PhaseClock()  # the writer thread's: serializing and writing one file
        phases.open(Phase.WRITE, time.monotonic_ns())
        try:
            self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)
        except BaseException as error:
            self.recorder.record(EventKind.SAVE_END, iteration, path=str(path), error=error_text(error),
                                 extra={"thread": "writer"})
            raise
        written = self.recorder.now()
        self.recorder.record(EventKind.SAVE_END, iteration, path=str(path), bytes=local_size(path), at=written,
                             phases=phases.close(written[0]), extra={"thread": "writer"})

    def load_checkpoint(self, path, map_location: Any | None = None, weights_only: bool | None = None):
        return self.inner.load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    def remove_checkpoint(self, path) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()


def checkpoint_io_stack(storage: dict, async_save: bool, recorder: EventRecorder) -> CheckpointIO:
    """The Trainer's CheckpointIO for `storage` (ckpt_bench.storage's describe())."""
    inner = worker_storage(storage).lightning_checkpoint_io()
    return AsyncCheckpointIO(RecordWriteEnd(inner, recorder)) if async_save else inner
