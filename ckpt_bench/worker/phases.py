"""Where a save's or a load's time goes on one rank: its phases, taken from the engine's own steps.

A `PhaseClock` cuts one operation into consecutive phases: `begin(phase)` ends the phase running and starts
the next, so the phases cover the operation from its start event to its end event with no gap and no
overlap, and sum to its time exactly (each on this rank's monotonic clock). The marks come from the engine's
own objects -- DCP's planner, storage writer and stager, megatron-core's save strategy and its async
request, a CheckpointIO -- wrapped in place by `mark_calls`: calling one of their methods begins the phase
it does. What the engine does between two of its hooks stays in the phase before, named for all it holds
(ckpt_bench.core.events.Phase).

An async save has two clocks: the training thread's, from SAVE_START to SAVE_BLOCK_END, and its background
writer's (another thread, or megatron-core's writer process), closed by the writer's SAVE_END. The report
(ckpt_bench.report.engine) puts them end to end.

A mark is one `time.monotonic_ns()` and a list append: nothing of the save's own work moves.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TypeVar

from ckpt_bench.core.events import Phase, PhaseSpan

Target = TypeVar("Target")


class PhaseClock:
    """The phases of one operation at a time, on one thread (or process) of one rank."""

    def __init__(self) -> None:
        self._marks: list[tuple[str, int]] = []

    def open(self, phase: Phase, at_ns: int) -> None:
        """Start an operation at `at_ns` (its start event's stamp) in `phase`; marks left over are dropped."""
        self._marks = [(phase.value, at_ns)]

    def begin(self, phase: Phase) -> None:
        """From now on the operation is in `phase` (nothing changes if it already is)."""
        if not self._marks or self._marks[-1][0] != phase.value:
            self._marks.append((phase.value, time.monotonic_ns()))

    def close(self, at_ns: int) -> tuple[PhaseSpan, ...]:
        """The phases from the first mark to `at_ns` (its end event's stamp), and a clean clock."""
        marks, self._marks = self._marks, []
        if not marks:
            return ()
        ends = [start for _, start in marks[1:]] + [at_ns]
        return tuple(PhaseSpan(phase, start, end) for (phase, start), end in zip(marks, ends, strict=True))

    def marking(self, function: Callable, phase: Phase, then: Phase | None = None) -> Marked:
        """`function`, beginning `phase` when called and `then` (if given) when it returns."""
        return Marked(function, self, phase, then)


class Marked:
    """A function that begins a phase when called (and another when it returns). A class, not a closure:
    megatron-core pickles its async request, marked functions included, to its persistent writer (where
    the marks go to the clock's copy, unread). It keeps the function's signature visible (`__wrapped__`):
    DCP inspects its planners' and writers' parameters."""

    def __init__(self, function: Callable, clock: PhaseClock, phase: Phase, then: Phase | None):
        functools.update_wrapper(self, function)
        self.function, self.clock, self.phase, self.then = function, clock, phase, then

    def __call__(self, *args, **kwargs):
        self.clock.begin(self.phase)
        result = self.function(*args, **kwargs)
        if self.then is not None:
            self.clock.begin(self.then)
        return result


def mark_calls(target: Target, clock: PhaseClock, calls: dict[str, Phase | tuple[Phase, Phase]]) -> Target:
    """Wrap `target`'s methods in place (its type stays: DCP asks whether a writer is an AsyncStager):
    `calls` maps a method's name to the phase it begins, or to (the phase it begins, the phase its
    return begins). Returns `target`."""
    for name, phases in calls.items():
        phase, then = phases if isinstance(phases, tuple) else (phases, None)
        setattr(target, name, clock.marking(getattr(target, name), phase, then))
    return target
