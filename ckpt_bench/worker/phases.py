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
module calls, and `MarkedWrite` splits its write call by them: `write` while any writer writes, `fsync` while
they only fsync, `collect` after the last fsync until the call returns. Where writers overlap, a rank's
`write` and `fsync` are its wall time; the first of each carries how many writers there were and their own
seconds of writing and of fsyncing, summed (`PhaseSpan.writers`, `writer_seconds`).
"""

from __future__ import annotations

import functools
import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from types import ModuleType
from typing import TypeVar

from ckpt_bench.core.events import Phase, PhaseSpan

Target = TypeVar("Target")


class PhaseClock:
    """The phases of one operation at a time, on one thread (or process) of one rank."""

    def __init__(self) -> None:
        self._marks: list[tuple[str, int]] = []
        self._writes: dict[int, list[tuple[int, int, int]]] = {}  # mark index -> the fsyncs of that write

    def open(self, phase: Phase, at_ns: int) -> None:
        """Start an operation at `at_ns` (its start event's stamp) in `phase`; marks left over are dropped."""
        self._marks = [(phase.value, at_ns)]
        self._writes = {}

    def begin(self, phase: Phase) -> None:
        """From now on the operation is in `phase` (nothing changes if it already is)."""
        if not self._marks or self._marks[-1][0] != phase.value:
            self._marks.append((phase.value, time.monotonic_ns()))

    def wrote(self, fsyncs: list[tuple[int, int, int]]) -> None:
        """The phase running is a write whose writers fsynced at `fsyncs` (writer, start ns, end ns): `close`
        splits it into write and fsync (`_write_spans`; computed there, after the operation's end is stamped).
        Nothing changes without fsyncs (a writer that does not fsync)."""
        if fsyncs and self._marks:
            self._writes[len(self._marks) - 1] = fsyncs

    def close(self, at_ns: int) -> tuple[PhaseSpan, ...]:
        """The phases from the first mark to `at_ns` (its end event's stamp), and a clean clock."""
        marks, self._marks = self._marks, []
        writes, self._writes = self._writes, {}
        if not marks:
            return ()
        ends = [start for _, start in marks[1:]] + [at_ns]
        spans: list[PhaseSpan] = []
        for index, ((phase, start), end) in enumerate(zip(marks, ends, strict=True)):
            spans += _write_spans(start, end, writes[index]) if index in writes else [PhaseSpan(phase, start, end)]
        return tuple(spans)

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
    """A writing call (its writers fsync each file: `time_fsyncs`), marked as write | fsync | collect by its
    writers' fsyncs (PhaseClock.wrote), or `phase` where none fsynced; `then` (if given) when it returns."""

    def __call__(self, *args, **kwargs):
        self.clock.begin(self.phase)
        with FsyncTimes() as fsyncs:
            result = self.function(*args, **kwargs)
        self.clock.wrote(fsyncs.calls)
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


def _write_spans(start: int, end: int, fsyncs: list[tuple[int, int, int]]) -> list[PhaseSpan]:
    """A write call from `start` to `end` whose writers (threads or processes, each writing from the call's start
    and after each of its fsyncs until its next) fsynced at `fsyncs`: `write` while any writer writes, `fsync`
    while they only fsync, `collect` from the last fsync's end until the call returns. With one writer that is
    its own sequence exactly. With several, the first `write` and `fsync` carry their count and their summed seconds of
    writing and of fsyncing: what each writer spent on both, where the rank's wall time shows only the mix."""
    writing: list[tuple[int, int]] = []
    fsyncing = 0
    writers: dict[int, int] = {}  # writer -> where its writing resumes
    for writer, begun, ended in sorted(fsyncs, key=lambda call: call[1]):
        writing.append((writers.get(writer, start), begun))
        fsyncing += ended - begun
        writers[writer] = ended
    # A sweep over the writing intervals: at each moment, does any writer write?
    changes = sorted([(a, 1) for a, b in writing if b > a] + [(b, -1) for a, b in writing if b > a])
    cuts: list[tuple[str, int]] = [(Phase.WRITE.value, start)]
    active = 0
    for index, (at, change) in enumerate(changes):
        active += change
        if index + 1 < len(changes) and changes[index + 1][0] == at:
            continue  # every change at this moment first
        phase = Phase.WRITE.value if active > 0 else Phase.FSYNC.value
        if cuts[-1][0] != phase:
            cuts.append((phase, min(max(at, start), end)))
    cuts.append((Phase.COLLECT.value, min(max(ended for _, _, ended in fsyncs), end)))
    ends = [at for _, at in cuts[1:]] + [end]
    spans = [PhaseSpan(phase, at, until) for (phase, at), until in zip(cuts, ends, strict=True) if until > at]
    if len(writers) > 1:
        sums = {Phase.WRITE.value: sum(b - a for a, b in writing), Phase.FSYNC.value: fsyncing}
        for phase, total in sums.items():
            first = next((i for i, span in enumerate(spans) if span.phase == phase), None)
            if first is not None:
                spans[first] = replace(spans[first], writers=len(writers), writer_seconds=round(total / 1e9, 6))
    return spans


_FSYNC_RECORD = struct.Struct("qqq")  # a forked writer's fsync through the pipe: its pid, start ns, end ns
_PIPES: dict[int, tuple[int, int]] = {}  # pid -> that process's pipe (read end, write end)


def _own_pipe() -> tuple[int, int]:
    """This process's pipe for its forked writers' fsyncs, made once (its read end never blocks). A forked
    process makes its own: the one it inherited is its parent's to read."""
    pid = os.getpid()
    if pid not in _PIPES:
        _PIPES.clear()
        read, write = os.pipe()
        os.set_blocking(read, False)
        _PIPES[pid] = (read, write)
    return _PIPES[pid]


class FsyncTimes:
    """The fsyncs made during one write by the modules `time_fsyncs` covers, on any thread of this process or in
    a process it forks (megatron-core forks one per file): those report through this process's pipe (a
    record of 24 bytes is written whole), read when the write is over. A context manager; one write at a
    time per process, a nested one keeps its own."""

    _current: FsyncTimes | None = None

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []  # (writer: thread id or pid, start ns, end ns)

    def __enter__(self) -> FsyncTimes:
        self._owner = os.getpid()
        self._read, self._write = _own_pipe()
        self._outer, FsyncTimes._current = FsyncTimes._current, self
        return self

    def __exit__(self, *exc_info) -> None:
        FsyncTimes._current = self._outer
        data = bytearray()
        try:  # the forked writers are done: what they reported is in the pipe
            while chunk := os.read(self._read, 1 << 16):
                data += chunk
        except BlockingIOError:
            pass
        whole = len(data) - len(data) % _FSYNC_RECORD.size
        self.calls += [tuple(record) for record in _FSYNC_RECORD.iter_unpack(bytes(data[:whole]))]

    def add(self, start_ns: int, end_ns: int) -> None:
        if os.getpid() == self._owner:
            self.calls.append((threading.get_ident(), start_ns, end_ns))
        else:
            os.write(self._write, _FSYNC_RECORD.pack(os.getpid(), start_ns, end_ns))


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
