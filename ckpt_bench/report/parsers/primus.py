"""Primus logs: a prefix around Megatron's messages, and a folder of per-rank files.

File sink (`logs/pre_trainer/rank-R/{debug,info,warning,error}.log`) and console lines:

    [20260514 10:25:03][user/team][pre_trainer][ip-10.0.0.1][rank-0/8][DEBUG]    [----checkpointing.py:512] : msg
    [20260514 10:25:03][rank-7/8][INFO]     [---------------utils.py:425] : msg
    [20250301 08:00:00][...][rank-0/8][INFO]     [trainer.py:88]: msg          (older location form)

A multi-line message (a timer block) keeps its prefix on the first line only. The prefix time has
1 s resolution; it is the fallback clock of an event, below Megatron's own timestamp and timers.
The prefix is stripped here and the message handed to the one Megatron grammar, and to torchtitan's
(`ckpt_bench.report.parsers.torchtitan`: Primus's torchtitan backend writes torchtitan's messages behind the same
prefix; a torchtitan save is timed by its own `in X seconds`, 10 ms, and its step is the nearest
`step: N` line before it).

Which files a report needs: Megatron prints its save/load lines and the arguments dump on rank 0
(at DEBUG: only `debug.log` has them) and its timers on the last rank (at INFO). Each sink file
holds its level and everything above, so rank 0's `debug.log` and the last rank's `info.log` hold
every line needed; the other ranks and the warning/error files are not read. Rotated files are read
oldest first: loguru's `debug.<YYYY-MM-DD_HH-MM-SS_ffffff>.log` in name order, `debug.log.N`
highest number first, then the live `debug.log`. The two ranks' lines are merged by prefix time
(rank 0 first within a second: a save's lines precede the timer printed after them). A run of counted
lines (the training lines, `lines.Counted`) is merged as one piece, cut where a line of the other rank
comes between two of its lines (found by bisection: a file's prefix times do not go back).
"""

from __future__ import annotations

import bisect
import dataclasses
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from ckpt_bench.core.events import CheckpointEvent, TimeSource
from ckpt_bench.report.parsers.base import LogFormat
from ckpt_bench.report.parsers.iterations import IterationTimes
from ckpt_bench.report.parsers.launchers import split
from ckpt_bench.report.parsers.lines import (
    ARGUMENTS_START,
    ITERATION_TIME,
    Counted,
    Grammar,
    Line,
    primus_time_ns,
    scan_lines,
    searcher,
)
from ckpt_bench.report.parsers.megatron import MegatronParser
from ckpt_bench.report.parsers.torchtitan import Clock, TorchtitanMessages

_MASTER = r"(?:\(PrimusMaster[^)]*\)\s*)?"
PREFIX = re.compile(
    _MASTER + r"\[(?P<day>\d{8}) (?P<clock>\d\d:\d\d:\d\d)\](?:\[[^\]]*\])*?"
    r"\[(?P<role>rank|node)-(?P<rank>\d+)/(?P<world>\d+)\]\[(?P<level>[A-Z]+)\]\s*(?P<message>.*)$"
)
LOCATION = re.compile(r"^\[-*[^\]\s]*\.py:\d+\] ?: ?")
_PREFIX_TIME = re.compile(_MASTER + r"\[(\d{8} \d\d:\d\d:\d\d)\]")
_PREFIX_BYTES = re.compile(rb"(?:\(PrimusMaster[^)\n]*\)[^\S\n]*)?\[\d{8} \d\d:\d\d:\d\d\]")
_PREFIX_TIME_BYTES = re.compile(rb"(?:\(PrimusMaster[^)\n]*\)[^\S\n]*)?\[(\d{8} \d\d:\d\d:\d\d)\]")

# Megatron's messages (a line without the prefix continues the record above), and the torchtitan
# backend's: a save line that names no step brings the nearest `step: N` line before it.
GRAMMAR = Grammar(
    keywords=(b"checkpoint", ARGUMENTS_START, b"without --use-persistent-ckpt-worker"),
    record_start=_PREFIX_BYTES,
    headers=(b"across ranks (ms)",),
    context=(b"the checkpoint", b"step: "),
    counted=ITERATION_TIME,
)

# The last rank's file beside rank 0's is read for its timers and its training lines alone: Megatron prints
# the arguments and its warnings on rank 0 (one keyword search less per byte of the larger file).
LAST_RANK = dataclasses.replace(GRAMMAR, keywords=(b"checkpoint",))

RANK_DIR = re.compile(r"^rank-(\d+)$")


def continues(raw: bytes) -> bool:
    """A line without the Primus prefix continues the record above it."""
    return _PREFIX_BYTES.match(raw) is None


class PrimusParser(LogFormat):
    """Primus file or console lines (any ranks, interleaved) -> events, via `MegatronParser`."""

    format = "primus"
    folder_layout = "a Primus log folder (logs/pre_trainer/rank-N/*.log)"
    grammar = GRAMMAR

    @classmethod
    def sniff(cls, first_lines: list[str]) -> bool:
        return any(PREFIX.match(line) for line in first_lines)

    @classmethod
    def folder_streams(cls, folder: Path) -> list[list[Path]]:
        rank_dirs = find_rank_dirs(folder)
        return files_to_read(rank_dirs) if rank_dirs else []

    @classmethod
    def lines(cls, streams: list[list[Path]], notes: list[str]) -> Iterator[Line]:
        return merged_lines(streams, notes)

    def __init__(self) -> None:
        self.megatron = MegatronParser()
        self.torchtitan = TorchtitanMessages()
        self._stamp: tuple[str, str] | None = None
        self._prefix_ns: int | None = None
        self._last_counted: bytes | None = None  # the last counted line, its prefix not read yet

    def feed_line(self, message: str, seq: int, rank: int | None) -> list[CheckpointEvent]:
        match = PREFIX.match(message)
        if match is None or match["role"] != "rank":  # it takes the last time, or gives no world size
            self._read_counted()
        self._last_counted = None
        if match is None:  # a continuation line: same record, same time
            return self.megatron.feed_message(message, seq, self._prefix_ns)
        self._read_prefix(match)
        text = LOCATION.sub("", match["message"], count=1)
        events = self.megatron.feed_message(text, seq, self._prefix_ns)
        if "checkpoint" in text or "step:" in text:  # what torchtitan's messages can be
            writer = int(match["rank"]) if match["role"] == "rank" else 0
            events += self.torchtitan.feed(text, seq, writer, Clock(self._prefix_ns, TimeSource.PRIMUS_PREFIX))
        return events

    def _read_prefix(self, match: re.Match) -> None:
        """A line's prefix: the time of its record, the world size."""
        stamp = (match["day"], match["clock"])
        if stamp != self._stamp:
            self._stamp, self._prefix_ns = stamp, primus_time_ns(*stamp)
        if match["role"] == "rank":
            self.megatron.observed["world_size"] = (int(match["world"]), "the Primus line prefix")

    def count(self, lines: Counted) -> None:
        """Training lines in bulk; the prefix of the last one is read as if each had been fed, once a line
        needs it (most do not: a line with its own rank prefix says again all it says)."""
        self.megatron.count(lines)
        last = lines.rfind(ITERATION_TIME)
        if last >= 0:
            self._last_counted = lines.line(last)

    def _read_counted(self) -> None:
        if self._last_counted is not None:
            if match := PREFIX.match(split(self._last_counted.decode("utf-8", "replace"))[1]):
                self._read_prefix(match)
            self._last_counted = None

    def finish(self) -> list[CheckpointEvent]:
        self._read_counted()
        return self.megatron.finish() + self.torchtitan.finish(self.megatron._seq)

    @property
    def run_info(self) -> dict:
        return self.megatron.run_info

    @property
    def notes(self) -> list[str]:
        return self.megatron.notes + self.torchtitan.notes

    @property
    def arguments(self):
        return self.megatron.arguments

    @property
    def observed(self) -> dict:
        return self.megatron.observed

    @property
    def iteration_times(self) -> IterationTimes:
        return self.megatron.iteration_times


def find_rank_dirs(folder: Path) -> dict[int, Path]:
    """rank -> `rank-N` folder, looking in `folder`, `folder/pre_trainer`, `folder/logs/pre_trainer`."""
    for base in (folder, folder / "pre_trainer", folder / "logs" / "pre_trainer"):
        if base.is_dir():
            ranks = {
                int(match[1]): entry
                for entry in base.iterdir()
                if entry.is_dir() and (match := RANK_DIR.match(entry.name))
            }
            if ranks:
                return ranks
    return {}


def level_files(rank_dir: Path, level: str) -> list[Path]:
    """A level's files, oldest first: loguru-rotated by name, `.N` highest first, then the live file."""
    numbered = re.compile(rf"^{level}\.log\.(\d+)(?:\.gz)?$")
    stamped = re.compile(rf"^{level}\.(\d{{4}}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+)\.log(?:\.gz)?$")
    by_number, by_stamp = [], []
    for entry in rank_dir.iterdir():
        if match := numbered.match(entry.name):
            by_number.append((-int(match[1]), entry))
        elif match := stamped.match(entry.name):
            by_stamp.append((match[1], entry))
    live = [rank_dir / f"{level}.log"] if (rank_dir / f"{level}.log").is_file() else []
    return [p for _, p in sorted(by_number)] + [p for _, p in sorted(by_stamp)] + live


def files_to_read(rank_dirs: dict[int, Path]) -> list[list[Path]]:
    """Per rank read, its files in order: rank 0's debug.log family, the last rank's info.log one."""
    first, last = min(rank_dirs), max(rank_dirs)
    wanted = [(first, ("debug", "info"))]
    if last != first:
        wanted.append((last, ("info", "debug")))
    streams = []
    for rank, preference in wanted:
        for level in preference:
            files = level_files(rank_dirs[rank], level)
            if files:
                streams.append(files)
                break
    return streams


def merged_lines(streams: list[list[Path]], notes: list[str]) -> Iterator[Line]:
    """The candidate lines of several ranks' files, merged by prefix time: the earliest first, the first
    stream's on a tie; a line without a prefix has the time of the line before it."""
    if len(streams) == 1:
        return scan_lines(streams[0], GRAMMAR, notes)
    first, *others = streams
    return _merge([_timed(scan_lines(first, GRAMMAR, notes)),
                   *(_timed(scan_lines(files, LAST_RANK, notes)) for files in others)])


def _timed(lines: Iterator[Line]) -> Iterator[tuple[str, Line]]:
    """(prefix time, line); a run of counted lines has its first line's time."""
    stamp = ""
    for line in lines:
        text = line[2]
        if isinstance(text, Counted):
            yield _counted_stamp(text, 0) or stamp, line
            stamp = _counted_stamp(text, text.rfind(ITERATION_TIME)) or stamp
            continue
        if match := _PREFIX_TIME.match(text):
            stamp = match[1]
        yield stamp, line


def _merge(streams: list[Iterator[tuple[str, Line]]]) -> Iterator[Line]:
    """Merges timed streams by (time, stream). A run of counted lines goes as far as it is before every
    other stream's next line; the rest of it waits as that stream's next item. Where two streams' runs of
    counted lines meet (every rank logging training lines), they are merged line by line at once."""
    heads = {index: item for index, stream in enumerate(streams) if (item := next(stream, None)) is not None}
    while heads:
        index = min(heads, key=lambda i: (heads[i][0], i))
        stamp, (files, where, text) = heads[index]
        others = [(heads[i][0], i) for i in heads if i != index]
        if isinstance(text, Counted) and len(others) == 1 and isinstance(heads[others[0][1]][1][2], Counted):
            other = others[0][1]
            merged, rests = _interleave({i: (heads[i][0], heads[i][1][2]) for i in (index, other)})
            yield files, where, merged
            for i in (index, other):
                if i in rests:
                    heads[i] = (rests[i][0], (heads[i][1][0], heads[i][1][1], rests[i][1]))
                elif (item := next(streams[i], None)) is None:
                    del heads[i]
                else:
                    heads[i] = item
            continue
        if isinstance(text, Counted) and others:
            bound = min(others)
            cut = _cut(text, bound[0], after_bound=index > bound[1])
            if 0 < cut < len(text):
                head, rest = text.cut(cut)
                if head.find(ITERATION_TIME) >= 0:  # else only lines that count nothing
                    yield files, where, head
                heads[index] = (_counted_stamp(rest, 0) or stamp, (files, where, rest))
                continue
        yield files, where, text
        item = next(streams[index], None)
        if item is None:
            del heads[index]
        else:
            heads[index] = item


def _interleave(runs: dict[int, tuple[str, Counted]]) -> tuple[Counted, dict[int, tuple[str, Counted]]]:
    """Two streams' runs of counted lines (stream -> its time before the run, the run) merged by (time, stream)
    until one runs out: the training lines taken, in that order, as one run of their own; and the rest of the
    other (stream -> the time of its next line, the rest of its run), if any. A line without a prefix has the
    time of the training line before it. Each run's lines are in time order, so a sort merges them (in C)."""
    lines = {index: _timed_lines(run, stamp.encode(), index) for index, (stamp, run) in runs.items()}
    ends = min(found[-1][:2] for found in lines.values())  # where the first to run out ends
    last = (*ends, sys.maxsize, sys.maxsize)
    taken, rests = [], {}
    for index, found in lines.items():
        count = bisect.bisect_right(found, last)
        taken += found[:count]
        if count < len(found):
            run = runs[index][1]
            rests[index] = (found[count][0].decode(), Counted(run.data, found[count][2], run.stop))
    taken.sort()
    data = {index: memoryview(run.data) for index, (_, run) in runs.items()}
    pieces = [data[index][begin:end] for _, index, begin, end in taken]
    # A file's last line without its newline gets one, so that it stays a line of its own.
    unended = [line for index, line in ((i, found[-1]) for i, found in lines.items())
               if runs[index][1].data[line[3] - 1] != ord("\n")]
    for line in sorted(unended, reverse=True):
        at = bisect.bisect_left(taken, line)
        if at < len(taken) and taken[at] == line:
            pieces.insert(at + 1, b"\n")
    merged = b"".join(pieces)
    return Counted(merged, 0, len(merged)), rests


def _timed_lines(run: Counted, stamp: bytes, index: int) -> list[tuple[bytes, int, int, int]]:
    """(prefix time, `index`, start, end in `run.data`) of each training line of `run` with its newline (but the
    last line of a file that has none); a line without a prefix has the time of the one before it (`stamp` for
    the first). The keyword's places come from one SIMD search of the run."""
    data, start, stop = run.data, run.start, run.stop
    find, rfind, prefix = data.find, data.rfind, _PREFIX_TIME_BYTES.match
    lines, end = [], start
    with memoryview(data) as view, view[start:stop] as window:
        found = [at for _, at, _ in searcher(ITERATION_TIME).find_matches_as_indexes(window)]
    for at in found:
        at += start
        if at < end:  # the keyword again in a line taken
            continue
        begin = rfind(b"\n", start, at) + 1 or start
        end = find(b"\n", at, stop) + 1 or stop
        if match := prefix(data, begin, end):
            stamp = match[1]
        lines.append((stamp, index, begin, end))
    return lines


def _counted_stamp(lines: Counted, at: int) -> str | None:
    """The prefix time of the counted line found from byte `at` on; None when it has no prefix."""
    found = lines.find(ITERATION_TIME, at)
    return None if found < 0 else _line_stamp(lines, found)


def _line_stamp(lines: Counted, at: int) -> str | None:
    """The prefix time of the line holding byte `at`; None when it has no prefix."""
    match = lines.match(_PREFIX_TIME_BYTES, lines.rfind(b"\n", at) + 1)
    return match[1].decode() if match else None


def _cut(text: Counted, bound: str, after_bound: bool) -> int:
    """Where the counted lines of `text` that go after a line of time `bound` start (a line start; len(text)
    when none does): those of a later time, or of the same time when their stream comes after the bound's.
    By bisection over the bytes: prefix times in a file do not go back. A probe is the few searches of
    `_line_stamp` on the reader's buffer itself (positions in it), tens of them a cut."""
    data, start, stop = text.data, text.start, text.stop
    later = bound.encode()

    def goes_after(at: int) -> bool:  # the first counted line from `at` on (true past the last)
        found = data.find(ITERATION_TIME, at, stop)
        if found < 0:
            return True
        match = _PREFIX_TIME_BYTES.match(data, data.rfind(b"\n", start, found) + 1 or start, stop)
        return match is not None and (match[1] > later or (after_bound and match[1] == later))

    last = data.rfind(ITERATION_TIME, start, stop)
    if last < 0 or not goes_after(last):
        return len(text)
    low, high = start, stop
    while low < high:
        middle = (low + high) // 2
        if goes_after(middle):
            high = middle
        else:
            low = middle + 1
    found = data.find(ITERATION_TIME, low, stop)
    return (data.rfind(b"\n", start, found) + 1 or start) - start
