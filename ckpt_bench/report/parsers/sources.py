"""What a PATH given to `ckpt_report.py` is, and which files to read.

A PATH is a log file (its format sniffed from its first lines by each of `PARSERS` in turn), a log
folder of a format that has one (a Primus `.../logs/pre_trainer/` with `rank-N/` below it, or a
folder above it), one of our run directories, which already holds its events
(`ckpt_bench.report.assembly.run_report`), or any other folder: the logs below it, found by content
(every text file, each folder of a log layout as one log; binary files, hidden files and our run
directories are left out and said so). Nothing here knows a format: each parser class says how its
files look and how they are read.

Only regular files are read: a device, a FIFO or a socket (`/dev/zero`, a pipe nobody writes) is
refused with one line, never waited on.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ckpt_bench.core.errors import ReportError
from ckpt_bench.core.rundir import RunDir
from ckpt_bench.report.parsers import PARSERS, LogParser
from ckpt_bench.report.parsers.lines import Line, head, head_lines

SNIFF_LINES = 200
TEXT_PROBE = 8 << 10  # a file of a folder is a log when its first bytes hold no NUL byte


class NoEvents(ReportError):
    """Logs with no checkpoint save or load in them: bad input (exit 2), like a path that cannot be read."""


def cannot_read(path: Path, error: OSError) -> ReportError:
    return ReportError(f"cannot read {error.filename or path}: {error.strerror or error}")


@dataclass
class LogSource:
    """One log to parse: the files to read, and the parser for their format."""

    path: Path
    parser_class: type[LogParser]
    streams: list[list[Path]]  # per stream read (e.g. a rank): its files, oldest first
    description: str

    def lines(self, notes: list[str]) -> Iterator[Line]:
        return self.parser_class.lines(self.streams, notes)


@dataclass
class RunSource:
    path: Path


@dataclass
class LogFolder:
    """A folder of logs of no known layout: the logs below it, found by content, in name order."""

    path: Path
    sources: list[LogSource] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # what below it was not read, and why

    @property
    def notes(self) -> list[str]:
        return [f"{self.path}: not read: {', '.join(self.left_out)}"] if self.left_out else []


def resolve(path: str | Path) -> LogSource | RunSource | LogFolder:
    """What `path` is; raises `ReportError` when it is nothing we read."""
    path = Path(path)
    try:
        if not path.exists():
            raise ReportError(f"no such file or folder: {path}")
        if path.is_dir():
            return _resolve_folder(path)
        if not path.is_file():
            raise ReportError(f"{path} is not a regular file (a device, a FIFO or a socket): give a log file or a "
                              "folder of logs")
        return _log_file(path)
    except OSError as error:
        raise cannot_read(path, error) from error


def _log_file(path: Path) -> LogSource:
    first_lines = head_lines(path, SNIFF_LINES)
    parser_class = next(p for p in PARSERS if p.sniff(first_lines))  # the last one takes any file
    return LogSource(path, parser_class, [[path]], f"{parser_class.format} log {path}")


def _resolve_folder(path: Path) -> LogSource | RunSource | LogFolder:
    if RunDir.is_run_dir(path):
        return RunSource(path)
    layout = _layout_source(path)
    if layout is not None:
        return layout
    folder = _logs_below(path)
    if not folder.sources:
        layouts = "".join(f", {p.folder_layout}" for p in PARSERS if p.folder_layout)
        left_out = f" ({'; '.join(folder.left_out)})" if folder.left_out else ""
        raise ReportError(f"{path} holds no log file{left_out}: give a log file{layouts}, a folder of logs or a run "
                          "directory")
    return folder


def _layout_source(path: Path) -> LogSource | None:
    """The log of a format's folder layout at `path`, if it is one."""
    for parser_class in (p for p in PARSERS if p.folder_layout):
        streams = parser_class.folder_streams(path)
        if streams:
            read = "; ".join(
                f"{files[0].parent.name}/{files[-1].name} ({len(files)} file{'s' * (len(files) > 1)})"
                for files in streams
            )
            return LogSource(path, parser_class, streams, f"{parser_class.format} log folder {path}: read {read}")
    return None


def _logs_below(top: Path) -> LogFolder:
    """Every log below `top`: its text files, and each folder of a log layout as one log."""
    folder = LogFolder(top)
    for where, subfolders, files in os.walk(top):
        here = Path(where)
        kept = []
        for name in sorted(subfolders):
            sub = here / name
            if name.startswith("."):
                continue
            if RunDir.is_run_dir(sub):
                folder.left_out.append(f"{sub} (a run directory: report it on its own)")
            elif (layout := _layout_source(sub)) is not None:
                folder.sources.append(layout)
            else:
                kept.append(name)
        subfolders[:] = kept
        for name in sorted(files):
            path = here / name
            if name.startswith("."):
                continue
            try:
                if not path.is_file():
                    folder.left_out.append(f"{path} (not a regular file)")
                elif b"\0" in head(path, TEXT_PROBE):
                    folder.left_out.append(f"{path} (not text)")
                else:
                    folder.sources.append(_log_file(path))
            except OSError as error:
                folder.left_out.append(f"{path} (cannot read: {error.strerror or error})")
    return folder


def log_sources(paths: Iterable[str | Path]) -> Iterator[LogSource]:
    """The logs at `paths`, in order (a folder of logs: those below it); a run directory among them is a
    `ReportError`."""
    for path in paths:
        source = resolve(path)
        if isinstance(source, RunSource):
            raise ReportError(f"{path} is a run directory: its events are in its events/, not in logs")
        yield from source.sources if isinstance(source, LogFolder) else [source]
