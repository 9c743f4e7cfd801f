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

Times: log timestamps carry no zone. They are read as if they were UTC, always, so the result never
depends on the reader's timezone or a DST switch; only differences between them are used.
"""

from __future__ import annotations

import calendar
import gzip
import os
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")
ARGUMENTS_START = b"- arguments -"
ARGUMENTS_END = b"end of arguments"
_BUFFER = 1 << 20


def read_lines(path: str | os.PathLike) -> Iterator[bytes]:
    """The raw lines of a file (gzip-compressed when its name ends in `.gz`)."""
    if str(path).endswith(".gz"):
        with gzip.open(path, "rb") as compressed:
            yield from compressed
    else:
        with open(path, "rb", buffering=_BUFFER) as plain:
            yield from plain


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
    stamp = datetime.fromisoformat(text)
    return calendar.timegm(stamp.timetuple()) * 1_000_000_000 + stamp.microsecond * 1000


def primus_time_ns(day: str, clock: str) -> int:
    """`YYYYMMDD`, `HH:MM:SS` -> ns, read as UTC."""
    seconds = calendar.timegm(
        (int(day[:4]), int(day[4:6]), int(day[6:8]), int(clock[:2]), int(clock[3:5]), int(clock[6:8]))
    )
    return seconds * 1_000_000_000
