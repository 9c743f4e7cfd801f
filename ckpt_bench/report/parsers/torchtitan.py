"""torchtitan logs -> checkpoint events (also the torchtitan messages inside a Primus log).

torchtitan logs through Python logging, one line per message, rank-prefixed by torchrun's `--tee`:

    [rank0]:[titan] 2026-07-01 10:00:00,123 - root - INFO - step: 500  loss:  2.3456  ...
    [rank0]:[titan] 2026-07-01 10:00:00,130 - root - INFO - Saving the checkpoint.
    [rank0]:[titan] 2026-07-01 10:00:03,380 - root - INFO - Finished saving the checkpoint in 3.25 seconds.
    2024-04-25 10:00:00,123 - root - INFO - Finished saving the checkpoint in 3.25 seconds      (2024: no tag)

Its checkpoint wording changed with its versions (torchtitan's `checkpoint.py`, later
`components/checkpoint.py`, then `components/checkpointer/dcp.py`):

* 2024-04: `Saving a full checkpoint at step N` (or `Saving a model weights only checkpoint in DTYPE at
  step N`), `Finished saving the checkpoint in X seconds`; `Loading the checkpoint at step N`,
  `Finished loading the checkpoint in X seconds`.
* 2024-05 to 2025-02: no start line; `Finished saving the checkpoint (or staging if async is
  enabled)in X seconds.` (sic, no space); the last step's save starts with `Saving a full checkpoint
  at last step, step N.`; an async save written by a background process ends with `Finish saving the
  checkpoint in the background process in X seconds.`
* 2025-02 to 2026-06: `Saving the checkpoint (or staging if async is enabled).` first; the last
  step's save logs `Saving a full checkpoint at last step, step N.` and no end; loads log `Loading
  the checkpoint from PATH.` (the step is in PATH's `step-N`) from 2025-06.
* from 2026-06: `Saving the checkpoint.` / `Finished saving the checkpoint in X seconds.`, or for an
  async save `Staging the checkpoint.` / `Finished staging the checkpoint in X seconds.` (the blocking
  part; torchtitan logs no end of the write, which is known finished when the next save starts: it
  waits for it); the last step: `Last step checkpoint completed in Xs`.

A save's step is the one its own line names, else the nearest `step: N` line before it (the metrics
line; `validate step: N` names the same step), else unknown.

Clocks: a phase whose two ends carry Python logging's millisecond timestamps is timed by them
(1 ms); otherwise by torchtitan's own `in X seconds` (10 ms), the only clock of a save without a start
line and the better one under Primus's 1 s prefix. Which rank: torchrun's `[rankN]:` prefix (or
Primus's), else 0. A save torchtitan did not say is async is taken as synchronous: before 2026-06
one wording covers "saving the checkpoint (or staging if async is enabled)", and the notes say so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from ckpt_bench.core.events import CheckpointEvent, EventKind, TimeSource
from ckpt_bench.report.engine import MEASURES
from ckpt_bench.report.parsers.arguments import ArgumentsDump
from ckpt_bench.report.parsers.base import LogFormat, OneFileFormat
from ckpt_bench.report.parsers.iterations import IterationTimes
from ckpt_bench.report.parsers.lines import Grammar, megatron_time_ns

_SECONDS = r"(?P<seconds>\d+(?:\.\d+)?)"
_EITHER = r"(?: \(or staging if async is enabled\))?"
SAVE_START = re.compile(r"^(?P<phase>Saving|Staging) the checkpoint" + _EITHER + r"\.\s*$")
SAVE_STEP = re.compile(
    r"^Saving a (?:full|model(?: weights)? only) checkpoint(?: in \S+)? at (?P<last>last step, )?step (?P<step>\d+)"
)
SAVE_DONE = re.compile(r"^Finished (?P<phase>saving|staging) the checkpoint" + _EITHER + r"\s*in " + _SECONDS
                       + r" seconds\.?\s*$")
LAST_DONE = re.compile(r"^Last step checkpoint completed in " + _SECONDS + r"s\s*$")
BACKGROUND_DONE = re.compile(r"^Finish saving the checkpoint in the background process in " + _SECONDS)
LOAD_START = re.compile(r"^Loading the checkpoint (?:at step (?P<step>\d+)|from (?P<path>.+?))\.?\s*$")
LOAD_DONE = re.compile(r"^Finished loading the checkpoint in " + _SECONDS + r" seconds\.?\s*$")
STEP = re.compile(r"(?:^|\s)(?:validate )?step:\s*(?P<step>\d+)")
STEP_DIR = re.compile(r"step-(\d+)")

_LOGGING = r"(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(?P<ms>\d{3}) - \S+ - [A-Z]+ - "  # Python logging's
LINE = re.compile(r"(?:\[titan\] )?" + _LOGGING + r"(?P<message>.*)$")
# A torchtitan log: its tag, its first line, or (a snippet) its checkpoint wording in Python logging's lines.
SNIFF = re.compile(r"\[titan\] \d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - |" + _LOGGING
                   + r"(?:Starting job: |Saving a (?:full|model)|(?:Finished )?(?:[Ss]aving|[Ss]taging|[Ll]oading) the "
                     r"checkpoint|Finish saving the checkpoint|Last step checkpoint completed)")

# The metrics lines (`step: N`) are kept too: each rank's last one is the step of its next save.
GRAMMAR = Grammar(keywords=(b"checkpoint", b"step: "))

ASYNC_UNKNOWN = ("torchtitan logs one duration for 'saving the checkpoint (or staging if async is enabled)' "
                 "(its wording before 2026-06): the report takes it as a whole save; with async checkpointing "
                 "it is the blocking part only")
ASYNC_NO_END = ("torchtitan logs no end of an async save's write: it is known finished when the next save "
                "starts (torchtitan waits for it), its time is left out")
LAST_NO_END = ("torchtitan (2025-02 to 2026-06) logs no end for the last step's save ('Saving a ... checkpoint "
               "at last step' without 'Finished saving')")


@dataclass
class Clock:
    """When a line was written, as far as it says: Python logging's ms timestamp, a Primus prefix, none."""

    wall_ns: int | None
    source: TimeSource

    @property
    def fine(self) -> bool:
        return self.source == TimeSource.TORCHTITAN_TIMESTAMP


@dataclass
class _Save:
    rank: int
    seq: int
    start: Clock | None  # None: no start line (the start is the end minus the duration)
    step: int | None = None
    asynchronous: bool = False
    ambiguous: bool = False  # the wording says "saving (or staging if async is enabled)"
    last_step: bool = False
    events: list[CheckpointEvent] = field(default_factory=list)
    blocked: bool = False  # its blocking part ended


class TorchtitanMessages:
    """torchtitan's checkpoint messages of one log -> events; used by `TorchtitanParser` and by
    `PrimusParser` (Primus's torchtitan backend writes them behind its own prefix)."""

    def __init__(self) -> None:
        self._saves: dict[int, _Save] = {}  # per rank: its save still waiting for lines
        self._loads: dict[int, tuple[CheckpointEvent, Clock]] = {}
        self._step: dict[int, int] = {}  # per rank: the last step line not yet given to a save
        self.seen: set[str] = set()  # what the notes should say

    def feed(self, message: str, seq: int, rank: int, clock: Clock) -> list[CheckpointEvent]:
        if "checkpoint" not in message:
            if match := STEP.search(message):
                self._step[rank] = int(match["step"])
            return []
        if match := SAVE_DONE.match(message):
            return self._save_done(match, seq, rank, clock)
        if match := SAVE_START.match(message):
            events = self._close(rank, seq, ending=None)
            save = _Save(rank, seq, clock, step=self._step.pop(rank, None),
                         asynchronous=match["phase"] == "Staging", ambiguous="(or staging" in message)
            self._saves[rank] = save
            return events
        if match := SAVE_STEP.match(message):
            return self._save_step(match, seq, rank, clock)
        if match := LAST_DONE.match(message):
            return self._last_done(match, seq, rank, clock)
        if match := BACKGROUND_DONE.match(message):
            return self._background_done(seq, rank, clock)
        if match := LOAD_START.match(message):
            return self._load_start(match, seq, rank, clock)
        if match := LOAD_DONE.match(message):
            return self._load_done(match, seq, rank, clock)
        return []

    def finish(self, seq: int) -> list[CheckpointEvent]:
        return [event for rank in sorted(self._saves)
                for event in self._close(rank, seq, ending="the log ends before this save finished")]

    # -- saves ----------------------------------------------------------------------------------

    def _save_step(self, match: re.Match, seq: int, rank: int, clock: Clock) -> list[CheckpointEvent]:
        save = self._saves.get(rank)
        events: list[CheckpointEvent] = []
        if save is None or save.blocked:  # 2024-25: this line starts the save
            events = self._close(rank, seq, ending=None)
            save = self._saves[rank] = _Save(rank, seq, clock)
        save.step = int(match["step"])
        save.last_step = bool(match["last"])
        self._step.pop(rank, None)
        return events

    def _save_done(self, match: re.Match, seq: int, rank: int, clock: Clock) -> list[CheckpointEvent]:
        elapsed = _seconds_ns(match["seconds"])  # first: a number that cannot be read changes nothing
        save = self._saves.get(rank)
        events: list[CheckpointEvent] = []
        if save is None or save.blocked:  # 2024-25: no start line
            events = self._close(rank, seq, ending=None)
            save = self._saves[rank] = _Save(rank, seq, None, step=self._step.pop(rank, None))
        save.asynchronous = save.asynchronous or match["phase"] == "staging"
        save.ambiguous = save.ambiguous or "(or staging" in match[0]
        self._phase_end(save, EventKind.SAVE_BLOCK_END, seq, clock, elapsed)
        save.blocked = True
        if save.asynchronous:
            return events  # its end comes later, as far as torchtitan says it
        self._phase_end(save, EventKind.SAVE_END, seq, clock, elapsed, lead=False)
        if save.ambiguous:  # a background write may still end it (2024-25): held until the next save
            return events
        return events + self._flush(rank)

    def _last_done(self, match: re.Match, seq: int, rank: int, clock: Clock) -> list[CheckpointEvent]:
        elapsed = _seconds_ns(match["seconds"])
        save = self._saves.get(rank)
        events: list[CheckpointEvent] = []
        if save is None or save.blocked:
            events = self._close(rank, seq, ending=None)
            save = self._saves[rank] = _Save(rank, seq, None, step=self._step.pop(rank, None))
        save.asynchronous = False  # the last step's save is synchronous, whatever the mode
        self._phase_end(save, EventKind.SAVE_BLOCK_END, seq, clock, elapsed)
        self._phase_end(save, EventKind.SAVE_END, seq, clock, elapsed, lead=False)
        save.blocked = True
        return events + self._flush(rank)

    def _background_done(self, seq: int, rank: int, clock: Clock) -> list[CheckpointEvent]:
        save = self._saves.get(rank)
        if save is None or not save.blocked:
            return []
        save.asynchronous = True
        save.ambiguous = False
        end = CheckpointEvent(EventKind.SAVE_END, rank=rank, iteration=save.step, wall_ns=clock.wall_ns,
                              source=clock.source if clock.wall_ns is not None else TimeSource.NONE, seq=seq)
        save.events = [event for event in save.events if event.kind != EventKind.SAVE_END] + [end]
        return self._flush(rank)

    def _phase_end(self, save: _Save, kind: EventKind, seq: int, clock: Clock, elapsed_ns: int,
                   lead: bool = True) -> None:
        """The event ending a phase (and, `lead`, the save's start before it), on the best clock, held
        in the save until it is resolved (`_flush`)."""
        if lead:
            start_wall, start_source = None, TimeSource.NONE
            if save.start is not None and save.start.wall_ns is not None:
                start_wall, start_source = save.start.wall_ns, save.start.source
            elif clock.wall_ns is not None:  # no start line: the end minus torchtitan's duration
                start_wall, start_source = clock.wall_ns - elapsed_ns, clock.source
            save.events.append(CheckpointEvent(EventKind.SAVE_START, rank=save.rank, iteration=save.step,
                                               wall_ns=start_wall, source=start_source, seq=save.seq))
        if save.start is not None and save.start.fine and clock.fine:
            end = CheckpointEvent(kind, rank=save.rank, iteration=save.step, wall_ns=clock.wall_ns,
                                  source=clock.source, seq=seq)
        else:
            end = CheckpointEvent(kind, rank=save.rank, iteration=save.step, elapsed_ns=elapsed_ns,
                                  source=TimeSource.TORCHTITAN_TIMER, seq=seq)
        save.events.append(end)

    def _close(self, rank: int, seq: int, ending: str | None) -> list[CheckpointEvent]:
        """The events of `rank`'s save still held; `ending`: why it can finish no more (the log ends, a
        new process loads), None: a next save starts, so it did finish (torchtitan waits for it)."""
        save = self._saves.get(rank)
        if save is None:
            return []
        if not save.blocked:
            why = LAST_NO_END if save.last_step and save.ambiguous else (
                ending or "a new save started before this save logged its end")
            if save.last_step and save.ambiguous:
                self.seen.add(LAST_NO_END)
            if not save.events:
                save.events.append(CheckpointEvent(
                    EventKind.SAVE_START, rank=rank, iteration=save.step, seq=save.seq,
                    wall_ns=save.start.wall_ns if save.start else None,
                    source=save.start.source if save.start and save.start.wall_ns is not None else TimeSource.NONE))
            save.events.append(CheckpointEvent(EventKind.SAVE_END, rank=rank, iteration=save.step,
                                               source=TimeSource.NONE, seq=seq, error=why))
        elif save.asynchronous and not any(e.kind == EventKind.SAVE_END for e in save.events):
            if ending:
                save.events.append(CheckpointEvent(
                    EventKind.SAVE_END, rank=rank, iteration=save.step, source=TimeSource.NONE, seq=seq,
                    error=f"{ending}; torchtitan logs no end of an async save's write"))
            else:
                save.events.append(CheckpointEvent(EventKind.SAVE_END, rank=rank, iteration=save.step,
                                                   source=TimeSource.NONE, seq=seq))
                self.seen.add(ASYNC_NO_END)
        return self._flush(rank)

    def _flush(self, rank: int) -> list[CheckpointEvent]:
        save = self._saves.pop(rank, None)
        if save is None:
            return []
        if save.ambiguous and save.blocked and not save.asynchronous and not save.last_step:
            self.seen.add(ASYNC_UNKNOWN)  # taken as synchronous: no background write ended it
        measures = _measures(save)
        return [replace(event, extra={**event.extra, MEASURES: measures[event.kind]})
                if event.kind in measures and event.error is None else event for event in save.events]

    # -- loads ----------------------------------------------------------------------------------

    def _load_start(self, match: re.Match, seq: int, rank: int, clock: Clock) -> list[CheckpointEvent]:
        events = self._close(rank, seq, ending="a new process started before this save finished")
        step = match["step"]
        if step is None and match["path"] and (found := STEP_DIR.findall(Path(match["path"]).name)):
            step = found[-1]
        start = CheckpointEvent(EventKind.LOAD_START, rank=rank, iteration=int(step) if step is not None else None,
                                path=match["path"], wall_ns=clock.wall_ns, seq=seq,
                                source=clock.source if clock.wall_ns is not None else TimeSource.NONE)
        self._loads[rank] = (start, clock)
        return [*events, start]

    def _load_done(self, match: re.Match, seq: int, rank: int, clock: Clock) -> list[CheckpointEvent]:
        elapsed = _seconds_ns(match["seconds"])
        loaded = self._loads.pop(rank, None)
        if loaded is None:
            return []
        start, start_clock = loaded
        if start_clock.fine and clock.fine:
            timing = {"wall_ns": clock.wall_ns, "source": clock.source}
        else:
            timing = {"elapsed_ns": elapsed, "source": TimeSource.TORCHTITAN_TIMER}
        return [CheckpointEvent(EventKind.LOAD_END, rank=rank, iteration=start.iteration, path=start.path,
                                seq=seq, **timing)]

    @property
    def notes(self) -> list[str]:
        return sorted(self.seen)


def _measures(save: _Save) -> dict[EventKind, str]:
    """What torchtitan's figures of a resolved save measure: its block end's, its end's."""
    if save.asynchronous and not save.last_step:
        block = "staging"  # the write goes on in the background
    elif save.ambiguous and not save.last_step:
        block = "durable_or_staging"  # 'saving (or staging if async is enabled)', async unknown
    else:
        block = "durable"  # a synchronous save; the last step's save always is
    return {EventKind.SAVE_BLOCK_END: block, EventKind.SAVE_END: "durable" if block == "staging" else block}


def _seconds_ns(text: str) -> int:
    """Printed seconds -> ns (exact: no float); ValueError on an endless number."""
    whole, _, fraction = text.partition(".")
    return int(whole) * 10**9 + int((fraction + "000000000")[:9])


def logging_time_ns(stamp: str, milliseconds: str) -> int:
    """Python logging's `YYYY-MM-DD HH:MM:SS`,`mmm` -> ns, read as UTC."""
    return megatron_time_ns(stamp) + int(milliseconds) * 10**6


class TorchtitanParser(LogFormat, OneFileFormat):
    """torchtitan stdout (`[titan]` lines, any ranks) -> events."""

    format = "torchtitan"
    grammar = GRAMMAR

    def __init__(self) -> None:
        self.arguments = ArgumentsDump()  # torchtitan prints none
        self.observed: dict[str, tuple[object, str]] = {}
        self.iteration_times = IterationTimes()  # torchtitan's step lines are not read for it
        self.messages = TorchtitanMessages()
        self._seq = 0

    @classmethod
    def sniff(cls, first_lines: list[str]) -> bool:
        return any(SNIFF.search(line) for line in first_lines)

    def feed_line(self, message: str, seq: int, rank: int | None) -> list[CheckpointEvent]:
        self._seq = seq
        match = LINE.search(message)
        if match is None:
            return []
        clock = Clock(logging_time_ns(match["stamp"], match["ms"]), TimeSource.TORCHTITAN_TIMESTAMP)
        return self.messages.feed(match["message"], seq, rank or 0, clock)

    def finish(self) -> list[CheckpointEvent]:
        return self.messages.finish(self._seq)

    @property
    def run_info(self) -> dict:
        return {}

    @property
    def notes(self) -> list[str]:
        return self.messages.notes
