"""A log's training iteration times, for the advice: Megatron's `elapsed time per iteration` lines.

Each such line is the average over its log interval, the iterations since the line before. A save at
iteration s is made after the line of s is logged, so it is paid in the next interval: an interval in
which the log started a save is left out, and so is the first interval of each process (start-up: the
first line, and the first after the iterations start again). What is kept is counted by value, not
listed: a log of millions of iterations costs the few thousand distinct values it prints.
"""

from __future__ import annotations

import operator
import re
from collections import Counter
from itertools import islice

from ckpt_bench.report.parsers.lines import ITERATION_TIME as KEYWORD
from ckpt_bench.report.parsers.lines import Counted

# Each log interval's average (Primus prints `733.2/733.2`: the first is the interval's; Megatron-DeepSpeed (s)).
# Bytes, one line at a time: (iteration, `ms): 733.2` as printed); the match runs to the end of its line, so a
# line gives one match as a search of it would. An iteration of more digits than int() reads is no match.
# Written for the speed of the regex engine, which runs it over every training line of a log:
# * it starts with a literal, which the engine looks for fast; the lookbehind after it is the word boundary;
# * `_BLANK`, a blank that is not a newline, is `[^\S\n]` for bytes written as a set, tested faster;
# * Megatron's own field between the iteration and its time (`| consumed samples: N |`) is tried before a lazy
#   `[^\n]*?`, which costs a backtracking step per character; that field holds no `(`, so it cannot pass over
#   the first time the lazy form would take: the match is the same;
# * `(?:\.\d+|)` is `(?:\.\d+)?` without the engine's repeat machinery.
_BLANK = rb"[\t\x0b\x0c\r ]"
ITERATION_TIME = re.compile(
    rb"iteration(?<!\witeration)" + _BLANK + rb"+(\d{1,4300})" + _BLANK + rb"*/" + _BLANK + rb"*\d+" + _BLANK
    + rb"*\|(?: consumed samples: +\d+ \| |[^\n]*?)elapsed time per iteration \((m?s\):" + _BLANK
    + rb"*\d+(?:\.\d+|))[^\n]*")
_UNIT_VALUE = re.compile(rb"(m?s)\):" + _BLANK + rb"*(.*)")
_NUMBER, _VALUE = operator.itemgetter(0), operator.itemgetter(1)
TIMING = ("the log's 'elapsed time per iteration' lines (each an average over its log interval): the median "
          "over the intervals in which no save started; the first interval of each process left out")


def _rising(printed: list[bytes]) -> bool:
    """Whether the iterations printed (ASCII digits) rise strictly: compared as bytes when all have one length
    (then digits compare as their numbers do, leading zeros too: half the time of making ints), else as ints."""
    if len(set(map(len, printed))) > 1:
        printed = list(map(int, printed))
    return all(map(operator.lt, printed, islice(printed, 1, None)))


class IterationTimes:
    """The kept intervals' seconds an iteration, counted by value, as the log's lines come."""

    def __init__(self) -> None:
        self._values: Counter[bytes] = Counter()  # `ms): 733.2` as printed -> intervals (read once per value)
        self.iterations = 0  # iterations in the kept intervals
        self.lines = 0  # iteration-time lines read, kept or not
        self._previous: int | None = None  # the iteration of the last line
        self._saving = False  # a save started since that line

    def line(self, message: str) -> None:
        """A training log line; one that does not give an iteration time changes nothing."""
        self._add(ITERATION_TIME.findall(message.encode("utf-8", "replace"))[:1])

    def count(self, lines: Counted) -> None:
        """Lines in bulk (a `lines.Counted`): each that gives an iteration time, in order."""
        self._add(lines.findall_in_lines(ITERATION_TIME, KEYWORD))

    def _add(self, matches: list[tuple[bytes, bytes]]) -> None:
        if not matches:
            return
        printed = list(map(_NUMBER, matches))
        self.lines += len(printed)
        if not _rising(printed):  # a new process among them
            for number, (_, value) in zip(map(int, printed), matches, strict=True):
                self._add_one(number, value)
            return
        # One process: every line after the first times its interval; the first, as `_add_one` says.
        first, last = int(printed[0]), int(printed[-1])
        first_kept = self._previous is not None and self._previous < first and not self._saving
        self._values.update(map(_VALUE, islice(matches, 0 if first_kept else 1, None)))
        self.iterations += last - (self._previous if first_kept else first)
        self._previous, self._saving = last, False

    def _add_one(self, number: int, value: bytes) -> None:
        if self._previous is not None and self._previous < number and not self._saving:
            self._values[value] += 1
            self.iterations += number - self._previous
        self._previous, self._saving = number, False

    def save_started(self) -> None:
        self._saving = True

    def merge(self, later: IterationTimes) -> None:
        """What `later`, the times of logs read after these, kept."""
        self._values.update(later._values)
        self.iterations += later.iterations
        self.lines += later.lines

    @property
    def seconds(self) -> Counter[float]:
        """Seconds an iteration -> intervals."""
        seconds: Counter[float] = Counter()
        for printed, intervals in self._values.items():
            unit, value = _UNIT_VALUE.match(printed).groups()
            seconds[round(float(value) / (1000 if unit == b"ms" else 1), 6)] += intervals
        return seconds

    def median(self) -> float | None:
        counts = self.seconds
        intervals = sum(counts.values())
        if not intervals:
            return None
        middle = {(intervals - 1) // 2, intervals // 2}  # the middle interval(s) in sorted order, 0-based
        picked, seen = [], 0
        for value in sorted(counts):
            following = seen + counts[value]
            picked += [value for index in middle if seen <= index < following]
            seen = following
        return sum(picked) / len(picked)

    def training(self) -> dict | None:
        """The report's `training` section from these times: None when the log printed no iteration-time
        line; with a null median when its lines bound no interval that can be kept (too few, or saves in
        each), so the advice can say how many there were."""
        if not self.lines:
            return None
        median = self.median()
        return {"iterations_logged": self.iterations, "iteration_lines": self.lines,
                "iteration_time_without_saves_median": None if median is None else round(median, 4),
                "timing": TIMING}
