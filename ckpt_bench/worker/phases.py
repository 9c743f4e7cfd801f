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

Writing and fsyncing happen inside one engine call, in writer threads (DCP) or forked writer processes
(megatron-core), each fsyncing its file right after writing it. `time_fsyncs` times the `os.fsync` a writer's
module calls, and `MarkedWrite` splits its write call at the first fsync: `write` until one writer starts
fsyncing, `fsync` from there until the call returns. Where writers overlap, a rank's `write` and `fsync` are
its wall time; each carries beside it how many writers there were and their own seconds of writing and of
fsyncing, summed (`PhaseSpan.writers`, `writer_seconds`).
"""

from __future__ import annotations

import functools
import os
import struct
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import TypeVar

from ckpt_bench.core.events import Phase, PhaseSpan

Target = TypeVar("Target")


class PhaseClock:
    """The phases of one operation at a time, on one thread (or process) of one rank."""

    def __init__(self) -> None:
        self._marks: list[tuple[str, int]] = []
        self._writers: dict[int, tuple[int, float]] = {}  # mark index -> its writers' count and summed seconds

    def open(self, phase: Phase, at_ns: int) -> None:
        """Start an operation at `at_ns` (its start event's stamp) in `phase`; marks left over are dropped."""
        self._marks = [(phase.value, at_ns)]
        self._writers = {}

    def begin(self, phase: Phase) -> None:
        """From now on the operation is in `phase` (nothing changes if it already is)."""
        if not self._marks or self._marks[-1][0] != phase.value:
            self._marks.append((phase.value, time.monotonic_ns()))

    def close(self, at_ns: int) -> tuple[PhaseSpan, ...]:
        """The phases from the first mark to `at_ns` (its end event's stamp), and a clean clock."""
        marks, self._marks = self._marks, []
        writers, self._writers = self._writers, {}
        if not marks:
            return ()
        ends = [start for _, start in marks[1:]] + [at_ns]
        return tuple(PhaseSpan(phase, start, end, *writers.get(index, (None, None)))
                     for index, ((phase, start), end) in enumerate(zip(marks, ends, strict=True)))

    def split_write(self, fsyncs: list[tuple[int, int, int]]) -> None:
        """The phase running was a write whose writers fsynced at `fsyncs` (writer, start ns, end ns): it becomes
        `write` until the first fsync began, then `fsync`. Each writer wrote from the write's start until its
        first fsync and from each fsync's end to its next; with several writers both phases carry their count
        and their summed seconds of that work. Nothing changes without fsyncs (a writer that does not fsync)."""
        if not fsyncs or not self._marks:
            return
        _, start = self._marks[-1]
        writing = fsyncing = 0
        by_writer: dict[int, list[tuple[int, int]]] = {}
        for writer, begun, ended in fsyncs:
            by_writer.setdefault(writer, []).append((begun, ended))
        for spans in by_writer.values():
            previous = start
            for begun, ended in sorted(spans):
                writing, fsyncing, previous = writing + max(0, begun - previous), fsyncing + ended - begun, ended
        self._marks[-1] = (Phase.WRITE.value, start)
        self._marks.append((Phase.FSYNC.value, max(start, min(begun for _, begun, _ in fsyncs))))
        if len(by_writer) > 1:
            self._writers[len(self._marks) - 2] = (len(by_writer), round(writing / 1e9, 6))
            self._writers[len(self._marks) - 1] = (len(by_writer), round(fsyncing / 1e9, 6))

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


class MarkedWrite(Marked):
    """A writing call (its writers fsync each file: `time_fsyncs`), marked as `write` then `fsync` from the
    first fsync on (PhaseClock.split_write), or `phase` where none fsynced; `then` (if given) when it returns."""

    def __call__(self, *args, **kwargs):
        self.clock.begin(self.phase)
        with FsyncTimes() as fsyncs:
            result = self.function(*args, **kwargs)
        self.clock.split_write(fsyncs.calls)
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


_FSYNC_RECORD = struct.Struct("qqq")  # a forked writer's fsync through the pipe: its pid, start ns, end ns


class FsyncTimes:
    """The fsyncs made during one write by the modules `time_fsyncs` covers, on any thread of this process or in
    a process it forks (megatron-core forks one per file): those report through a pipe (a record of 24 bytes
    is written whole). A context manager; one write at a time per process, a nested one keeps its own."""

    _current: FsyncTimes | None = None

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []  # (writer: thread id or pid, start ns, end ns)

    def __enter__(self) -> FsyncTimes:
        self._owner = os.getpid()
        self._pipe = os.pipe()
        self._outer, FsyncTimes._current = FsyncTimes._current, self
        return self

    def __exit__(self, *exc_info) -> None:
        FsyncTimes._current = self._outer
        read, write = self._pipe
        os.close(write)
        os.set_blocking(read, False)  # a forked writer still alive holds the pipe open: take what is there
        data = bytearray()
        try:
            while chunk := os.read(read, 1 << 16):
                data += chunk
        except BlockingIOError:
            pass
        os.close(read)
        whole = len(data) - len(data) % _FSYNC_RECORD.size
        self.calls += [tuple(record) for record in _FSYNC_RECORD.iter_unpack(bytes(data[:whole]))]

    def add(self, start_ns: int, end_ns: int) -> None:
        if os.getpid() == self._owner:
            self.calls.append((threading.get_ident(), start_ns, end_ns))
        else:
            os.write(self._pipe[1], _FSYNC_RECORD.pack(os.getpid(), start_ns, end_ns))


class _TimedFsync:
    """`os` as a writer's module sees it: the same module, its `fsync` timed into the write being watched."""

    def __init__(self, real: ModuleType):
        self._real = real

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def fsync(self, fd) -> None:
        times = FsyncTimes._current
        if times is None:
            return self._real.fsync(fd)
        start = time.monotonic_ns()
        try:
            return self._real.fsync(fd)
        finally:
            times.add(start, time.monotonic_ns())


def time_fsyncs(module: ModuleType) -> None:
    """Time the `os.fsync` calls of `module` (an engine's file writer, which does `import os`): its `os` becomes
    one whose fsync reports to the `FsyncTimes` open in the process, if any. Once per module; nothing else in
    the process is touched."""
    if not isinstance(module.os, _TimedFsync):
        module.os = _TimedFsync(module.os)
