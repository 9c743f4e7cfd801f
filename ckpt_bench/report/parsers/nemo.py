"""NeMo 2 (and BioNeMo, built on it) logs -> checkpoint events.

NeMo's logger writes `[NeMo <level> <YYYY-MM-DD HH:MM:SS> <module>:<line>] message` (with NEMO_TESTING
` rank:R` inside the brackets), on rank 0 unless NEMO_TESTING is set; a launcher may put its own
prefix before it (nemo_run's `job/0 [default0]:`). The checkpoint lines (`nemo/lightning/io/pl.py`,
`nemo/utils/callbacks/dist_ckpt_io.py`, `nemo/lightning/pytorch/callbacks/model_checkpoint.py`):

    Global Checkpoint Save : Rank: 0 : Iteration: 24 : Start time: 1771351120.135s : Save duration: 25.537s
    Scheduled async checkpoint save for /ckpt/model--step=24-last.ckpt
    Async finalization time took 0.013 s
    Successfully saved checkpoint from iteration      24 to /ckpt/model--step=24-last.ckpt
    Async checkpoint save for step 25 (/ckpt/model--step=24-last.ckpt) finalized successfully.
    Pending async checkpoint saves. Finalizing them synchronously now
    Global Checkpoint Load : Rank : 0 : Start time : 1771350000.120s : Time spent in load_checkpoint: 12.500s

Around them, lines of Lightning and of the launchers (nemo-run's and torchrun's prefixes are stripped
as every launcher's, `launchers`):

    All distributed processes registered. Starting with 8 processes    (Lightning; BioNeMo on torchelastic:
                                                                         `Initializing distributed: GLOBAL_RANK: 1,
                                                                         MEMBER: 2/2`): the world size
    Restoring states from the checkpoint path at /ckpt/model--step=39-last   (a resume: a load, with the
    Restored all states from the checkpoint at /ckpt/model--step=39-last       `Global Checkpoint Load` between)
    Doing selective restore from RestoreConfig(path='nemo2_evo2_1b_8k', ... load_optim_state=False ...)
    Preemption detected, saving checkpoint and exiting                  (nemo/lightning/pytorch/callbacks/
    Async checkpointing detected, waiting for it to complete             preemption.py)
    [2025-08-12 09:03:36,590] [INFO] [ft_launcher2841@node] [default] Worker group FAILED. 3/3 attempts left;
        will restart worker group                                       (ft_launcher: the processes are gone)

Megatron-Bridge (born nemo-lm) prints Megatron-LM's wording (`saving checkpoint at iteration ...`,
timers, arguments): a line that is not one of NeMo's checkpoint lines is read by Megatron's grammar
(`MegatronParser`), with or without the NeMo prefix, so a log that mixes the two reads whole.

* `Global Checkpoint Save` is printed when the save call returns: its duration is the whole save when
  the save is synchronous, the blocking part when a `Scheduled async checkpoint save` line follows it.
  An async save is complete when `Successfully saved checkpoint from iteration N` (or, without it,
  `Async checkpoint save for step N+1 ... finalized`) appears: NeMo numbers one save two ways,
  iteration N and step N+1; the report uses the iteration.
* A NeMo that prints no `Global Checkpoint Save` (only `Scheduled` and `finalized`; before 2025 the
  `finalized` line names no path) still has a save per `Scheduled` line, its iteration the path's `step=N`,
  ended by the `finalized` line of its path (or of step N+1); its start is not in the log, so its times are
  null (a preemption save's start is its `Preemption detected` line), and how long it was written after the
  call returned is its `total_time_at_least` (report.engine), a lower bound on its total time.
* ModelCheckpoint may save one iteration twice, a top-k copy and a `-last` copy, to two paths: each
  is a save of its own (two writes), paired with its end by its path, never by the iteration alone.
* What the figures measure (`source_semantics`): `Save duration` is the save call only, the whole
  save (`durable`) when it is synchronous, the staging and scheduling (`call`) when a `Scheduled`
  line follows; the end of an async save is `durable`. A preemption save blocks until it is durable
  (training has stopped, the process waits for it and exits): its block time runs to its end line.
* `Async finalization time took X s` is printed by every poll for finished async saves while one is
  pending, also when nothing finished: training waits for each. The notes sum up the polls that
  finalized a save apart from the others, and the two blocking waits: the synchronous finalization at
  the end of training (`Pending async checkpoint saves`: one wait for every save still being written,
  counted once, not per save) and a preemption save's (`Async checkpointing detected`).
* An end line whose save's start is not in the log (it begins mid-save, or its start lines were cut)
  is an unmatched end, never a save; a restore, or a worker group restarted by the launcher, ends the
  process whose async saves are still being written: they never finish.

Clocks: durations (`Save duration`, `Time spent in load_checkpoint`) are NeMo's own, 1 ms. A time of
day comes from the line prefix only (1 s, the machine's local time): the start of a save is its line's
prefix minus its duration, the end of an async save the prefix of its end line, so an async save's
total time has 1 s resolution. (`Start time: <epoch>s` is UTC, the prefix local time: they are not
mixed.) Events of a save are emitted once it is resolved, each save's together, so two saves of one
iteration are never mixed up; a save that starts while an async save is still being written carries
`overlaps_previous`.
"""

from __future__ import annotations

import os
import re
from collections import deque
from dataclasses import dataclass, field

from ckpt_bench.core.events import OVERLAPS_PREVIOUS, CheckpointEvent, EventKind, TimeSource
from ckpt_bench.report.engine import MEASURES
from ckpt_bench.report.parsers.base import LogFormat, OneFileFormat
from ckpt_bench.report.parsers.launchers import KEYWORDS as LAUNCHER_KEYWORDS
from ckpt_bench.report.parsers.launchers import Launcher
from ckpt_bench.report.parsers.lines import MEGATRON, Counted, Grammar, megatron_time_ns
from ckpt_bench.report.parsers.megatron import MegatronParser

PREFIX = re.compile(r"\[NeMo (?P<level>[A-Z]) (?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) [^\]]*\]\s?(?P<message>.*)$")
_NUMBER = r"\d+(?:\.\d+)?"
SAVE = re.compile(r"Global Checkpoint Save : Rank: (?P<rank>\d+) : (?:Iteration: (?P<iteration>\d+) : )?"
                  r"Start time: " + _NUMBER + r"s : Save duration: (?P<duration>" + _NUMBER + r")s")
SCHEDULED = re.compile(r"Scheduled async checkpoint save for (?P<path>.+?)\s*$")
SAVED = re.compile(r"Successfully saved checkpoint from iteration\s+(?P<iteration>\d+) to (?P<path>.+?)\s*$")
# Before 2025 without the path: `Async checkpoint save for step 19 finalized successfully.`
FINALIZED = re.compile(r"Async checkpoint save for step (?P<step>\d+)(?: \((?P<path>.*)\))? finalized successfully")
FINALIZE_TIME = re.compile(r"Async finalization time took (?P<seconds>" + _NUMBER + r") s")
PENDING = "Pending async checkpoint saves. Finalizing them synchronously now"
LOAD = re.compile(r"Global Checkpoint Load : Rank : (?P<rank>\d+) : Start time : " + _NUMBER
                  + r"s : Time spent in load_checkpoint: (?P<duration>" + _NUMBER + r")s")
RESTORING = re.compile(r"Restoring states from the checkpoint path at (?P<path>\S+)")
RESTORED = "Restored all states from the checkpoint at "
SELECTIVE = re.compile(r"Doing selective restore from RestoreConfig\(path='(?P<path>[^']*)'(?P<config>[^)]*)\)")
PREEMPTION = "Preemption detected, saving checkpoint and exiting"
WAITING = "Async checkpointing detected, waiting for it to complete"
WORLD = re.compile(r"Starting with (?P<world>\d+) processes|Initializing distributed: GLOBAL_RANK: \d+, "
                   r"MEMBER: \d+/(?P<members>\d+)")
STEP = re.compile(r"step=(\d+)")

GRAMMAR = Grammar(keywords=(*MEGATRON.keywords, b"Global Checkpoint ", b"Async finalization time",
                            b"distributed processes registered", b"Initializing distributed: ", b"selective restore",
                            *LAUNCHER_KEYWORDS),
                  record_start=MEGATRON.record_start, headers=MEGATRON.headers, counted=MEGATRON.counted)
WHERE = "NeMo's checkpoint lines"


@dataclass
class _Save:
    """One save (across the ranks that logged it), held until it is resolved."""

    iteration: int | None
    # rank -> (start, duration, seq); start and duration None when NeMo printed no `Global Checkpoint Save`
    starts: dict[int, tuple[int | None, int | None, int]] = field(default_factory=dict)
    path: str | None = None
    returned: tuple[int, int] | None = None  # (time, seq) of the `Scheduled` line when no duration was printed
    asynchronous: bool = False
    overlaps: bool = False
    preemption: bool = False  # saved on preemption: training has stopped, it blocks until durable


class NemoParser(LogFormat, OneFileFormat):
    """NeMo log lines (any prefix before `[NeMo ...]`) -> events."""

    format = "nemo"
    grammar = GRAMMAR

    def __init__(self) -> None:
        self.megatron = MegatronParser()  # Megatron-LM's wording, as Megatron-Bridge prints it
        self.arguments = self.megatron.arguments
        self.observed = self.megatron.observed
        self.iteration_times = self.megatron.iteration_times
        self._latest: _Save | None = None  # the last save started, not resolved yet
        self._writing: list[_Save] = []  # async saves scheduled, not finished
        self._done: deque[_Save] = deque(maxlen=64)  # finished saves, for their late second end line
        self._finished_since_poll = 0
        self._polls: dict[str, list[float]] = {"finalized": [], "idle": [], "at_end": [], "preemption": []}
        self._pending_at_end: int | None = None  # saves being written when training ended
        self._unmatched_at_end = 0  # ends finalized then whose save's start is not in the log
        self._preempting: tuple[int, int] | None = None  # (time, seq) of `Preemption detected`: the next save's
        self._waiting = False  # a preemption save is being waited for: the next poll is that wait
        self._preemption_saves: list[int | None] = []
        self._restoring: str | None = None  # a resume's checkpoint, until its load is read
        self._selective: list[str] = []  # selective restores, for the notes
        self._orphans: deque[str] = deque(maxlen=64)  # paths of ends without their save
        self.launcher = Launcher()
        self._two_numberings = False
        self._copies: dict[int | None, set[str]] = {}
        self._after_return: list[float] = []  # saves without `Global Checkpoint Save`: scheduled -> finalized, s
        self._duration_lines = 0  # `Global Checkpoint Save` lines read
        self._async_seen = False
        self._seq = 0

    @classmethod
    def sniff(cls, first_lines: list[str]) -> bool:
        """NeMo's logger prefix, or (a snippet) one of NeMo's checkpoint lines."""
        return any(PREFIX.search(line) or SAVE.search(line) or LOAD.search(line) or FINALIZED.search(line)
                   for line in first_lines)

    def feed_line(self, line: str, seq: int, rank: int | None) -> list[CheckpointEvent]:
        self._seq = seq
        match = PREFIX.search(line)
        if match is None:
            return self._bare(line, seq)
        message = match["message"]
        if "Checkpoint" in message:
            if found := SAVE.search(message):
                return self._save(found, seq, megatron_time_ns(match["stamp"]))
            if found := LOAD.search(message):
                return self._load(found, seq, megatron_time_ns(match["stamp"]))
        elif found := SCHEDULED.search(message):
            self._scheduled(found["path"], seq, megatron_time_ns(match["stamp"]))
            return []
        elif found := SAVED.search(message):
            return self._finished(found["path"], int(found["iteration"]), seq, megatron_time_ns(match["stamp"]))
        elif found := FINALIZED.search(message):
            return self._finished(found["path"], int(found["step"]) - 1, seq, megatron_time_ns(match["stamp"]),
                                  numbered_by_step=True)
        elif found := FINALIZE_TIME.search(message):
            self._poll(float(found["seconds"]))
            return []
        elif PENDING in message:
            self._pending_at_end = len(self._writing)
            return []
        elif PREEMPTION in message:
            self._preempting = (megatron_time_ns(match["stamp"]), seq)
            return []
        elif WAITING in message:
            self._waiting = True
            return []
        elif found := SELECTIVE.search(message):
            self._restoring = found["path"]
            weights_only = "load_optim_state=False" in found["config"]
            self._selective.append(found["path"] + " (model weights only)" * weights_only)
            return []
        return self.megatron.feed_message(message, seq)

    def _bare(self, line: str, seq: int) -> list[CheckpointEvent]:
        """A line without NeMo's prefix: Lightning's, a launcher's, or Megatron-LM's wording."""
        if self.launcher.read(line):
            return self._close_process(seq, "the launcher restarted the worker group before this async save finished")
        if found := RESTORING.search(line):
            self._restoring = found["path"]
            return self._close_process(seq, "a new process started before this async save finished")
        if RESTORED in line:
            return self._restored(seq)
        if found := WORLD.search(line):
            self.observed["world_size"] = (int(found["world"] or found["members"]), "Lightning's or torchelastic's "
                                           "start-up lines")
            return []
        return self.megatron.feed_message(line, seq)

    def count(self, lines: Counted) -> None:
        self.megatron.count(lines)

    def finish(self) -> list[CheckpointEvent]:
        if self.launcher.world_size is not None:  # unless Lightning's or torchelastic's lines said it
            self.observed.setdefault("world_size", (self.launcher.world_size, "the launcher's launch configuration"))
        events = self.megatron.finish() + self._resolve_latest(self._seq, ending=True)
        for save in self._writing:
            events += self._events(save, self._seq, error="the log ends before this async save finished "
                                                          "(run stopped mid-save)")
        self._writing.clear()
        return events

    @property
    def run_info(self) -> dict:
        return self.megatron.run_info

    # -- saves ----------------------------------------------------------------------------------

    def _save(self, match: re.Match, seq: int, prefix_ns: int) -> list[CheckpointEvent]:
        self._duration_lines += 1
        rank = int(match["rank"])
        iteration = int(match["iteration"]) if match["iteration"] is not None else None
        duration = _seconds_ns(match["duration"])
        start = (prefix_ns - duration, duration, seq)
        latest = self._latest
        if latest is not None and latest.iteration == iteration and rank not in latest.starts:
            latest.starts[rank] = start  # another rank's line of the same save
            return []
        if latest is None:  # another rank's line of a save its rank 0 already scheduled
            writing = next((s for s in reversed(self._writing) if s.iteration == iteration and rank not in s.starts),
                           None)
            if writing is not None:
                writing.starts[rank] = start
                return []
        events = self._resolve_latest(seq)
        self._latest = _Save(iteration, {rank: start}, overlaps=bool(self._writing),
                             preemption=self._preempted(iteration))
        return events

    def _preempted(self, iteration: int | None) -> bool:
        """Whether the save starting now is the preemption save (the first after `Preemption detected`)."""
        if self._preempting is None:
            return False
        self._preemption_saves.append(iteration)
        self._preempting = None
        return True

    def _scheduled(self, path: str, seq: int, prefix_ns: int) -> None:
        save = self._latest
        if save is not None and save.path in (None, path):
            save.path, save.asynchronous = path, True
            self._latest = None
        elif save is None and all(s.path != path for s in self._writing):
            # NeMo printed no `Global Checkpoint Save` for it (its versions before that line, or a log cut
            # between the two): the save call returned at this line; when it started is not in the log, but for
            # a preemption save, started at its `Preemption detected` line.
            step = STEP.findall(path)
            iteration = int(step[-1]) if step else None
            started = self._preempting or (None, seq)
            save = _Save(iteration, {0: (started[0], None, started[1])}, path=path, returned=(prefix_ns, seq),
                         overlaps=bool(self._writing), preemption=self._preempted(iteration))
        else:
            return  # another rank's line of a save already scheduled
        save.asynchronous = True
        self._writing.append(save)
        self._async_seen = True
        self._note_path(save)

    def _resolve_latest(self, seq: int, ending: bool = False) -> list[CheckpointEvent]:
        """The last save started and not scheduled async: synchronous, so complete (at the end of the
        log, after async saves, its async line may be what is missing: then it never finished)."""
        save, self._latest = self._latest, None
        if save is None:
            return []
        if ending and self._async_seen:
            return self._events(save, seq, error="the log ends right after this save's blocking part: it never "
                                                 "finished")
        self.observed.setdefault("async_save", (False, WHERE))
        return self._events(save)

    def _finished(self, path: str | None, iteration: int, seq: int, prefix_ns: int,
                  numbered_by_step: bool = False) -> list[CheckpointEvent]:
        events = self._resolve_latest(seq)
        save = next((s for s in self._writing if s.path == path), None) if path is not None else None
        if save is None:
            done = next((s for s in self._done if s.path == path), None) if path is not None else None
            if done is not None:  # its other end line (the two numberings of one save)
                self._two_numberings |= numbered_by_step and done.iteration == iteration
                return events
            # A path written another way than in its `Scheduled` line: the oldest save of the iteration.
            save = next((s for s in self._writing if s.iteration == iteration), None)
            if save is None:  # the log begins mid-save, or its start lines were cut: an end without its save
                if path in self._orphans:
                    return events  # its other end line
                self._orphans.append(path)
                self._unmatched_at_end += self._pending_at_end is not None
                return events + [CheckpointEvent(EventKind.SAVE_END, rank=0, iteration=iteration, path=path,
                                                 wall_ns=prefix_ns, source=TimeSource.NEMO_PREFIX, seq=seq)]
        if numbered_by_step and save.iteration == iteration:
            self._two_numberings = True
        self._writing.remove(save)
        self._done.append(save)
        self._finished_since_poll += 1
        if save.returned is not None and not save.preemption:
            self._after_return.append((prefix_ns - save.returned[0]) / 1e9)
        return events + self._events(save, seq, wall_ns=prefix_ns)

    def _poll(self, seconds: float) -> None:
        if self._waiting:  # the wait for a preemption save, not a poll
            self._polls["preemption"].append(seconds)
            self._waiting = False
        elif self._pending_at_end is not None:
            self._polls["at_end"].append(seconds)
        elif self._finished_since_poll:
            self._polls["finalized"].append(seconds)
        else:
            self._polls["idle"].append(seconds)
        self._finished_since_poll = 0

    def _note_path(self, save: _Save) -> None:
        self._copies.setdefault(save.iteration, set()).add(save.path)
        self.observed.setdefault("save", (os.path.dirname(save.path.rstrip("/")) or save.path, WHERE))
        self.observed["async_save"] = (True, WHERE)

    # -- events ---------------------------------------------------------------------------------

    def _events(self, save: _Save, end_seq: int | None = None, wall_ns: int | None = None,
                error: str | None = None) -> list[CheckpointEvent]:
        """Start, block end and end of each rank of `save`. Its end: at line `end_seq`, at `wall_ns` or
        failed (`error`); without `end_seq` the save was synchronous, its end its duration."""
        events = []
        for rank in sorted(save.starts):
            start_ns, duration, seq = save.starts[rank]
            common = {"rank": rank, "iteration": save.iteration, "path": save.path}
            extra = {OVERLAPS_PREVIOUS: True} if save.overlaps else {}
            clock = TimeSource.NEMO_PREFIX if start_ns is not None else TimeSource.NONE  # a start not in the log
            events.append(CheckpointEvent(EventKind.SAVE_START, wall_ns=start_ns, source=clock, seq=seq, extra=extra,
                                          **common))
            durable = {MEASURES: "durable"}
            if save.preemption and wall_ns is not None:  # training has stopped: it blocks until durable
                events.append(CheckpointEvent(EventKind.SAVE_BLOCK_END, wall_ns=wall_ns, source=TimeSource.NEMO_PREFIX,
                                              seq=end_seq, extra=durable, **common))
            elif duration is None:  # the save call returned at its `Scheduled` line (a block time without a start)
                returned_ns, returned_seq = save.returned
                events.append(CheckpointEvent(EventKind.SAVE_BLOCK_END, wall_ns=returned_ns,
                                              source=TimeSource.NEMO_PREFIX, seq=returned_seq, **common))
            else:
                events.append(CheckpointEvent(EventKind.SAVE_BLOCK_END, elapsed_ns=duration,
                                              source=TimeSource.NEMO_CLOCK, seq=seq,
                                              extra={MEASURES: "call" if save.asynchronous else "durable"}, **common))
            if end_seq is None:
                events.append(CheckpointEvent(EventKind.SAVE_END, elapsed_ns=duration,
                                              source=TimeSource.NEMO_CLOCK, seq=seq, extra=durable, **common))
            elif error is not None:
                events.append(CheckpointEvent(EventKind.SAVE_END, source=TimeSource.NONE, seq=end_seq, error=error,
                                              **common))
            else:
                events.append(CheckpointEvent(EventKind.SAVE_END, wall_ns=wall_ns, source=TimeSource.NEMO_PREFIX,
                                              seq=end_seq, extra=durable, **common))
        return events

    # -- loads ----------------------------------------------------------------------------------

    def _close_process(self, seq: int, why: str) -> list[CheckpointEvent]:
        """The process that wrote the saves still open is gone: they never finish."""
        events = self._resolve_latest(seq)
        for save in self._writing:
            events += self._events(save, seq, error=why)
        self._writing.clear()
        return events

    def _load(self, match: re.Match, seq: int, prefix_ns: int) -> list[CheckpointEvent]:
        """A restore (of the checkpoint a `Restoring states` or selective-restore line named): a new
        process, so the saves of the one before that never finished never will."""
        rank, duration = int(match["rank"]), _seconds_ns(match["duration"])
        common = self._restore_target()
        return self._close_process(seq, "a new process started before this async save finished") + [
            CheckpointEvent(EventKind.LOAD_START, rank=rank, wall_ns=prefix_ns - duration,
                            source=TimeSource.NEMO_PREFIX, seq=seq, **common),
            CheckpointEvent(EventKind.LOAD_END, rank=rank, elapsed_ns=duration, source=TimeSource.NEMO_CLOCK, seq=seq,
                            **common),
        ]

    def _restored(self, seq: int) -> list[CheckpointEvent]:
        """Lightning's end of a resume: a load of its own when NeMo logged none (untimed)."""
        if self._restoring is None:
            return []  # its load was read (`Global Checkpoint Load`), or its start is not in the log
        common = {"rank": 0, **self._restore_target()}
        return [CheckpointEvent(EventKind.LOAD_START, source=TimeSource.NONE, seq=seq, **common),
                CheckpointEvent(EventKind.LOAD_END, source=TimeSource.NONE, seq=seq, **common)]

    def _restore_target(self) -> dict:
        """The path and iteration (`step=N` in the path) of the restore being read; none when not said."""
        path, self._restoring = self._restoring, None
        if path is None:
            return {}
        step = STEP.findall(path)
        return {"path": path, "iteration": int(step[-1]) if step else None}

    # -- notes ----------------------------------------------------------------------------------

    @property
    def notes(self) -> list[str]:
        notes = list(self.megatron.notes)
        if self._two_numberings:
            where = ("the checkpoint's step=N" if self._after_return and not self._duration_lines else
                     "'Global Checkpoint Save', 'Successfully saved checkpoint from iteration N'")
            notes.append(f"NeMo numbers each async save twice: iteration N ({where}) and step N+1 ('Async checkpoint "
                         "save for step N+1 ... finalized'); saves are reported by iteration")
        for iteration, paths in sorted(self._copies.items(), key=lambda item: (item[0] is None, item[0] or 0)):
            if len(paths) > 1:
                notes.append(f"iteration {iteration} was saved {len(paths)} times, to {', '.join(sorted(paths))} "
                             "(top-k and -last copies): each is a save of its own")
        finalized, idle, at_end = self._polls["finalized"], self._polls["idle"], self._polls["at_end"]
        if finalized or idle:
            text = "NeMo's async finalization ('Async finalization time took', training waits for each poll): "
            parts = []
            if finalized:
                parts.append(f"{len(finalized)} poll{'s' * (len(finalized) > 1)} finalized saves, "
                             f"{_span(finalized)} s each, {sum(finalized):.3f} s in all")
            if idle:
                parts.append(f"{len(idle)} found nothing finished, {_span(idle)} s each, {sum(idle):.3f} s in all")
            notes.append(text + "; ".join(parts))
        if self._pending_at_end is not None:
            took = f": that took {sum(at_end):.3f} s" if at_end else ""
            pending = self._pending_at_end + self._unmatched_at_end
            unmatched = f" ({self._unmatched_at_end} of them unmatched ends)" if self._unmatched_at_end else ""
            notes.append(f"{pending} async save{'s were' if pending != 1 else ' was'} still being written at the end "
                         f"of training{unmatched} and finalized synchronously{took}")
        if self._after_return:
            spans = self._after_return
            notes.append(f"{len(spans)} async save{'s' * (len(spans) > 1)} had no 'Global Checkpoint Save' line (NeMo "
                         "printed only 'Scheduled async checkpoint save' when the save call returned, and 'Async "
                         "checkpoint save for step N ... finalized' when it was durable): when each started is not "
                         "in the log, so its block and total times are unknown (null); each was written for "
                         f"{_span(spans)} s after its save call returned (1 s resolution): its total_time_at_least")
        for iteration in self._preemption_saves:
            waited = self._polls["preemption"]
            wait = (f"; NeMo waited {sum(waited):.3f} s for it to finalize ('Async checkpointing detected, waiting "
                    "for it to complete')") if waited else ""
            notes.append(f"the save at iteration {iteration} was saved on preemption ('Preemption detected, saving "
                         f"checkpoint and exiting'): training had stopped, so it blocked until it was durable{wait}")
        notes += [f"the load of {path} was a selective restore: a fine-tune's initialization, not a resume"
                  for path in self._selective]
        return notes + self.launcher.notes


def _span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.3f}" if low == high else f"{low:.3f}-{high:.3f}"


def _seconds_ns(text: str) -> int:
    """Printed seconds -> ns (exact: no float); ValueError on an endless number."""
    whole, _, fraction = text.partition(".")
    return int(whole) * 10**9 + int((fraction + "000000000")[:9])
