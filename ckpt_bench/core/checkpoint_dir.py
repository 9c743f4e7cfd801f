"""Facts about a checkpoint folder on disk, as Megatron-LM lays it out.

    <save>/latest_checkpointed_iteration.txt
    <save>/iter_0000100/...          (torch_dist: *.distcp + metadata; torch: mp_rank_XX/...)

Sizes come from the files that were written, which is what bandwidth must be computed from.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

ITER_DIR = re.compile(r"^iter_(\d{7})$")
TRACKER_FILE = "latest_checkpointed_iteration.txt"


def iter_dir_name(iteration: int) -> str:
    return f"iter_{iteration:07d}"


def folder_bytes(path: str | os.PathLike) -> int:
    """Bytes of every regular file below `path` (apparent size, links not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            if not os.path.islink(full):
                total += os.stat(full).st_size
    return total


def iteration_folder_sizes(save_dir: str | os.PathLike) -> dict[int, int]:
    """iteration -> bytes of its `iter_NNNNNNN` folder, for every such folder in `save_dir`."""
    sizes = {}
    root = Path(save_dir)
    if not root.is_dir():
        return sizes
    for entry in root.iterdir():
        match = ITER_DIR.match(entry.name)
        if match and entry.is_dir():
            sizes[int(match.group(1))] = folder_bytes(entry)
    return sizes


def sizes_by_iteration(files: Iterable[tuple[str, int]]) -> dict[int, int]:
    """iteration -> bytes, from (path relative to the checkpoint folder, size) of every file below it:
    object stores list files, not folders, so their sizes are summed per `iter_NNNNNNN/` here."""
    sizes: dict[int, int] = {}
    for relative, size in files:
        folder, inside, _name = relative.partition("/")
        match = ITER_DIR.match(folder)
        if match and inside:
            iteration = int(match.group(1))
            sizes[iteration] = sizes.get(iteration, 0) + size
    return sizes


def latest_iteration(save_dir: str | os.PathLike) -> int | None:
    return tracker_iteration(Path(save_dir) / TRACKER_FILE)


def tracker_iteration(tracker) -> int | None:
    """The iteration a `latest_checkpointed_iteration.txt` names; `tracker`: a Path, or any path with `is_file` and
    `read_text` (MSC's `msc.Path`)."""
    text = tracker.read_text().strip() if tracker.is_file() else ""
    return int(text) if text.isdigit() else None


def filesystem_type(path: str | os.PathLike) -> str | None:
    """The filesystem type (from /proc/mounts) of the mount holding `path`, e.g. 'ext4', 'nfs4'."""
    try:
        target = os.path.realpath(path)
        while not os.path.exists(target):
            target = os.path.dirname(target)
        best, fstype = "", None
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 3:
                    continue
                mount_point = fields[1].replace("\\040", " ")
                inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
                if inside and len(mount_point) >= len(best):
                    best, fstype = mount_point, fields[2]
        return fstype
    except OSError:
        return None


def evict_from_page_cache(path: str | os.PathLike) -> int:
    """Drop the files below `path` from the page cache so the next read comes from storage.

    fsync first (dirty pages cannot be dropped), then posix_fadvise(DONTNEED); this needs no root,
    unlike writing to /proc/sys/vm/drop_caches. Returns the number of files advised.
    """
    count = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            if os.path.islink(full):
                continue
            fd = os.open(full, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                count += 1
            finally:
                os.close(fd)
    return count
