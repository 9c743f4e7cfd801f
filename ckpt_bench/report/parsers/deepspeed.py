"""Megatron-DeepSpeed (BigScience's and Microsoft's forks) and DeepSpeed's checkpoint lines -> events.

Megatron-DeepSpeed prints Megatron's wording, read by `MegatronParser` (`saving checkpoint at iteration
N to DIR`, `successfully saved checkpoint at iteration N to DIR`, `successfully loaded checkpoint from
DIR at iteration N`, its timers, `time (ms) | save-checkpoint: X` of 2021-22 included, all without a
time of day), and DeepSpeed's logger adds lines of its own, `[YYYY-MM-DD HH:MM:SS,mmm] [LEVEL]
[file.py:line:function] message` (`log_dist` puts `[Rank N] ` before the message):

    [...] [INFO] [logging.py:96:log_dist] [Rank 0] [Torch] Checkpoint global_step300 is about to be saved!
    [...] [INFO] [torch_checkpoint_engine.py:33:commit] [Torch] Checkpoint global_step300 is ready now!
    [...] [INFO] [logging.py:68:log_dist] [Rank 0] Saving model checkpoint: DIR/global_step300/mp_rank_00...pt
    [...] [INFO] [torch_checkpoint_engine.py:27:load] [Torch] Loading checkpoint from FILE...
    [...] [INFO] [torch_checkpoint_engine.py:29:load] [Torch] Loaded checkpoint from FILE.

(DeepSpeed's checkpoint engines, `deepspeed/runtime/checkpoint_engine/`: the torch engine from 2022, its
start line `is begin to save!` until 2023-03; other engines print the same with their own tag.)

Which lines time what:

* A save starts at rank 0's `is about to be saved!` and ends at the LAST `is ready now!` of its tag:
  every rank commits, and a rank with nothing to write (a data-parallel rank > 0 of a pipeline stage)
  commits milliseconds after the start, so the first `ready` is never the end. `Saving model checkpoint:`
  is printed late in the save, after the layer files: it is neither start nor end.
* Megatron-DeepSpeed times its saves barrier to barrier (`save_checkpoint_and_time`): the whole save,
  synchronous, so block = total = durable. When its timer is printed, the duration is the timer's
  (a little longer than DeepSpeed's span: it covers the barriers); DeepSpeed's lines place the save in
  time. The save at the end of training is untimed: DeepSpeed's span (1 ms) is its time.
* A load starts at the first `Loading checkpoint from` and ends at the last `Loaded checkpoint from`
  before Megatron's `successfully loaded checkpoint` line; its `load-checkpoint` timer, when printed, is
  its time. With no checkpoint to load DeepSpeed loads nothing (`Unable to find latest file at ...`),
  and Megatron's timer printed anyway is no load.
* Without Megatron's lines (DeepSpeed under another trainer) a save is read from DeepSpeed's alone: it
  ends at its last `ready` line before the next save, a load or the end of the log.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace

from ckpt_bench.core.events import CheckpointEvent, EventKind, TimeSource
from ckpt_bench.report.engine import MEASURES
from ckpt_bench.report.parsers.base import LogFormat, OneFileFormat
from ckpt_bench.report.parsers.lines import MEGATRON, Counted, Grammar
from ckpt_bench.report.parsers.megatron import RANK, MegatronParser
from ckpt_bench.report.parsers.torchtitan import logging_time_ns

LINE = re.compile(r"^\[(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(?P<ms>\d{3})\] \[[A-Z]+\] \[[\w.]+:\d+:\w+\] "
                  r"(?:\[Rank -?\d+\] )?(?P<message>.*)$")
ABOUT = re.compile(r"^\[\w+\] Checkpoint (?P<tag>\S+) is (?:about to be saved|begin to save)!")
READY = re.compile(r"^\[\w+\] Checkpoint (?P<tag>\S+) is ready now!")
LOADING = re.compile(r"^\[\w+\] Loading checkpoint from (?P<path>\S+?)\.\.\.\s*$")
LOADED = re.compile(r"^\[\w+\] Loaded checkpoint from (?P<path>\S+?)\.\s*$")
TAG_STEP = re.compile(r"global_step(\d+)")

GRAMMAR = Grammar(keywords=(*MEGATRON.keywords, b"] Checkpoint "), record_start=MEGATRON.record_start,
                  headers=MEGATRON.headers, counted=MEGATRON.counted)
SNIFF = re.compile(LINE.pattern[1:] + "|" + ABOUT.pattern[1:])


@dataclass
class _Span:
    """DeepSpeed's view of one save (or load): its start, the time of its last closing line so far."""

    start: CheckpointEvent | None  # None: the log begins after it
    last_ns: int | None = None  # the last `ready` (`Loaded`) line so far


@dataclass
class _Held:
    """Megatron's start of a save, held until its end so DeepSpeed's start line can time it."""

    start: CheckpointEvent
    deepspeed: _Span | None = None
    events: list[CheckpointEvent] = field(default_factory=list)


class DeepSpeedParser(LogFormat, OneFileFormat):
    """Megatron-DeepSpeed or DeepSpeed stdout -> events: Megatron's lines by `MegatronParser`, timed
    by DeepSpeed's."""

    format = "megatron-deepspeed"
    grammar = GRAMMAR

    def __init__(self) -> None:
        self.megatron = MegatronParser()
        self.arguments = self.megatron.arguments
        self.observed = self.megatron.observed
        self.iteration_times = self.megatron.iteration_times
        self._held: dict[int | None, _Held] = {}  # Megatron's saves by iteration, until their end
        self._saves: dict[str, _Span] = {}  # DeepSpeed's saves by tag (the latest of a tag)
        self._alone: _Span | None = None  # a save of DeepSpeed's with no Megatron line about it
        self._load: _Span | None = None
        self._seq = 0

    @classmethod
    def sniff(cls, first_lines: list[str]) -> bool:
        """DeepSpeed's logger lines, or a checkpoint engine's start line."""
        return any(SNIFF.search(line) for line in first_lines)

    def feed_line(self, message: str, seq: int, rank: int | None) -> list[CheckpointEvent]:
        self._seq = seq
        match = LINE.match(message)
        if match is None:
            return self._megatron(self.megatron.feed_message(message, seq))
        text = match["message"]
        if "heckpoint" not in text:  # none of DeepSpeed's checkpoint lines (`Checkpoint`, `checkpoint`)
            return []
        wall_ns = logging_time_ns(match["stamp"], match["ms"])
        if found := READY.match(text):
            self._saves.setdefault(found["tag"], _Span(None)).last_ns = wall_ns
            return []
        if found := ABOUT.match(text):
            return self._about(found["tag"], wall_ns, seq)
        if found := LOADING.match(text):
            return self._loading(found["path"], wall_ns, seq)
        if LOADED.match(text) and self._load is not None:
            self._load.last_ns = wall_ns
        return []

    def count(self, lines: Counted) -> None:
        """Megatron's training lines (DeepSpeed's own logger prints no iteration time)."""
        self.megatron.count(lines)

    def finish(self) -> list[CheckpointEvent]:
        events = self._close_alone(self._seq) + self._megatron(self.megatron.finish())
        return events + [event for held in self._held.values() for event in [held.start, *held.events]]

    @property
    def run_info(self) -> dict:
        return self.megatron.run_info

    @property
    def notes(self) -> list[str]:
        return self.megatron.notes

    # -- DeepSpeed's lines ----------------------------------------------------------------------

    def _about(self, tag: str, wall_ns: int, seq: int) -> list[CheckpointEvent]:
        iteration = _step(tag)
        span = _Span(CheckpointEvent(EventKind.SAVE_START, rank=RANK, iteration=iteration, wall_ns=wall_ns,
                                     source=TimeSource.DEEPSPEED_TIMESTAMP, seq=seq))
        self._saves[tag] = span
        events = self._close_alone(seq)
        held = self._held.get(iteration)
        if held is not None:
            held.deepspeed = span
        else:  # no Megatron save line before it: DeepSpeed's own save
            self._alone = span
        return events

    def _close_alone(self, seq: int) -> list[CheckpointEvent]:
        """DeepSpeed's own save (no Megatron line about it) ends at its last `ready` line."""
        span, self._alone = self._alone, None
        if span is None or span.start is None:
            return []
        common = {"rank": RANK, "iteration": span.start.iteration, "seq": seq}
        if span.last_ns is None:
            return [span.start, CheckpointEvent(EventKind.SAVE_END, **common, error="no 'is ready now!' line: it "
                                                "never finished")]
        ends = [CheckpointEvent(kind, wall_ns=span.last_ns, source=TimeSource.DEEPSPEED_TIMESTAMP,
                                extra={MEASURES: "durable"}, **common)
                for kind in (EventKind.SAVE_BLOCK_END, EventKind.SAVE_END)]
        return [span.start, *ends]

    def _loading(self, path: str, wall_ns: int, seq: int) -> list[CheckpointEvent]:
        if self._load is not None:
            return []  # another file of the load being read
        start = CheckpointEvent(EventKind.LOAD_START, rank=RANK, iteration=_step(path), path=os.path.dirname(path),
                                wall_ns=wall_ns, source=TimeSource.DEEPSPEED_TIMESTAMP, seq=seq)
        self._load = _Span(start)
        return self._close_alone(seq) + self._megatron(self.megatron.open_load(start, seq))

    # -- Megatron's events, timed by DeepSpeed's lines ------------------------------------------

    def _megatron(self, events: list[CheckpointEvent]) -> list[CheckpointEvent]:
        out: list[CheckpointEvent] = []
        for event in events:
            if event.kind == EventKind.SAVE_START:
                older = self._held.pop(event.iteration, None)  # a save of this iteration that never ended
                out += [older.start, *older.events] if older is not None else []
                self._held[event.iteration] = _Held(event)
            elif event.kind == EventKind.LOAD_END and event.source == TimeSource.NONE and self._load is not None:
                out.append(self._timed(event, self._load))
                self._load = None
            elif event.kind in (EventKind.SAVE_BLOCK_END, EventKind.SAVE_END):
                out += self._save_event(event)
            else:
                out.append(event)
        return out

    def _save_event(self, event: CheckpointEvent) -> list[CheckpointEvent]:
        """A save's end event: held with its start until its end line, then all of them, the lines' events
        timed by DeepSpeed's lines when there are any (a timer's keep their duration)."""
        line = event.elapsed_ns is None and event.error is None  # from a save line, not a timer or a close
        held = self._held.get(event.iteration)
        if held is None:  # its save was resolved, or its start is not in the log (an unmatched end)
            span = self._saves.get(f"global_step{event.iteration}")
            return [self._timed(event, span) if line and span is not None else event]
        if line and held.deepspeed is not None:
            event = self._timed(event, held.deepspeed)
        held.events.append(event)
        if event.kind != EventKind.SAVE_END or event.elapsed_ns is not None:
            return []  # its end line is still to come
        del self._held[event.iteration]
        start, span = held.start, held.deepspeed
        if span is not None and span.start is not None:
            start = replace(start, wall_ns=span.start.wall_ns, source=span.start.source)
        return [start, *held.events]

    @staticmethod
    def _timed(event: CheckpointEvent, span: _Span) -> CheckpointEvent:
        """`event` at DeepSpeed's last closing line of its save or load (when there was one)."""
        if span.last_ns is None or event.wall_ns is not None:
            return event
        return replace(event, wall_ns=span.last_ns, source=TimeSource.DEEPSPEED_TIMESTAMP)


def _step(text: str) -> int | None:
    """The iteration of a DeepSpeed tag or path (`global_step300`)."""
    step = TAG_STEP.search(text)
    return int(step[1]) if step else None
