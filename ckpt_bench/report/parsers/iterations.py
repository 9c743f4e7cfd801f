"""A log's training iteration times, for the advice: Megatron's `elapsed time per iteration` lines.

Each such line is the average over its log interval, the iterations since the line before. A save at
iteration s is made after the line of s is logged, so it is paid in the next interval: an interval in
which the log started a save is left out, and so is the first interval of each process (start-up: the
first line, and the first after the iterations start again). What is kept is counted by value, not
listed: a log of millions of iterations costs the few thousand distinct values it prints.
"""

from __future__ import annotations

import re
from collections import Counter

# Each log interval's average (Primus prints `733.2/733.2`: the first is the interval's; Megatron-DeepSpeed (s)).
ITERATION_TIME = re.compile(r"\biteration\s+(?P<iteration>\d+)\s*/\s*\d+\s*\|.*?elapsed time per iteration "
                            r"\((?P<unit>ms|s)\):\s*(?P<value>\d+(?:\.\d+)?)")
TIMING = ("the log's 'elapsed time per iteration' lines (each an average over its log interval): the median "
          "over the intervals in which no save started; the first interval of each process left out")


class IterationTimes:
    """The kept intervals' seconds an iteration, counted by value, as the log's lines come."""

    def __init__(self) -> None:
        self.seconds: Counter[float] = Counter()  # seconds an iteration -> intervals
        self.iterations = 0  # iterations in the kept intervals
        self.lines = 0  # iteration-time lines read, kept or not
        self._previous: int | None = None  # the iteration of the last line
        self._saving = False  # a save started since that line

    def line(self, message: str) -> None:
        """A training log line; one that does not give an iteration time changes nothing."""
        match = ITERATION_TIME.search(message)
        if match is None:
            return
        iteration = int(match["iteration"])
        self.lines += 1
        if self._previous is not None and self._previous < iteration and not self._saving:
            self.seconds[round(float(match["value"]) / (1000 if match["unit"] == "ms" else 1), 6)] += 1
            self.iterations += iteration - self._previous
        self._previous, self._saving = iteration, False

    def save_started(self) -> None:
        self._saving = True

    def merge(self, later: IterationTimes) -> None:
        """What `later`, the times of logs read after these, kept."""
        self.seconds.update(later.seconds)
        self.iterations += later.iterations
        self.lines += later.lines

    def median(self) -> float | None:
        intervals = sum(self.seconds.values())
        if not intervals:
            return None
        middle = {(intervals - 1) // 2, intervals // 2}  # the middle interval(s) in sorted order, 0-based
        picked, seen = [], 0
        for value in sorted(self.seconds):
            following = seen + self.seconds[value]
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
