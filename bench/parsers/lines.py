"""Streaming the lines of a log: constant memory, and only the lines a report can use.

Logs of long runs reach gigabytes, and almost every line is an iteration line no report needs. So
files are read in binary, each line is tested with one cheap byte search, and only the survivors
are decoded and handed to a parser. What survives:

* a line that mentions a checkpoint, a timer header (`... across ranks (ms):`) or the arguments dump;
* every line of the arguments dump (its lines name no keyword);
* the continuation lines of a surviving record that can matter: a timer's entries follow its header
  on their own lines, and only entries naming a checkpoint timer, timer names (`  name:`) and
  per-rank values (`rank N: t`) can. What "continuation" means is the format's business
  (`continues`): an indented line in Megatron's stdout, a line without the Primus prefix in Primus.

Damaged files: a `.gz` cut short (a copy interrupted, a disk full) gives the lines before the cut
and a note saying where it is; data that is not gzip, or is corrupt inside, is an `OSError` naming the
file, as for a file that cannot be opened.

Times: log timestamps carry no zone. They are read as if they were UTC, always, so the result never
depends on the reader's timezone or a DST switch; only differences between them are used. A time
that does not exist (`2025-06-31`, month 13) is a `ValueError`, never silently moved to another day.
"""

from __future__ import annotations

import errno
import gzip
import itertools
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")
ARGUMENTS_START = b"- arguments -"
ARGUMENTS_END = b"end of arguments"
_BUFFER = 1 << 20


# A line to parse: the files it was read from (one stream: a log and its rotations, oldest first),
# its number in them counted across the files (`locate` turns it into file and line), its text.
Line = tuple[list[Path], int, str]


def read_lines(path: str | os.PathLike, notes: list[str]) -> Iterator[bytes]:
    """The raw lines of a file (gzip-compressed when its name ends in `.gz`); `notes` gets where a
    `.gz` cut short ends."""
    if not str(path).endswith(".gz"):
        with open(path, "rb", buffering=_BUFFER) as plain:
            yield from plain
        return
    number = 0
    with gzip.open(path, "rb") as compressed:
        try:
            for number, line in enumerate(compressed, 1):  # noqa: B007 - `number` says where a cut is
                yield line
        except EOFError:
            notes.append(f"{path} is cut short (truncated .gz): read up to line {number}, the rest is lost")
        except (gzip.BadGzipFile, zlib.error) as error:
            raise OSError(errno.EINVAL, f"not readable as gzip ({error})", str(path)) from error


def series_lines(files: list[Path], continues: Callable[[bytes], bool], notes: list[str]) -> Iterator[Line]:
    """The lines worth parsing of files read as one stream (a log and its rotations, oldest first)."""
    raw = itertools.chain.from_iterable(read_lines(f, notes) for f in files)
    return ((files, number, text) for number, text in candidate_lines(raw, continues))


def locate(files: list[Path], number: int) -> tuple[Path, int]:
    """File and line in it of line `number` of `files` read as one stream. Reads the files again to
    count their lines: for a note, not for every line."""
    for path in files[:-1]:
        count = sum(1 for _ in read_lines(path, []))
        if number <= count:
            return path, number
        number -= count
    return files[-1], number


def candidate_lines(
    raw_lines: Iterable[bytes], continues: Callable[[bytes], bool]
) -> Iterator[tuple[int, str]]:
    """(line number, text) of the lines worth parsing, ANSI colour codes removed."""
    follow = in_arguments = False
    for number, raw in enumerate(raw_lines, 1):
        if b"\x1b" in raw:
            raw = ANSI.sub(b"", raw)
        if in_arguments:
            in_arguments = ARGUMENTS_END not in raw
        elif b"checkpoint" in raw or b"across ranks (ms)" in raw or ARGUMENTS_START in raw:
            follow = True  # (`in` is twice as fast as one alternation regex here)
            in_arguments = ARGUMENTS_START in raw
        elif not (follow and continues(raw)):
            follow = False
            continue
        elif not (b"rank" in raw or raw.rstrip().endswith(b":")):
            continue  # another timer's entry: its block goes on, but the line cannot matter
        yield number, raw.decode("utf-8", "replace").rstrip("\r\n")


def is_indented(raw: bytes) -> bool:
    return raw[:1] in (b" ", b"\t")


def megatron_time_ns(text: str) -> int:
    """`YYYY-MM-DD HH:MM:SS[.ffffff]` (Python's `str(datetime.now())`) -> ns, read as UTC."""
    return _utc_ns(datetime.fromisoformat(text))


def primus_time_ns(day: str, clock: str) -> int:
    """`YYYYMMDD`, `HH:MM:SS` -> ns, read as UTC."""
    return _utc_ns(
        datetime(int(day[:4]), int(day[4:6]), int(day[6:8]), int(clock[:2]), int(clock[3:5]), int(clock[6:8]))
    )


_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)


def _utc_ns(stamp: datetime) -> int:
    """A zone-less time, read as UTC -> ns since the epoch (exact: no float)."""
    return (stamp - _EPOCH) // _MICROSECOND * 1000
