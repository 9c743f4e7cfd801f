"""The storage's own speed, with the checkpoint's I/O shape and nothing of a checkpoint library on top.

`--storage-baseline`: after the benchmark, in the same run, the launcher writes as many files (or
objects) of the same sizes as the last saved checkpoint, with as many writers at once as the save had
(ranks x writer threads), fsyncing each file if the save did, then drops them from the page cache and
reads them back. What a save or load achieved divided by this is its fraction of the storage's peak:
near 1, the storage is the limit; far below, the software is.

    shape = IOShape.of(file_sizes, concurrency=4, fsync=True)
    result = storage.baseline().measure(shape)      # {"tool", "write_bandwidth", "read_bandwidth", ...}

Two ways to measure, each a `Baseline`:
* `FioBaseline` -- fio (when installed) on a local folder: `numjobs` = writers, 1 MiB blocks,
  `fsync_on_close`, then a read with `invalidate=1` (the page cache dropped first); a summary of its
  JSON output is in a round's result (`measure_rounds` keeps each round's bandwidths instead).

The peak is the fastest of several rounds (`measure_rounds`), so that it bounds what the save did with the
same shape; a save or load that still beats it gets no fraction (report.engine.fractions_of_peak says why).
* `PlainIOBaseline` -- a pool of writer threads doing plain writes through a `PlainIO`: the OS's files
  (`LocalFiles`), or the S3 client the ranks used (ckpt_bench.storage.s3), or fsspec. Large writes release
  the GIL, so threads in one process do the I/O in parallel.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ckpt_bench.core.checkpoint_dir import evict_from_page_cache
from ckpt_bench.core.units import MIB

# Bytes per call: writes of 1 MiB (fio's bs=1M) from one random block, reused (incompressible); reads of
# 8 MiB (measured here: 1 MiB reads lost a third of fio's cold-read bandwidth, 8 MiB ones matched it).
WRITE_BLOCK = MIB
READ_BLOCK = 8 * MIB
FIO_TIMEOUT_S = 1800


@dataclass(frozen=True)
class IOShape:
    """What a baseline writes and reads: the saved checkpoint's files, at the save's concurrency."""

    file_sizes: tuple[int, ...]  # bytes of each file of the last saved checkpoint (all ranks)
    concurrency: int  # writers at once: writing ranks x writer threads, at most one per file
    fsync: bool  # fsync each file before it counts as written (as the save did)

    @classmethod
    def of(cls, file_sizes: list[int], concurrency: int, fsync: bool | None) -> IOShape:
        sizes = tuple(size for size in file_sizes if size > 0)
        return cls(sizes, max(1, min(concurrency, len(sizes))), bool(fsync))

    @property
    def total_bytes(self) -> int:
        return sum(self.file_sizes)


class Baseline(Protocol):
    """One way to measure a storage with an `IOShape`."""

    def measure(self, shape: IOShape) -> dict:
        """Write then cold-read `shape` and remove what was written. Returns at least `tool`,
        `write_bandwidth` and `read_bandwidth` (MiB/s), `files`, `bytes`, `concurrency`, `fsync`."""
        ...


class PlainIO(Protocol):
    """A storage with nothing on top: named files or objects below one folder or prefix."""

    tool: str  # how the result names it, e.g. "built-in (os.write)"
    location: str  # the folder or URL the files go to

    def write(self, name: str, size: int, fsync: bool, block: memoryview) -> None:
        """Write `size` bytes (repeating `block`) to `name`, fsynced before returning if `fsync`."""
        ...

    def read(self, name: str) -> int:
        """Read `name` to the end; return the bytes read."""
        ...

    def drop_cache(self) -> None:
        """Make the next reads come from the storage (a no-op where nothing caches them here)."""
        ...

    def remove(self) -> None:
        """Delete everything written below `location`."""
        ...


def pieces(block: memoryview, size: int) -> Iterator[memoryview]:
    """`size` bytes to write, as slices of `block` repeated: what a `PlainIO.write` writes."""
    for start in range(0, size, len(block)):
        yield block[:min(len(block), size - start)]


def read_to_end(handle) -> int:
    """Read a file-like `handle` to its end in READ_BLOCK calls; the bytes read."""
    total = 0
    while chunk := handle.read(READ_BLOCK):
        total += len(chunk)
    return total


def _result(tool: str, shape: IOShape, write_s: float, read_s: float, **extra) -> dict:
    return {
        "tool": tool,
        "write_bandwidth": round(shape.total_bytes / MIB / write_s, 2) if write_s > 0 else None,
        "read_bandwidth": round(shape.total_bytes / MIB / read_s, 2) if read_s > 0 else None,
        "write_time": round(write_s, 4),
        "read_time": round(read_s, 4),
        "files": len(shape.file_sizes),
        "bytes": shape.total_bytes,
        "concurrency": shape.concurrency,
        "fsync": shape.fsync,
        "read_cache": "cold",
        "units": {"bandwidth": "MiB/s (bytes / 2**20 / s)", "time": "s"},
        **extra,
    }


class PlainIOBaseline:
    """Writer and reader threads (`concurrency` of them) over a `PlainIO`; each phase is timed from its
    first call to its last file done (fsync included)."""

    def __init__(self, io: PlainIO):
        self.io = io

    def measure(self, shape: IOShape) -> dict:
        block = memoryview(os.urandom(WRITE_BLOCK))
        names = [f"file_{index:05d}" for index in range(len(shape.file_sizes))]
        try:
            with ThreadPoolExecutor(shape.concurrency) as pool:
                started = time.perf_counter()
                list(pool.map(lambda job: self.io.write(job[0], job[1], shape.fsync, block),
                              zip(names, shape.file_sizes, strict=True)))
                write_s = time.perf_counter() - started
                self.io.drop_cache()
                started = time.perf_counter()
                read = sum(pool.map(self.io.read, names))
                read_s = time.perf_counter() - started
        finally:
            self.io.remove()
        if read != shape.total_bytes:
            raise OSError(f"the storage baseline read back {read} bytes of the {shape.total_bytes} it wrote")
        return _result(self.io.tool, shape, write_s, read_s, location=self.io.location,
                       method=f"{shape.concurrency} threads in the launcher, {WRITE_BLOCK // MIB} MiB writes, then "
                              f"the same files read back in {READ_BLOCK // MIB} MiB reads after dropping them from "
                              "the page cache")


class LocalFiles:
    """Files in a folder on this host, written with os.write and read with os.read."""

    tool = "built-in (os.write/os.read)"

    def __init__(self, folder: str | os.PathLike):
        self.location = str(folder)

    def write(self, name: str, size: int, fsync: bool, block: memoryview) -> None:
        os.makedirs(self.location, exist_ok=True)  # each round starts without it (`remove`)
        fd = os.open(os.path.join(self.location, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for piece in pieces(block, size):
                while piece:  # os.write may write less than asked
                    piece = piece[os.write(fd, piece):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def read(self, name: str) -> int:
        total = 0
        with open(os.path.join(self.location, name), "rb", buffering=0) as handle:
            buffer = bytearray(READ_BLOCK)
            while count := handle.readinto(buffer):
                total += count
        return total

    def drop_cache(self) -> None:
        evict_from_page_cache(self.location)

    def remove(self) -> None:
        shutil.rmtree(self.location, ignore_errors=True)


class FioBaseline:
    """fio on a local folder: `numjobs` writers, each with its share of the files, 1 MiB blocks,
    `fsync_on_close` when the save fsynced; then the same files read with `invalidate=1`. fio needs one
    size per job, so each file is the mean size, in whole 1 MiB blocks (a smaller file in one block):
    `bytes` is what fio wrote, within half a MiB per file of the checkpoint's."""

    tool = "fio"

    def __init__(self, folder: str | os.PathLike, executable: str = "fio"):
        self.folder = str(folder)
        self.executable = executable

    @staticmethod
    def available() -> str | None:
        return shutil.which("fio")

    def _run(self, shape: IOShape, files_per_job: int, file_size: int, mode: str) -> dict:
        command = [
            self.executable, "--name=ckpt-bench-baseline", f"--directory={self.folder}", f"--rw={mode}",
            f"--numjobs={shape.concurrency}", f"--nrfiles={files_per_job}", f"--filesize={file_size}",
            f"--bs={min(file_size, WRITE_BLOCK)}", "--ioengine=psync", "--group_reporting", "--output-format=json",
            "--file_service_type=sequential", "--invalidate=1",
        ]
        if mode == "write" and shape.fsync:
            command.append("--fsync_on_close=1")
        done = subprocess.run(command, capture_output=True, text=True, timeout=FIO_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise OSError(f"fio {mode} failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[:300]}")
        # fio may print notes before the JSON document.
        return json.loads(done.stdout[done.stdout.index("{"):])

    def measure(self, shape: IOShape) -> dict:
        files_per_job = math.ceil(len(shape.file_sizes) / shape.concurrency)
        mean = shape.total_bytes / (shape.concurrency * files_per_job)
        # fio writes whole blocks only: a size in whole MiB (1 MiB blocks), or a small file in one block.
        unit = WRITE_BLOCK if mean >= WRITE_BLOCK else 1
        file_size = max(1, round(mean / unit)) * unit
        fio_shape = IOShape((file_size,) * (shape.concurrency * files_per_job), shape.concurrency, shape.fsync)
        Path(self.folder).mkdir(parents=True, exist_ok=True)
        try:
            written = self._run(fio_shape, files_per_job, file_size, "write")
            evict_from_page_cache(self.folder)
            read = self._run(fio_shape, files_per_job, file_size, "read")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
        write_job, read_job = written["jobs"][0]["write"], read["jobs"][0]["read"]
        result = _result(self.tool, fio_shape, write_job["runtime"] / 1000, read_job["runtime"] / 1000,
                         location=self.folder, fio_version=written.get("fio version"),
                         method=f"fio: {shape.concurrency} jobs x {files_per_job} file(s) of {file_size} bytes, "
                                f"{min(file_size, WRITE_BLOCK)}-byte blocks, psync"
                                + (", fsync_on_close" if shape.fsync else "")
                                + "; read with invalidate=1 after dropping the files from the page cache")
        # fio's own aggregate bandwidth (bytes over the slowest job's runtime), as it printed it.
        result["write_bandwidth"] = round(write_job["bw_bytes"] / MIB, 2)
        result["read_bandwidth"] = round(read_job["bw_bytes"] / MIB, 2)
        result["fio"] = {"write": _fio_summary(write_job), "read": _fio_summary(read_job)}
        return result


def _fio_summary(job: dict) -> dict:
    return {key: job.get(key) for key in ("io_bytes", "bw_bytes", "runtime", "iops")}


# Rounds of the baseline: at least ROUNDS, more (up to MAX_ROUNDS) while the last round still beat the best
# before it by more than IMPROVED -- the storage had not shown its best yet.
ROUNDS = 3
MAX_ROUNDS = 6
IMPROVED = 1.05


def measure_rounds(baseline: Baseline, shape: IOShape, rounds: int = ROUNDS, most: int = MAX_ROUNDS) -> dict:
    """The storage's peak with `shape`: the fastest of `rounds` to `most` measurements one after another, write
    and cold read each taken at its best (a peak bounds what was measured with the same shape; a median of
    rounds on a host-cached or shared storage sits below its good rounds). Each round's bandwidths are kept."""
    bandwidths = ("write_bandwidth", "read_bandwidth")
    results: list[dict] = []
    improving = True
    while len(results) < rounds or (improving and len(results) < most):
        before = {key: max((r[key] for r in results if r[key] is not None), default=0.0) for key in bandwidths}
        results.append(baseline.measure(shape))
        improving = any((results[-1][key] or 0.0) > IMPROVED * before[key] for key in bandwidths)
    combined = dict(results[0])
    for direction in ("write", "read"):
        fastest = max((r for r in results if r[f"{direction}_bandwidth"] is not None),
                      key=lambda r: r[f"{direction}_bandwidth"], default=None)
        combined[f"{direction}_bandwidth"] = fastest and fastest[f"{direction}_bandwidth"]
        combined[f"{direction}_time"] = fastest and fastest[f"{direction}_time"]
    combined["rounds"] = [{key: r[key] for key in bandwidths} for r in results]
    combined["peak"] = (f"the fastest of {len(results)} rounds (at least {rounds}; more while a round beat the best "
                        f"before it by over {round(100 * (IMPROVED - 1))} %), write and read each")
    combined.pop("fio", None)  # per-round details; the rounds' bandwidths stand for them
    return combined


def local_baseline(folder: str | os.PathLike) -> Baseline:
    """fio where it is installed, else the built-in writer: the same shape either way."""
    executable = FioBaseline.available()
    return FioBaseline(folder, executable) if executable else PlainIOBaseline(LocalFiles(folder))
