"""Megatron-LM's checkpoint messages -> checkpoint events.

Megatron's stdout and a Primus log carry the same messages (Primus only adds a prefix), so this is
the one grammar for both. Save/load wordings of every generation:

    [2025-06-01 10:00:00.123456] saving checkpoint at iteration     100 to /ckpt in torch_dist format
      [2025-06-01 10:00:00.523456] scheduled an async checkpoint save at iteration     100 to /ckpt
      [2025-06-01 10:00:09.000000] successfully saved checkpoint from iteration     100 to /ckpt [ t 1/2, p 1/1 ]
    saving checkpoint at iteration     100 to /ckpt in torch_dist format        (2024-25: no timestamp)
    saving checkpoint at iteration       1 to /ckpt                             (legacy)
      successfully saved checkpoint at iteration       1 to /ckpt               (legacy)
      [2026-05-14 10:00:09.000000] successfully saved local checkpoint from iteration     100
     loading checkpoint from /ckpt at iteration 100  |  loading distributed ...  |  loading release ...
      successfully loaded checkpoint from /ckpt [ t 1/1, gtp_remat 1/1, p 1/1 ] at iteration 100
    WARNING: Starting a checkpoint save before previous has finished ...
    UserWarning: --async-save is not supported without --use-persistent-ckpt-worker. Disabling --async-save.

(the `[ t a/b, gtp_remat c/d, p e/f ]` view is the 2026 form, `[ t a/b, p e/f ]` the older one; a
local checkpoint, `--non-persistent-ckpt-type local`, names no folder in its end line).

and the timers printed after a save or load, in the three styles of `megatron.core.timers`:

    (min, max) time across ranks (ms):          max time across ranks (ms):      times across ranks (ms):
        save-checkpoint ......: (12.00, 15.00)      save-checkpoint ......: 15.00      save-checkpoint:
                                                                                          rank  0: 12.00

and the one-line form of Megatron-LM before 2022 (and of Megatron-DeepSpeed), printed by the last rank:

    time (ms) | save-checkpoint: 57514.53
    time (ms) | model-and-optimizer-setup: 2744.35 | train/valid/test-data-iterators-setup: 815.33

`using world size: 8, data-parallel size: 2, ...` (`data-parallel-size` before 2022) gives the world
and data-parallel sizes when no arguments dump does. A `load-checkpoint` timer is printed whether a
checkpoint was loaded or not (`WARNING: could not find the metadata file ...` / `will not load any
checkpoints and will start from random`): it times a load only after a load line.

Which rank, which clock:

* Save and load lines come from rank 0 (`print_rank_0`) and show rank 0's view, so their events
  carry rank 0. A `(min, max)` or `max` timer is the slowest rank's duration; it goes to rank 0's
  operation as well. `rank N: t` lines are per-rank durations: each rank N gets its own operation,
  starting when rank 0's does (a save starts with a barrier) and, for an async save, complete when
  rank 0 reports the checkpoint finalized (finalization waits for every rank).
* Per event, the best clock wins: Megatron's own timestamp (1 us), else the timer's duration
  (10 us, as `elapsed_ns`), else the Primus line prefix (1 s), else none. A timer is therefore only
  emitted for a phase whose two ends are not both timestamped; the report engine merges it into the
  line's event.
* The `save-checkpoint` timer (`save-checkpoint-non-persistent` for a non-persistent save) is the
  whole save when the save is synchronous (`durable`). For an async save (a `scheduled an async
  checkpoint save` line, or `async_save True` in the arguments) it is printed once the save is
  scheduled, not when it is durable (NVIDIA/Megatron-LM#1763): the blocking part only (`schedule`), and
  the save is complete when the `successfully saved` line appears. The names a later Megatron-LM may
  give it then (`save-checkpoint-async-request`, `...-non-persistent-async-request`) say so themselves.
  Megatron-LM turns async saves of distributed checkpoints off without `--use-persistent-ckpt-worker`,
  with a warning: after it, saves are synchronous whatever the arguments say, and the notes say so (as
  when the arguments ask for async saves and no save was scheduled async).
* A timer goes to the oldest save of this process still waiting for one: with 1 s Primus times the
  next save may sort before the previous save's timer. A new process (arguments dump, checkpoint
  load) or the end of the log closes the saves still open as failed-to-finish, so a save killed
  mid-way is never completed by a later save's lines.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field, replace

from ckpt_bench.core.events import OVERLAPS_PREVIOUS, CheckpointEvent, EventKind, TimeSource
from ckpt_bench.report.engine import MEASURES
from ckpt_bench.report.parsers.arguments import ArgumentsDump
from ckpt_bench.report.parsers.base import LogFormat, OneFileFormat
from ckpt_bench.report.parsers.iterations import IterationTimes
from ckpt_bench.report.parsers.lines import MEGATRON, Counted, Grammar, megatron_time_ns

RANK = 0  # the rank that prints Megatron's save/load lines

_STAMP = r"(?:\[(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)\]\s*)?"
_VIEW = r"(?:\s+\[ [^\]]*\])?"  # `[ t 1/2, p 1/1 ]`, rank 0's view of the parallel layout
SAVE_START = re.compile(
    _STAMP + r"saving checkpoint at iteration\s+(?P<iteration>\d+) to (?P<path>.+?)"
    r"(?: in (?P<format>\S+) format)?\s*$"
)
SAVE_SCHEDULED = re.compile(
    _STAMP + r"scheduled an async checkpoint save at iteration\s+(?P<iteration>\d+) to (?P<path>.+?)\s*$"
)
SAVE_DONE = re.compile(
    _STAMP + r"successfully saved checkpoint (?:from|at) iteration\s+(?P<iteration>\d+) "
    r"to (?P<path>.+?)" + _VIEW + r"\s*$"
)
LOCAL_SAVE_DONE = re.compile(_STAMP + r"successfully saved local checkpoint from iteration\s+(?P<iteration>\d+)\s*$")
LOAD_START = re.compile(
    r"(?:^|\s)loading (?P<kind>(?:release |distributed )*)checkpoint from (?P<path>.+?)"
    r"(?: at iteration (?P<iteration>\d+))?\s*$"
)
LOAD_DONE = re.compile(
    r"successfully loaded checkpoint from (?P<path>.+?)" + _VIEW + r" at iteration (?P<iteration>\d+)"
)
OVERLAP_WARNING = "Starting a checkpoint save before previous has finished"
ASYNC_OFF_WARNING = "--async-save is not supported without --use-persistent-ckpt-worker"

TIMER_HEADER = re.compile(r"(?:\(min, max\) time|max time|times) across ranks \(ms\):")
TIMER_ENTRY = re.compile(
    r"^\s+(?P<name>\S+) \.*: (?:\((?P<min>[\d.]+), (?P<max>[\d.]+)\)|(?P<value>[\d.]+))\s*$"
)
TIMER_NAME = re.compile(r"^\s+(?P<name>\S+):\s*$")
TIMER_RANK = re.compile(r"^\s+rank\s+(?P<rank>\d+): (?P<value>[\d.]+)\s*$")
OLD_TIMERS = re.compile(r"^time \(ms\)(?P<items>(?: \| [\w./-]+: [\d.]+)+)\s*$")
OLD_TIMER = re.compile(r" \| (?P<name>[\w./-]+): (?P<value>[\d.]+)")
SCHEDULE_TIMERS = ("save-checkpoint-async-request", "save-checkpoint-non-persistent-async-request")
SAVE_TIMERS = ("save-checkpoint", "save-checkpoint-non-persistent", *SCHEDULE_TIMERS)
WORLD = re.compile(r"using world size: (?P<world>\d+), data-parallel[- ]size: (?P<data>\d+)")
SAVE_LINES = "the save lines"  # where configuration seen in save lines comes from, for the notes
LOAD_TIMER = "load-checkpoint"


@dataclass
class _Operation:
    """A save or load of this process that may still receive lines or a timer."""

    start: CheckpointEvent
    asynchronous: bool = False
    stamped: set = field(default_factory=set)  # phases (end kinds) whose both ends carry timestamps
    ranks: set = field(default_factory=lambda: {RANK})  # ranks with an operation in the events
    end: CheckpointEvent | None = None

    @property
    def iteration(self) -> int | None:
        return self.start.iteration


@dataclass
class _TimerBlock:
    name: str | None = None
    target: _Operation | None = None


class MegatronParser(LogFormat, OneFileFormat):
    """Megatron stdout: feed lines, get events. Also the message parser inside `PrimusParser`."""

    format = "megatron-stdout"
    grammar: Grammar = MEGATRON

    def __init__(self) -> None:
        self.arguments = ArgumentsDump()
        self.observed: dict[str, tuple[object, str]] = {}  # configuration seen outside the arguments dump
        self.iteration_times = IterationTimes()
        self._open: dict[int | None, _Operation] = {}  # saves without their end, by iteration
        self._untimed: deque[_Operation] = deque()  # saves still waiting for their timer
        self._load: _Operation | None = None  # the load still waiting for its timer
        self._timer: _TimerBlock | None = None
        self._overlap_next = False
        self._seq = 0
        self._async_off: int | None = None  # seq of Megatron's warning that it turned async saves off
        self._saves = self._scheduled = 0

    # -- the LogParser interface ----------------------------------------------------------------

    @classmethod
    def sniff(cls, first_lines: list[str]) -> bool:
        """Any text may be a Megatron stdout: its lines are recognised by their wording, not by a
        prefix, so this is the fallback format."""
        return True

    def feed_line(self, message: str, seq: int, rank: int | None) -> list[CheckpointEvent]:
        return self.feed_message(message, seq)

    def count(self, lines: Counted) -> None:
        """Training lines in bulk: each ends a timer block still open, as a line fed would."""
        self._timer = None
        self.iteration_times.count(lines)

    def finish(self) -> list[CheckpointEvent]:
        return self._close_process("the log ends before this save finished (run stopped mid-save)", self._seq)

    @property
    def run_info(self) -> dict:
        return {**{key: value for key, (value, _) in self.observed.items()}, **self.arguments.run_info()}

    @property
    def notes(self) -> list[str]:
        """What the report should say beside its numbers: async saves asked for and not made."""
        if self._async_off is not None:
            asked = " (the arguments dump says async_save True)" if self._asked_async() else ""
            return [f"async saves were asked for{asked} but Megatron-LM turned them off: it saves distributed "
                    "checkpoints asynchronously only with --use-persistent-ckpt-worker (its warning "
                    "'--async-save is not supported without --use-persistent-ckpt-worker'); the saves after it "
                    "are synchronous, their block time is their whole time"]
        if self._asked_async() and self._saves and not self._scheduled:
            return ["the arguments ask for async saves (async_save True) but no save was scheduled async (no "
                    "'scheduled an async checkpoint save' line): the saves may have run synchronously; their "
                    "block time is from the save-checkpoint timer, their completion from the "
                    "'successfully saved' line"]
        return []

    def _asked_async(self) -> bool:
        return self.arguments.values.get("async_save") is True

    # -- messages -------------------------------------------------------------------------------

    def feed_message(self, message: str, seq: int, prefix_ns: int | None = None) -> list[CheckpointEvent]:
        """One message; `prefix_ns` is the 1 s time of a Primus line prefix, if any."""
        self._seq = seq
        if self._timer is not None:
            events = self._timer_line(message, seq)
            if events is not None:
                return events
            self._timer = None
        if self.arguments.active:
            self.arguments.feed(message)
            return []
        if "checkpoint" in message:
            return self._checkpoint_line(message, seq, prefix_ns)
        if "elapsed time per iteration (" in message:  # the commonest line of a long log: tested first, cheaply
            self.iteration_times.line(message)
        elif TIMER_HEADER.search(message):
            self._timer = _TimerBlock()
        elif self.arguments.starts(message):
            return self._close_process("a new process started before this save finished", seq)
        elif ASYNC_OFF_WARNING in message:
            self._async_off = seq
        elif match := WORLD.search(message):
            where = "the world-size line"
            self.observed["world_size"] = (int(match["world"]), where)
            self.observed["data_parallel_size"] = (int(match["data"]), where)
        return []

    def _checkpoint_line(self, message: str, seq: int, prefix_ns: int | None) -> list[CheckpointEvent]:
        if match := OLD_TIMERS.match(message):
            return self._old_timers(match, seq)
        if match := SAVE_START.search(message):
            return self._save_start(match, seq, prefix_ns)
        if match := SAVE_SCHEDULED.search(message):
            return self._save_scheduled(match, seq, prefix_ns)
        if match := SAVE_DONE.search(message) or LOCAL_SAVE_DONE.search(message):
            return self._save_done(match, seq, prefix_ns)
        if match := LOAD_DONE.search(message):
            return self._load_done(match, seq, prefix_ns)
        if match := LOAD_START.search(message):
            return self._load_start(match, seq, prefix_ns)
        if OVERLAP_WARNING in message:
            self._overlap_next = True
        return []

    # -- saves ----------------------------------------------------------------------------------

    def _save_start(self, match: re.Match, seq: int, prefix_ns: int | None) -> list[CheckpointEvent]:
        extra = {"format": match["format"]} if match["format"] else {}
        if self._overlap_next:
            extra[OVERLAPS_PREVIOUS] = True
            self._overlap_next = False
        start = _event(EventKind.SAVE_START, match, seq, prefix_ns, extra=extra)
        save = _Operation(start, asynchronous=self._asked_async() and self._async_off is None)
        self._saves += 1
        self.iteration_times.save_started()
        self._open[start.iteration] = save
        self._untimed.append(save)
        self.observed["save"] = (start.path, SAVE_LINES)
        if match["format"]:
            self.observed["ckpt_format"] = (match["format"], SAVE_LINES)
        return [start]

    def _save_scheduled(self, match: re.Match, seq: int, prefix_ns: int | None) -> list[CheckpointEvent]:
        block_end = _event(EventKind.SAVE_BLOCK_END, match, seq, prefix_ns, extra={MEASURES: "schedule"})
        save = self._open.get(block_end.iteration)
        self.observed["async_save"] = (True, SAVE_LINES)
        self._scheduled += 1
        if save is None:
            return [block_end]  # the log begins mid-save: the engine keeps it as an orphan
        save.asynchronous = True
        if _stamped(save.start, block_end):
            save.stamped.add(EventKind.SAVE_BLOCK_END)
        return [block_end]

    def _save_done(self, match: re.Match, seq: int, prefix_ns: int | None) -> list[CheckpointEvent]:
        end = _event(EventKind.SAVE_END, match, seq, prefix_ns, extra={MEASURES: "durable"})
        save = self._open.pop(end.iteration, None)
        if save is None:
            return [end]
        if end.path is None:  # a local checkpoint's end names no folder: its start did
            end = replace(end, path=save.start.path)
        save.end = end
        if _stamped(save.start, end):
            save.stamped.add(EventKind.SAVE_END)
        if save.asynchronous:
            return [replace(end, rank=rank) for rank in sorted(save.ranks)]
        # Synchronous: training resumes when the save is complete.
        if EventKind.SAVE_END in save.stamped:
            save.stamped.add(EventKind.SAVE_BLOCK_END)
        return [replace(end, kind=EventKind.SAVE_BLOCK_END), end]

    def _close_process(self, why: str, seq: int) -> list[CheckpointEvent]:
        """The process that wrote the log is gone: its unfinished saves will never finish."""
        events = [
            CheckpointEvent(
                EventKind.SAVE_END, rank=rank, iteration=save.iteration, path=save.start.path,
                source=TimeSource.NONE, seq=seq, error=why,
            )
            for save in self._open.values()
            for rank in sorted(save.ranks)
        ]
        self._open.clear()
        self._untimed.clear()
        self._load = None
        self._timer = None
        self._overlap_next = False
        return events

    # -- loads ----------------------------------------------------------------------------------

    def _load_start(self, match: re.Match, seq: int, prefix_ns: int | None) -> list[CheckpointEvent]:
        kind = match["kind"].strip()
        extra = {"kind": kind} if kind else {}
        return self.open_load(_event(EventKind.LOAD_START, match, seq, prefix_ns, extra=extra), seq)

    def open_load(self, start: CheckpointEvent, seq: int) -> list[CheckpointEvent]:
        """A load starts (its line, or a line of the engine below Megatron: DeepSpeed's): a new process, so
        its saves still open never finish; the load's end and timer will go to it."""
        events = self._close_process("a new process started before this save finished", seq)
        self._load = _Operation(start)
        return [*events, start]

    def _load_done(self, match: re.Match, seq: int, prefix_ns: int | None) -> list[CheckpointEvent]:
        end = _event(EventKind.LOAD_END, match, seq, prefix_ns)
        if self._load is not None:
            self._load.start = replace(self._load.start, iteration=end.iteration)
            self._load.end = end
        return [end]

    # -- timers ---------------------------------------------------------------------------------

    def _timer_line(self, message: str, seq: int) -> list[CheckpointEvent] | None:
        """Events of one line of an open timer block, or None when the line ends the block. A value
        that is not a number (`2250..0`) raises after the timer has taken its save: that save goes
        untimed, rather than the next save taking this one's timer."""
        block = self._timer
        if match := TIMER_ENTRY.match(message):
            block.name, block.target = match["name"], self._timer_target(match["name"])
            return self._apply_timer(block, RANK, _ms_to_ns(match["max"] or match["value"]), seq)
        if match := TIMER_RANK.match(message):
            return self._apply_timer(block, int(match["rank"]), _ms_to_ns(match["value"]), seq)
        if match := TIMER_NAME.match(message):
            block.name, block.target = match["name"], self._timer_target(match["name"])
            return []
        return None

    def _old_timers(self, match: re.Match, seq: int) -> list[CheckpointEvent]:
        """`time (ms) | name: value | ...`: each a timer block of one entry, the last rank's time."""
        events = []
        for item in OLD_TIMER.finditer(match["items"]):
            block = _TimerBlock(item["name"], self._timer_target(item["name"]))
            events += self._apply_timer(block, RANK, _ms_to_ns(item["value"]), seq)
        return events

    def _timer_target(self, name: str) -> _Operation | None:
        if name in SAVE_TIMERS and self._untimed:
            save = self._untimed.popleft()
            save.asynchronous |= name in SCHEDULE_TIMERS
            return save
        if name == LOAD_TIMER and self._load is not None:
            load, self._load = self._load, None
            return load
        return None  # another timer, or one with no operation in the log (e.g. nothing to load)

    def _apply_timer(
        self, block: _TimerBlock, rank: int, elapsed_ns: int, seq: int
    ) -> list[CheckpointEvent]:
        op = block.target
        if op is None:
            return []
        events = []
        if rank not in op.ranks:
            op.ranks.add(rank)
            events.append(replace(op.start, rank=rank, seq=seq))
        extra = {"timer": block.name}
        if op.start.kind == EventKind.LOAD_START:
            kinds = (EventKind.LOAD_END,)
        elif op.asynchronous:
            kinds = (EventKind.SAVE_BLOCK_END,)  # an async save's timer covers the blocking part
            extra[MEASURES] = "schedule"
        else:
            kinds = (EventKind.SAVE_BLOCK_END, EventKind.SAVE_END)
            extra[MEASURES] = "durable"
        for kind in kinds:
            if rank == RANK and kind in op.stamped:
                continue  # both ends carry Megatron timestamps: they are the better clock
            events.append(
                CheckpointEvent(
                    kind, rank=rank, iteration=op.iteration, path=op.start.path,
                    elapsed_ns=elapsed_ns, source=TimeSource.MEGATRON_TIMER, seq=seq, extra=extra,
                )
            )
        if op.asynchronous and op.end is not None and rank != RANK:
            events.append(replace(op.end, rank=rank, seq=seq))  # finalized after every rank wrote
        return events


def _event(
    kind: EventKind, match: re.Match, seq: int, prefix_ns: int | None, extra: dict | None = None
) -> CheckpointEvent:
    """An event of a save/load line, on the best clock the line has."""
    groups = match.groupdict()
    iteration = groups.get("iteration")
    clock: dict = {"source": TimeSource.NONE}
    if groups.get("stamp"):
        clock = {"wall_ns": megatron_time_ns(groups["stamp"]), "source": TimeSource.MEGATRON_TIMESTAMP}
    elif prefix_ns is not None:
        clock = {"wall_ns": prefix_ns, "source": TimeSource.PRIMUS_PREFIX}
    return CheckpointEvent(
        kind,
        rank=RANK,
        iteration=int(iteration) if iteration is not None else None,
        path=(groups.get("path") or "").strip() or None,
        seq=seq,
        extra=extra or {},
        **clock,
    )


def _ms_to_ns(milliseconds: str) -> int:
    """A timer's printed milliseconds -> ns; ValueError/OverflowError on `2250..0` or an endless number."""
    return round(float(milliseconds) * 1e6)


def _stamped(start: CheckpointEvent, end: CheckpointEvent) -> bool:
    return start.source == end.source == TimeSource.MEGATRON_TIMESTAMP
