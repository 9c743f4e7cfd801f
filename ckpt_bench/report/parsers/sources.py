"""What a PATH given to `ckpt_report.py` is, and which files to read.

A PATH is a log file (its format sniffed from its first lines by each of `PARSERS` in turn), a log
folder of a format that has one (a Primus `.../logs/pre_trainer/` with `rank-N/` below it, or a
folder above it), or one of our run directories, which already holds its events
(`ckpt_bench.report.assembly.run_report`). Nothing here knows a format: each parser class says how its files
look and how they are read.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ckpt_bench.core.errors import ReportError
from ckpt_bench.core.rundir import RunDir
from ckpt_bench.report.parsers import PARSERS, LogParser
from ckpt_bench.report.parsers.lines import ANSI, Line, read_lines

SNIFF_LINES = 200


class NoEvents(ReportError):
    exit_code = 1


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


def resolve(path: str | Path) -> LogSource | RunSource:
    """What `path` is; raises `ReportError` when it is nothing we read."""
    path = Path(path)
    try:
        if not path.exists():
            raise ReportError(f"no such file or folder: {path}")
        if path.is_dir():
            return _resolve_folder(path)
        first_lines = [
            ANSI.sub(b"", raw).decode("utf-8", "replace").rstrip("\r\n")
            for raw in itertools.islice(read_lines(path, []), SNIFF_LINES)
        ]
    except OSError as error:
        raise cannot_read(path, error) from error
    parser_class = next((p for p in PARSERS if p.sniff(first_lines)), None)
    if parser_class is None:
        raise ReportError(f"{path}: not a log format we read ({', '.join(p.format for p in PARSERS)})")
    return LogSource(path, parser_class, [[path]], f"{parser_class.format} log {path}")


def _resolve_folder(path: Path) -> LogSource | RunSource:
    if RunDir.is_run_dir(path):
        return RunSource(path)
    foldered = [p for p in PARSERS if p.folder_layout]
    for parser_class in foldered:
        streams = parser_class.folder_streams(path)
        if streams:
            read = "; ".join(
                f"{files[0].parent.name}/{files[-1].name} ({len(files)} file{'s' * (len(files) > 1)})"
                for files in streams
            )
            return LogSource(path, parser_class, streams, f"{parser_class.format} log folder {path}: read {read}")
    layouts = "".join(f", {p.folder_layout}" for p in foldered)
    raise ReportError(f"{path} is neither a log file{layouts} nor a run directory")


def log_sources(paths: Iterable[str | Path]) -> Iterator[LogSource]:
    """The logs at `paths`, in order; a run directory among them is a `ReportError`."""
    for path in paths:
        source = resolve(path)
        if isinstance(source, RunSource):
            raise ReportError(f"{path} is a run directory: its events are in its events/, not in logs")
        yield source
