"""A folder on a filesystem the ranks mount: `--save-dir DIR` (no URL scheme), or none at all."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from ckpt_bench.core.checkpoint_dir import iter_dir_name, iteration_folder_sizes
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.storage.base import BASELINE_FOLDER, OWNER_MARK
from ckpt_bench.storage.baseline import Baseline, local_baseline


def check_writable(parent: str | None) -> None:
    """Refuse an unwritable save dir before creating anything (None: the run directory, made anyway)."""
    if parent is None:
        return
    probe = Path(parent)
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"--save-dir {parent}: not writable ({probe} is not a writable directory)")


def remove_checkpoints(path: Path) -> bool:
    """Delete a checkpoint folder only if this tool created it (it carries OWNER_MARK)."""
    if not (path / OWNER_MARK).is_file():
        return False
    shutil.rmtree(path)
    return True


class LocalWorkerStorage:
    """torch's and Lightning's own file writers; what they write is in this host's page cache."""

    def __init__(self, description: dict) -> None:
        pass  # a path is all a rank needs

    def dcp_writer(self, path: str, thread_count: int, sync_files: bool):
        from torch.distributed.checkpoint import FileSystemWriter

        return FileSystemWriter(path, thread_count=thread_count, sync_files=sync_files)

    def dcp_reader(self, path: str):
        from torch.distributed.checkpoint import FileSystemReader

        return FileSystemReader(path)

    def lightning_checkpoint_io(self):
        from lightning.pytorch.plugins.io import TorchCheckpointIO

        return TorchCheckpointIO()

    @contextmanager
    def file_writer(self, path: str, sync_files: bool) -> Iterator[BinaryIO]:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as file:
            yield file
            if sync_files:
                file.flush()
                os.fsync(file.fileno())

    def file_reader(self, path: str):
        return open(path, "rb")

    def local_path(self, path: str) -> str | None:
        return path


class LocalStorage:
    """`<save_dir>/<run-name>/` on a filesystem, or `<run-dir>/checkpoints/` without a save dir."""

    kind = "disk"
    worker = LocalWorkerStorage

    def __init__(self, save_dir: str | None, options: Any = None):
        self.parent = save_dir
        self.location: str | None = None

    def check_access(self) -> None:
        check_writable(self.parent)

    def create(self, run_dir: Path) -> str:
        target = run_dir / "checkpoints" if self.parent is None else Path(self.parent) / run_dir.name
        try:
            target.mkdir(parents=True, exist_ok=False)
            (target / OWNER_MARK).write_text(f"created by ckpt-bench for {run_dir}\n")
        except FileExistsError:
            raise ConfigError(f"--save-dir {self.parent}: {target} already exists; ckpt-bench writes only to a "
                              "folder it creates") from None
        except OSError as error:
            raise ConfigError(f"--save-dir {self.parent or run_dir}: cannot write there ({error.strerror})") from None
        self.location = str(target)
        return self.location

    def iteration_sizes(self) -> dict[int, int]:
        return iteration_folder_sizes(self.location) if self.location else {}

    def iteration_files(self, iteration: int) -> list[int]:
        folder = Path(self.location) / iter_dir_name(iteration)
        return [p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()]

    def baseline(self) -> Baseline:
        return local_baseline(Path(self.location) / BASELINE_FOLDER)

    def remove(self) -> bool:
        return bool(self.location) and remove_checkpoints(Path(self.location))

    def worker_env(self) -> dict[str, str]:
        return {}

    def diagnose(self) -> str | None:
        """A full filesystem hides behind many errors (torch's zip writer reports a short write as
        `unexpected pos`), so ask the filesystem itself."""
        folder = self.location or self.parent
        if folder is None or not os.path.isdir(folder):
            return None
        usage = shutil.disk_usage(folder)
        if usage.free < max(1 << 20, usage.total // 1000):
            return f"No space left on device on {folder} ({usage.free} bytes free of {usage.total})"
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"permission denied on {folder}"
        return None

    def describe(self) -> dict:
        return {"storage": self.kind}
