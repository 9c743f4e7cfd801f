"""Any other URL (`gs://`, `az://`, `file://`, `memory://`, ...): a filesystem fsspec knows.

The ranks write through fsspec too -- torch's FsspecWriter/FsspecReader for DCP, Lightning's own
TorchCheckpointIO -- so a scheme needs no code here, only its fsspec package (gcsfs for gs://, adlfs
for az://), which is checked before anything is created. Sizes come from the files listed after the
run, removal only below a folder that carries our mark.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from ckpt_bench.core.checkpoint_dir import evict_from_page_cache, iter_dir_name, sizes_by_iteration
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.storage.base import BASELINE_FOLDER, OWNER_MARK, folder_names, mark_text
from ckpt_bench.storage.baseline import Baseline, PlainIOBaseline, pieces, read_to_end
from ckpt_bench.storage.local import free_space_at


class FsspecFiles:
    """Plain files through the fsspec filesystem the ranks wrote with (a `PlainIO`)."""

    tool = "built-in (fsspec open/write/read)"

    def __init__(self, filesystem, root: str, location: str):
        self.fs, self.root, self.location = filesystem, root, location

    def write(self, name: str, size: int, fsync: bool, block: memoryview) -> None:
        self.fs.makedirs(self.root, exist_ok=True)  # each round starts without it (`remove`)
        with self.fs.open(f"{self.root}/{name}", "wb") as handle:
            for piece in pieces(block, size):
                handle.write(piece)
            if fsync and hasattr(handle, "fileno"):
                handle.flush()
                os.fsync(handle.fileno())

    def read(self, name: str) -> int:
        with self.fs.open(f"{self.root}/{name}", "rb") as handle:
            return read_to_end(handle)

    def drop_cache(self) -> None:
        local = FsspecWorkerStorage({}).local_path(self.location)
        if local is not None:
            evict_from_page_cache(local)

    def remove(self) -> None:
        if self.fs.exists(self.root):
            self.fs.rm(self.root, recursive=True)


class FsspecWorkerStorage:
    """torch's and Lightning's fsspec writers; a `file://` URL is a folder of this host's disk."""

    def __init__(self, description: dict) -> None:
        pass  # the URL is all a rank needs

    def dcp_writer(self, path: str, thread_count: int, sync_files: bool):
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter  # torch 2.13 exports it only here

        return FsspecWriter(path, thread_count=thread_count, sync_files=sync_files)

    def dcp_reader(self, path: str):
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        return FsspecReader(path)

    def lightning_checkpoint_io(self):
        from lightning.pytorch.plugins.io import TorchCheckpointIO

        return TorchCheckpointIO()  # opens paths with fsspec

    @contextmanager
    def file_writer(self, path: str, sync_files: bool) -> Iterator[BinaryIO]:
        """`sync_files` fsyncs a file of this host's disk (`file://`); other filesystems have no fsync."""
        import fsspec

        local = self.local_path(path)
        with fsspec.open(path, "wb", auto_mkdir=True) as file:
            yield file
            if sync_files and local is not None:
                file.flush()
                os.fsync(file.fileno())

    def file_reader(self, path: str):
        import fsspec

        return fsspec.open(path, "rb").open()

    def local_path(self, path: str) -> str | None:
        from fsspec.core import url_to_fs
        from fsspec.implementations.local import LocalFileSystem

        filesystem, inside = url_to_fs(path)
        return inside if isinstance(filesystem, LocalFileSystem) else None


class FsspecStorage:
    """`<url>/<run-name>/` on the URL's fsspec filesystem."""

    kind = "fsspec"
    worker = FsspecWorkerStorage

    def __init__(self, save_dir: str, options: Any = None):
        self.url = save_dir.rstrip("/")
        self.protocol = save_dir.split("://", 1)[0]
        self.location: str | None = None
        self._fs = None
        self._root: str | None = None  # `location` as the filesystem names it (no protocol)
        self._run_dir: Path | None = None

    @property
    def fs(self):
        if self._fs is None:
            self._fs = self._split(self.url)[0]
        return self._fs

    def _split(self, url: str):
        """(filesystem, path as the filesystem names it) for a URL; one line if its package is missing."""
        import fsspec

        try:
            return fsspec.core.url_to_fs(url)
        except ImportError as error:
            raise ConfigError(f"--save-dir {self.url}: fsspec needs a package for {self.protocol}:// "
                              f"({str(error).strip().splitlines()[0]})") from None
        except ValueError as error:
            raise ConfigError(f"--save-dir {self.url}: {error}") from None

    def check_access(self) -> None:
        """The save dir, or the nearest folder above it, must exist (a missing bucket fails here)."""
        path = self._split(self.url)[1].rstrip("/")
        try:
            while path and not self.fs.exists(path):
                path = path.rsplit("/", 1)[0] if "/" in path.strip("/") else ""
        except Exception as error:
            raise ConfigError(f"--save-dir {self.url}: cannot reach it ({type(error).__name__}: {error})") from None
        if not path:
            raise ConfigError(f"--save-dir {self.url}: nothing exists there or above it (a missing bucket?)")

    def create(self, run_dir: Path) -> str:
        for name in folder_names(run_dir):
            location = f"{self.url}/{name}"
            root = self._split(location)[1]
            try:
                if self.fs.exists(root):
                    continue  # another run's: never reused
                self.fs.makedirs(root, exist_ok=False)
                self.fs.pipe(f"{root}/{OWNER_MARK}", mark_text(run_dir).encode())
            except Exception as error:
                raise ConfigError(f"--save-dir {self.url}: cannot write {location} ({type(error).__name__}: "
                                  f"{error})") from None
            self.attach(location, run_dir)
            return location
        raise ConfigError(f"--save-dir {self.url}: {self.url}/{run_dir.name} and the other names for this run's "
                          "folder already exist; ckpt-bench writes only to a folder it creates")

    def attach(self, location: str, run_dir: Path) -> None:
        self._root, self.location, self._run_dir = self._split(location)[1], location, run_dir

    def free_space(self) -> tuple[str, int] | None:
        local = FsspecWorkerStorage({}).local_path(self.location or self.url)
        if local is None:
            return None
        return free_space_at(local)

    def iteration_sizes(self) -> dict[int, int]:
        if self._root is None:
            return {}
        start = len(self._root.rstrip("/")) + 1
        return sizes_by_iteration((path[start:], int(info.get("size") or 0))
                                  for path, info in self.fs.find(self._root, detail=True).items()
                                  if info.get("type", "file") == "file")

    def iteration_files(self, iteration: int) -> list[int]:
        found = self.fs.find(f"{self._root}/{iter_dir_name(iteration)}", detail=True)
        return [int(info.get("size") or 0) for info in found.values() if info.get("type", "file") == "file"]

    def baseline(self, folder: str = BASELINE_FOLDER) -> Baseline:
        return PlainIOBaseline(FsspecFiles(self.fs, f"{self._root}/{folder}", f"{self.location}/{folder}"))

    def remove(self) -> bool:
        if self._root is None:
            return False
        try:
            mark = self.fs.cat_file(f"{self._root}/{OWNER_MARK}").decode(errors="replace")
        except FileNotFoundError:
            return False  # no mark (not ours, or gone): leave it; an unreachable filesystem raises
        if mark != mark_text(self._run_dir):
            return False
        self.fs.rm(self._root, recursive=True)
        return True

    def worker_env(self) -> dict[str, str]:
        return {}

    def diagnose(self) -> str | None:
        try:
            self.fs.exists(self._root or self._split(self.url)[1])
        except Exception as error:  # whatever the filesystem raises is the diagnosis
            return f"cannot reach {self.url} ({type(error).__name__}: {error})"
        return None

    def describe(self) -> dict:
        return {"storage": self.kind, "fsspec_protocol": self.protocol}
