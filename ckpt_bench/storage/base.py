"""What every storage scheme provides: one side for the launcher, one for the ranks.

The launcher and the ranks are different processes (often on different hosts), so a storage is
split where the JSON worker spec is: the launcher's `CheckpointStorage` checks, creates, measures and
removes, and its `describe()` is all the ranks get; `worker` rebuilds from that description the
ranks' side, `WorkerStorage`, which hands each backend the writer and reader it uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from ckpt_bench.storage.baseline import Baseline

# Written into every checkpoint folder/prefix we create: we delete one only if it carries our mark, naming
# the run it was made for (`mark_text`): a mark copied from another run proves nothing.
OWNER_MARK = ".ckpt-bench-owned"
# A run's checkpoint folder is named after its run directory; when another run took that name (two
# launches in the same second, with different --runs-dir), `-2`, `-3`, ... up to this many.
MAX_NAME_SUFFIX = 100
# Where --storage-baseline writes, inside the run's checkpoint folder or prefix; removed once measured.
BASELINE_FOLDER = "storage-baseline"


def mark_text(run_dir: Path) -> str:
    """What OWNER_MARK holds in the checkpoint folder made for the run in `run_dir`."""
    return f"created by ckpt-bench for {run_dir}\n"


def folder_names(run_dir: Path) -> list[str]:
    """Names to try, in order, for the checkpoint folder of the run in `run_dir`."""
    return [run_dir.name, *(f"{run_dir.name}-{n}" for n in range(2, MAX_NAME_SUFFIX + 1))]


class WorkerStorage(Protocol):
    """How a rank reads and writes checkpoints on a storage, built from `CheckpointStorage.describe()`.

    Each method returns the backend's own class for this storage (imported when called: a rank loads
    only the client it uses), so a backend never branches on the scheme.
    """

    def __init__(self, description: dict) -> None: ...

    def dcp_writer(self, path: str, thread_count: int, sync_files: bool) -> Any:
        """A `torch.distributed.checkpoint` StorageWriter for the checkpoint at `path`."""
        ...

    def dcp_reader(self, path: str) -> Any:
        """A `torch.distributed.checkpoint` StorageReader for the checkpoint at `path`."""
        ...

    def lightning_checkpoint_io(self) -> Any:
        """The Lightning `CheckpointIO` that writes and reads paths on this storage."""
        ...

    def file_writer(self, path: str, sync_files: bool) -> Any:
        """A context manager giving a binary file to write the file (object) at `path` into, as
        `torch.save` writes: durable when the context exits (fsynced where `sync_files` applies)."""
        ...

    def file_reader(self, path: str) -> Any:
        """A context manager giving the file (object) at `path` as a seekable binary file, for `torch.load`."""
        ...

    def local_path(self, path: str) -> str | None:
        """`path` as a folder on this host's disk, for page-cache eviction; None for remote storage."""
        ...


class CheckpointStorage(Protocol):
    """The whole of what the launcher needs from a place that holds checkpoints."""

    kind: ClassVar[str]  # "disk" | "s3" | "fsspec": recorded in the report, and how ranks find `worker`
    worker: ClassVar[type[WorkerStorage]]  # the ranks' side, built from `describe()`
    location: str | None  # this run's folder or URL, once `create` has made it

    def __init__(self, save_dir: str | None, options: Any = None) -> None:
        """`--save-dir` (None: a folder in the run directory) and the storage options (an object with the
        fields of `ckpt_bench.storage.StorageOptions`, or None); validates them, does no I/O."""
        ...

    def check_access(self) -> None:
        """Raise ConfigError (one line) if the storage cannot be used; creates nothing."""
        ...

    def create(self, run_dir: Path) -> str:
        """Make this run's fresh folder/prefix (`<save-dir>/<run-dir name>`, or with `-2`, `-3`, ... when another
        run took that name), marked as ours (`mark_text`), and return its location. Never reuses anything."""
        ...

    def attach(self, location: str, run_dir: Path) -> None:
        """Take `location` as the checkpoint folder an earlier process made for the run in `run_dir` (a sweep's
        killed attempt), so that `remove` can delete it, if its mark proves it is that run's."""
        ...

    def free_space(self) -> tuple[str, int] | None:
        """(the folder measured, its free bytes) where the checkpoints will go; None where the storage
        cannot tell (an object store)."""
        ...

    def iteration_sizes(self) -> dict[int, int]:
        """iteration -> bytes written below `<location>/iter_NNNNNNN/`."""
        ...

    def iteration_files(self, iteration: int) -> list[int]:
        """Bytes of each file (object) below `<location>/iter_NNNNNNN/`: the checkpoint's I/O shape."""
        ...

    def baseline(self, folder: str = BASELINE_FOLDER) -> Baseline:
        """How to measure this storage with a checkpoint's I/O shape and nothing on top (ckpt_bench.storage.
        baseline), in `folder` below `location` (one a host, where several measure at once), which it removes
        when done."""
        ...

    def remove(self) -> bool:
        """Delete this run's checkpoint folder if its mark proves this run created it; True if removed."""
        ...

    def worker_env(self) -> dict[str, str]:
        """Environment variables the ranks need to reach the storage."""
        ...

    def diagnose(self) -> str | None:
        """After a pass failed: what is wrong with the storage now, in a few words (`No space left on
        device on /path`, `endpoint unreachable`), or None when it looks healthy. Never raises."""
        ...

    def describe(self) -> dict:
        """JSON: `{"storage": kind, ...}` with every setting the ranks need to reach the storage (the
        worker spec carries it) and the report shows."""
        ...
