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
from ckpt_bench.storage.base import BASELINE_FOLDER, OWNER_MARK, folder_names, mark_text
from ckpt_bench.storage.baseline import Baseline, local_baseline


def nearest_existing(path: str | os.PathLike) -> Path:
    """`path`, or its nearest ancestor that exists: where a folder not made yet will be made."""
    folder = Path(path)
    while not folder.exists():
        folder = folder.parent
    return folder


def free_space_at(path: str | os.PathLike) -> tuple[str, int]:
    """(the folder measured, its free bytes) for a folder that may not exist yet: its filesystem's."""
    folder = nearest_existing(path)
    return str(folder), shutil.disk_usage(folder).free


def check_writable(parent: str | None) -> None:
    """Refuse an unwritable save dir before creating anything (None: the run directory, made anyway)."""
    if parent is None:
        return
    probe = nearest_existing(parent)
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"--save-dir {parent}: not writable ({probe} is not a writable directory)")


def carries_mark(path: Path, run_dir: Path) -> bool:
    """Whether folder `path` is the one ckpt-bench made for the run in `run_dir` (its mark says so)."""
    mark = path / OWNER_MARK
    try:
        return mark.is_file() and not mark.is_symlink() and mark.read_text() == mark_text(run_dir)
    except (OSError, UnicodeDecodeError):
        return False


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
        self.parent = None if save_dir is None else os.path.expanduser(save_dir)  # `~`, even when quoted
        self.location: str | None = None
        self._run_dir: Path | None = None

    def check_access(self) -> None:
        check_writable(self.parent)

    def create(self, run_dir: Path) -> str:
        if self.parent is None:
            targets = [run_dir / "checkpoints"]
        elif Path(self.parent).resolve() == run_dir.parent.resolve():
            raise ConfigError(f"--save-dir {self.parent} is also --runs-dir: a run's checkpoint folder would take "
                              "its run directory's name; give another --save-dir, or none (checkpoints then go "
                              "inside the run directory)")
        else:
            targets = [Path(self.parent) / name for name in folder_names(run_dir)]
        for target in targets:
            try:
                target.mkdir(parents=True, exist_ok=False)  # atomic: no other run can take the same folder
            except FileExistsError:
                continue
            except OSError as error:
                raise ConfigError(f"--save-dir {self.parent or run_dir}: cannot write there "
                                  f"({error.strerror})") from None
            self.attach(str(target), run_dir)
            try:
                (target / OWNER_MARK).write_text(mark_text(run_dir))
            except OSError as error:
                target.rmdir()
                raise ConfigError(f"--save-dir {self.parent or run_dir}: cannot write there "
                                  f"({error.strerror})") from None
            return str(target)
        raise ConfigError(f"--save-dir {self.parent}: {targets[0]} and {len(targets) - 1} other names for this run's "
                          "folder already exist; ckpt-bench writes only to a folder it creates")

    def attach(self, location: str, run_dir: Path) -> None:
        self.location, self._run_dir = location, run_dir

    def free_space(self) -> tuple[str, int] | None:
        if self.location is None and self.parent is None:
            return None
        return free_space_at(self.location or self.parent)

    def iteration_sizes(self) -> dict[int, int]:
        return iteration_folder_sizes(self.location) if self.location else {}

    def iteration_files(self, iteration: int) -> list[int]:
        folder = Path(self.location) / iter_dir_name(iteration)
        return [p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()]

    def baseline(self, folder: str = BASELINE_FOLDER) -> Baseline:
        return local_baseline(Path(self.location) / folder)

    def remove(self) -> bool:
        if self.location is None or not carries_mark(Path(self.location), self._run_dir):
            return False
        shutil.rmtree(self.location)
        return True

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
