"""The report engine: checkpoint events in, the benchmark report out.

Every backend and every log parser ends here, so each number has one definition:

* A rank's *block time* is from its SAVE_START to its SAVE_BLOCK_END, its *total time* from
  SAVE_START to SAVE_END (or the duration a source timer measured for that phase). A save's times
  are the slowest rank's: training waits for the slowest rank, and a checkpoint is usable only when
  the last rank has written. Per-rank durations are taken on each rank's own clock, so ranks on
  different hosts never compare clocks.
* Events pair by rank and iteration, never by position: a save that starts and never ends (a run
  killed mid-save) is reported incomplete and is never matched with a later save's end.
* A save that starts while an earlier async save of the same rank has not finished overlaps it:
  both are marked, and the report is not `accurate`.
* An end earlier than its start (a log's lines out of order, a clock stepped back) makes no
  negative time: that operation is not complete, its times are left out, and its `error` says why.
* A rank's *phases* (ckpt_bench.worker.phases) are the spans its end events carry: a save's blocking
  phases end at its SAVE_BLOCK_END, an async save's background phases at its SAVE_END, put after the
  blocking ones (a background phase that began before the save call returned is counted from the return,
  0 s if it also ended before; a writer that started after it was `queued` in between). Where the writer's
  phases come apart from its finalize's (SAVE_WRITTEN, then SAVE_END: megatron-core finalizes on the training
  process, later), the time between is `awaiting_finalize`. They sum to the operation's time on that rank; a
  save's or a load's `phases` are its slowest rank's: the one whose own work ended last (before its closing
  collective, `finalize`, and any wait for it, where it has one).
* Where a source times a save only from its call's return to durable (its start is not in the log), its
  total time stays unknown (null) and that part is its `total_time_at_least`, a lower bound.
* Bandwidth is bytes / total time in MiB/s. Bytes come from the checkpoint folder on disk when the
  caller measured it, else from the bytes the ranks reported; never from a parameter count.
* Top-level keys follow the Primus checkpoint tool's report (last complete save), with real types.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from ckpt_bench.core.events import (
    OVERLAPS_PREVIOUS,
    RESOLUTION_S,
    CheckpointEvent,
    EventKind,
    Phase,
    PhaseSpan,
    TimeSource,
)
from ckpt_bench.core.units import MIB
from ckpt_bench.report import SCHEMA_VERSION
from ckpt_bench.report.metrics import save_stats

# Configuration keys of the Primus checkpoint tool's report, in its order. They come from the run's
# resolved config (our launcher) or from a log's arguments dump (ckpt_report.py).
CONFIG_KEYS = (
    "world_size",
    "data_parallel_size",
    "ckpt_format",
    "ckpt_fully_parallel_save",
    "ckpt_fully_parallel_load",
    "async_save",
    "save",
    "save_interval",
    "optimizer",
    "use_distributed_optimizer",
    "params_dtype",
    "main_params_dtype",
    "exp_avg_dtype",
    "exp_avg_sq_dtype",
)

UNITS = {"time": "s", "size": "bytes", "bandwidth": "MiB/s (bytes / 2**20 / s)"}

# `extra` key of a SAVE_BLOCK_END or SAVE_END a log parser emits: what the source's figure for that phase
# measures, one of SEMANTICS. A save's record names them as `source_semantics` (block_time, total_time).
MEASURES = "measures"
SEMANTICS = {
    "durable": "until the checkpoint was complete on storage (the whole save)",
    "call": "the save call only (for an async save: staging and scheduling; the write goes on in the background)",
    "schedule": "until the async save was handed to its background writer, not until it was durable",
    "staging": "until the state was copied for the background write, not until it was durable",
    "durable_or_staging": "the whole save if checkpointing was synchronous, the staging only if it was async "
                          "(the source does not say which)",
}


@dataclass
class Operation:
    """One save or load as one rank saw it: its events paired (`pair`), with the one definition of its
    block and total times that the report, report.html and every per-call figure use."""

    kind: str  # "save" | "load"
    rank: int | None
    iteration: int | None
    start: CheckpointEvent | None = None
    block_end: CheckpointEvent | None = None
    written: CheckpointEvent | None = None  # SAVE_WRITTEN: an async save's writer done, its finalize to come
    end: CheckpointEvent | None = None
    overlapped: bool = False
    previous: Operation | None = None  # this rank's save before this one (saves only)

    @property
    def complete(self) -> bool:
        return self.end is not None and self.end.error is None and self._backwards() is None

    @property
    def error(self) -> str | None:
        if self.end is not None and self.end.error is not None:
            return self.end.error
        backwards = self._backwards()
        if backwards is not None:
            return (f"its end is {-backwards:.6g} s before its start: the source's times are inconsistent, "
                    "so its times are left out")
        return None

    def extra(self, key: str):
        """`key` of the operation's first event's `extra` that has it (the tier, why that tier), or None."""
        return next((event.extra[key] for event in (self.start, self.block_end, self.written, self.end)
                     if event is not None and key in event.extra), None)

    def _backwards(self) -> float | None:
        """The most negative of the operation's durations, if one is negative."""
        durations = [d for d in (_duration(self.start, self.block_end), _duration(self.start, self.end))
                     if d is not None and d < 0]
        return min(durations) if durations else None

    def block_s(self) -> float | None:
        return None if self._backwards() is not None else _duration(self.start, self.block_end)

    def _log_phases(self) -> list[dict] | None:
        """A log's async save in the two parts its lines separate (LOG_PHASES), None for anything else."""
        measures = self.block_end.extra.get(MEASURES) if self.block_end is not None else None
        if self.kind != "save" or measures not in LOG_PHASES or self.end.extra.get(MEASURES) != "durable":
            return None
        block, total = self.block_s(), self.total_s()
        if block is None or total is None or total < block:
            return None
        blocking, background = LOG_PHASES[measures]
        return [{"phase": blocking.value, "start": 0.0, "seconds": block, "blocking": True},
                {"phase": background.value, "start": block, "seconds": total - block, "blocking": False}]

    def wait_for_previous_s(self) -> float | None:
        """How long this save's blocking part ran while this rank's previous save was still writing:
        with megatron-core's persistent writer, the time it waited for it (one queue, one write at a
        time). None without a previous save or comparable clocks (one host's monotonic clock)."""
        previous = self.previous
        written = previous and (previous.written or previous.end)  # the writer's queue frees when it has written
        ends = (self.start, self.block_end, written)
        if previous is None or any(e is None or e.mono_ns is None for e in ends) or self._backwards() is not None:
            return None
        overlap_ns = min(written.mono_ns, self.block_end.mono_ns) - self.start.mono_ns
        return max(0.0, overlap_ns / 1e9)

    def total_s(self) -> float | None:
        """Until complete. A save is complete no sooner than its call returned: where the end's clock is coarser
        than the block end's and says less (a Primus log's 1 s line prefixes against the last rank's 10 us
        save-checkpoint timer, 138.000 s against 138.05 s), the total is the block time."""
        if self._backwards() is not None:
            return None
        total, block = _duration(self.start, self.end), _duration(self.start, self.block_end)
        return block if total is not None and block is not None and block > total else total

    def after_return_s(self) -> float | None:
        """A complete save's seconds from its call's return to durable where the source times that part but
        not its start (NeMo's `Scheduled async checkpoint save`, then `... finalized`): a lower bound on its
        total time. None where the total is known, or the two moments are not both on a clock."""
        if self.kind != "save" or not self.complete or self.total_s() is not None or self.block_end is None:
            return None
        if self.block_end.elapsed_ns is not None or self.end.elapsed_ns is not None:  # durations from the start
            return None
        seconds = _duration(self.block_end, self.end)
        return seconds if seconds is not None and seconds >= 0 else None

    @property
    def bytes(self) -> int | None:
        """The bytes this rank wrote or read, as its end events say (an async save's writer's, SAVE_WRITTEN)."""
        ends = [e.bytes for e in (self.end, self.written) if e is not None and e.bytes is not None]
        return ends[0] if ends else None

    def phases(self) -> list[dict] | None:
        """This rank's phases in order, each `{phase, start, seconds, blocking}` (`start`: seconds from the
        operation's start; `blocking`: whether it ran inside the save call, before training could go on; None for
        a load). None when its end events carry none (a log's async save: its two parts, `_log_phases`), or it
        did not complete."""
        if not self.complete or self.start is None:
            return None
        recorded = self.end.phases or any(e is not None and e.phases for e in (self.block_end, self.written))
        if self.start.mono_ns is None or not recorded:
            return self._log_phases()
        if self.kind == "load":
            return _phase_records(self.start.mono_ns, [(span, None) for span in self.end.phases]) or None
        blocking = list(self.block_end.phases) if self.block_end is not None else []
        background = list(self.end.phases) if self.end is not self.block_end else []
        if self.written is not None and self.written.mono_ns is not None:
            background = self._written_then_finalized(background)
        if background and self.block_end is not None and self.block_end.mono_ns is not None:
            returned = self.block_end.mono_ns
            if background[0].start_ns > returned:
                background.insert(0, PhaseSpan(Phase.QUEUED.value, returned, background[0].start_ns))
            # A background phase that ran while the call had not returned yet is counted from the return
            # (0 s if it ended before): that time is the blocking part's.
            background = [replace(span, start_ns=max(span.start_ns, returned), end_ns=max(span.end_ns, returned))
                          for span in background]
        spans = [(span, True) for span in blocking] + [(span, False) for span in background]
        return _phase_records(self.start.mono_ns, spans) or None

    def _written_then_finalized(self, finalize: list[PhaseSpan]) -> list[PhaseSpan]:
        """An async save's background phases where its writer (SAVE_WRITTEN) and its finalize (SAVE_END) record
        apart: the writer's phases, `awaiting_finalize` until the finalize began, the finalize's phases."""
        written = self.written.mono_ns
        finalize_start = finalize[0].start_ns if finalize else self.end.mono_ns
        awaiting = [PhaseSpan(Phase.AWAITING_FINALIZE.value, written, finalize_start)]
        return list(self.written.phases) + (awaiting if finalize_start > written else []) + finalize

    def peak(self, field_name: str) -> int | None:
        """The operation's peak memory on this rank (`peak_rss_bytes` / `peak_device_bytes` of its end
        events, ckpt_bench.core.memory), None when no event carries it (logs)."""
        values = [getattr(e, field_name) for e in (self.block_end, self.end) if e is not None]
        values = [v for v in values if v is not None]
        return max(values) if values else None

    def timing_events(self) -> list[CheckpointEvent]:
        """The events whose clocks give this operation's times (see `_duration`): a closing event
        alone when it carries the source's own measurement, else both ends."""
        used: list[CheckpointEvent] = []
        if self._backwards() is not None:
            return used
        if self.after_return_s() is not None:
            return [self.block_end, self.end]
        for end in (self.block_end, self.end):
            if _duration(self.start, end) is None:
                continue
            for event in [end] if end.elapsed_ns is not None else [self.start, end]:
                if not any(event is seen for seen in used):
                    used.append(event)
        return used


# What a log's figures of an async save hold (MEASURES of its block end; its end's is "durable"), as phases:
# its blocking part, its background part.
LOG_PHASES = {
    "staging": (Phase.STAGE, Phase.WRITE),  # torchtitan: staging, then the background write
    # Megatron-LM ("scheduled"), NeMo (the save call): until the save was handed to its writer, then until
    # the finalize line, printed when training next checked for it.
    "schedule": (Phase.SCHEDULE, Phase.WRITE_FINALIZE),
    "call": (Phase.SCHEDULE, Phase.WRITE_FINALIZE),
}


def _phase_records(start_ns: int, spans: list[tuple[PhaseSpan, bool | None]]) -> list[dict]:
    return [{"phase": span.phase, "start": (span.start_ns - start_ns) / 1e9,
             "seconds": (span.end_ns - span.start_ns) / 1e9, "blocking": blocking,
             **({"writers": span.writers, "writer_seconds": span.writer_seconds} if span.writers else {})}
            for span, blocking in spans]


def _duration(start: CheckpointEvent | None, end: CheckpointEvent | None) -> float | None:
    """Seconds from `start` to `end` on one rank's clock, or the source's own measurement."""
    if end is None:
        return None
    if end.elapsed_ns is not None:
        return end.elapsed_ns / 1e9
    if start is None:
        return None
    if start.mono_ns is not None and end.mono_ns is not None:
        return (end.mono_ns - start.mono_ns) / 1e9
    if start.wall_ns is not None and end.wall_ns is not None:
        return (end.wall_ns - start.wall_ns) / 1e9
    return None


def _merge(old: CheckpointEvent | None, new: CheckpointEvent) -> CheckpointEvent:
    """Two events for the same moment (e.g. a log line, then the timer printed after it): keep the
    first one's clocks and fill in what only the second one knows."""
    if old is None:
        return new
    filled = {
        name: getattr(new, name)
        for name in ("bytes", "mono_ns", "wall_ns", "elapsed_ns", "error", "path")
        if getattr(old, name) is None and getattr(new, name) is not None
    }
    if "elapsed_ns" in filled:
        filled["source"] = new.source  # the duration now comes from `elapsed_ns`, i.e. from `new`
    return replace(old, **filled) if filled else old


class _RankTimeline:
    """Pairs one rank's events, in the order the rank produced them, into operations."""

    def __init__(self) -> None:
        self.operations: list[Operation] = []
        self._latest: dict[tuple[str, int | None], Operation] = {}
        self.orphans: list[CheckpointEvent] = []

    def add(self, event: CheckpointEvent) -> None:
        kind = "load" if event.kind in (EventKind.LOAD_START, EventKind.LOAD_END) else "save"
        if event.kind in (EventKind.SAVE_START, EventKind.LOAD_START):
            self._start(kind, event)
            return
        op = self._find(kind, event.iteration)
        if op is None:
            self.orphans.append(event)  # an end whose start is not in the log (log begins mid-run)
        elif event.kind == EventKind.SAVE_BLOCK_END:
            op.block_end = _merge(op.block_end, event)
        elif event.kind == EventKind.SAVE_WRITTEN:
            op.written = _merge(op.written, event)
        else:
            op.end = _merge(op.end, event)

    def _start(self, kind: str, event: CheckpointEvent) -> None:
        op = Operation(kind, event.rank, event.iteration, start=event)
        if kind == "save":
            op.previous = next((o for o in reversed(self.operations) if o.kind == "save" and o.rank == event.rank),
                               None)
            said_so = bool(event.extra.get(OVERLAPS_PREVIOUS))
            op.overlapped = said_so
            for other in self._open_saves():
                if said_so or other.block_end is not None:
                    # An async save still in flight when the next one starts.
                    other.overlapped = op.overlapped = True
        self.operations.append(op)
        self._latest[(kind, event.iteration)] = op
        self._latest[(kind, None)] = op

    def _open_saves(self) -> list[Operation]:
        return [op for op in self.operations if op.kind == "save" and op.end is None]

    def _find(self, kind: str, iteration: int | None) -> Operation | None:
        op = self._latest.get((kind, iteration))
        if op is None and iteration is not None:
            # A load-end line may know the iteration while its start did not.
            last = self._latest.get((kind, None))
            if last is not None and last.iteration is None:
                last.iteration = iteration
                self._latest[(kind, iteration)] = last  # later ends (e.g. its timer) find it too
                return last
        return op


@dataclass
class _Checkpoint:
    """One save (or load) across all ranks."""

    kind: str
    iteration: int | None
    ranks: list[Operation] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return all(op.complete for op in self.ranks)


def _spread(values: dict[int | None, float]) -> dict | None:
    if not values:
        return None
    max_rank = max(values, key=values.__getitem__)
    min_rank = min(values, key=values.__getitem__)
    return {
        "max": _seconds(values[max_rank]),
        "max_rank": max_rank,
        "min": _seconds(values[min_rank]),
        "min_rank": min_rank,
    }


# The phases an operation may end with that every rank leaves together: not the rank's own work.
_CLOSING = (Phase.AWAITING_FINALIZE.value, Phase.FINALIZE.value)


def _phases(ops: list[Operation]) -> dict:
    """A save's or a load's phases: the slowest rank's, and every rank's with their starts, for the per-rank
    timeline. Empty when no rank recorded phases. The slowest rank is the one whose own work ended last: up to
    its `finalize` (and the wait for it) when the operation ends with one (a collective every rank leaves
    together, so every rank's total is about the same and the one that reached it last is the one the others
    waited for), else up to its end."""
    per_rank = {op.rank: op.phases() for op in ops}
    per_rank = {rank: phases for rank, phases in per_rank.items() if phases}
    if not per_rank:
        return {}

    def work_ended(phases: list[dict]) -> float:
        ended = phases[-1]["start"] + phases[-1]["seconds"]
        for phase in reversed(phases):  # back over the closing phases it ends with
            if phase["phase"] not in _CLOSING:
                break
            ended = phase["start"]
        return ended

    slowest = max(per_rank, key=lambda rank: work_ended(per_rank[rank]))

    def rounded(phase: dict, start: bool) -> dict:
        writers = {"writers": phase["writers"], "writer_seconds": round(phase["writer_seconds"], 6)} \
            if phase.get("writers") else {}
        return {"phase": phase["phase"], "seconds": round(phase["seconds"], 6), "blocking": phase["blocking"],
                **({"start": round(phase["start"], 6)} if start else {}), **writers}

    return {
        "phases": [rounded(phase, start=False) for phase in per_rank[slowest]],
        "phases_rank": slowest,
        "phases_per_rank": [{"rank": rank, "phases": [rounded(phase, start=True) for phase in phases]}
                            for rank, phases in per_rank.items()],
    }


def _peaks(ops: list[Operation]) -> dict:
    """Peak memory of an operation: the highest rank's, and which ranks were highest and lowest."""
    fields = {}
    for name in ("peak_rss_bytes", "peak_device_bytes"):
        per_rank = {op.rank: op.peak(name) for op in ops if op.peak(name) is not None}
        if per_rank or name == "peak_rss_bytes":
            fields[name] = max(per_rank.values()) if per_rank else None
            fields[f"{name}_per_rank"] = _spread(per_rank)
    return fields


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _mib_per_s(nbytes: int | None, seconds: float | None) -> float | None:
    if nbytes is None or not seconds or seconds <= 0:
        return None
    return round(nbytes / MIB / seconds, 2)


class ReportBuilder:
    """Collects events (streamed: memory grows with the number of saves, not of events) and
    builds the report dict."""

    def __init__(self) -> None:
        self._timelines: dict[int | None, _RankTimeline] = defaultdict(_RankTimeline)

    def add(self, event: CheckpointEvent) -> None:
        self._timelines[event.rank].add(event)

    def add_all(self, events: Iterable[CheckpointEvent]) -> ReportBuilder:
        for event in events:
            self.add(event)
        return self

    @property
    def has_events(self) -> bool:
        return any(t.operations for t in self._timelines.values())

    def orphans(self) -> list[CheckpointEvent]:
        """End events whose start is not among the events (a log that begins mid-save), per rank in order."""
        return [event for timeline in self._timelines.values() for event in timeline.orphans]

    def operations(self) -> list[Operation]:
        """Every rank's operations, each rank's in the order it started them, ranks in order of arrival."""
        return [op for timeline in self._timelines.values() for op in timeline.operations]

    def _checkpoints(self, kind: str) -> list[_Checkpoint]:
        """Group rank operations: the k-th save of iteration I on every rank is one checkpoint."""
        grouped: dict[tuple[int | None, int], _Checkpoint] = {}
        order: list[tuple[int | None, int]] = []
        for timeline in self._timelines.values():
            seen: dict[int | None, int] = defaultdict(int)
            for op in timeline.operations:
                if op.kind != kind:
                    continue
                key = (op.iteration, seen[op.iteration])
                seen[op.iteration] += 1
                if key not in grouped:
                    grouped[key] = _Checkpoint(kind, op.iteration)
                    order.append(key)
                grouped[key].ranks.append(op)
        checkpoints = [grouped[k] for k in order]
        checkpoints.sort(key=lambda c: _first_time(c))
        return checkpoints

    def build(
        self,
        run_info: dict | None = None,
        folder_sizes: dict[int, int] | None = None,
        verification: dict | None = None,
        environment: dict | None = None,
        load_cache: str | None = None,
        notes: list[str] | None = None,
    ) -> dict:
        """The report. `folder_sizes` maps iteration -> bytes of its `iter_*` folder on disk."""
        run_info = run_info or {}
        notes = list(notes or [])
        saves = [self._save_record(c, folder_sizes) for c in self._checkpoints("save")]
        loads = [_sized_by_its_save(self._load_record(c, folder_sizes, load_cache), saves)
                 for c in self._checkpoints("load")]
        complete = [s for s in saves if s["complete"]]
        last = complete[-1] if complete else None
        load = loads[-1] if loads else None

        for save in saves:
            if not save["complete"]:
                why = save.get("error") or "it has no end: the run stopped or the log ends mid-save"
                notes.append(f"save at iteration {save['iteration']} is incomplete: {why}")
        for record in loads:
            if record.get("error"):
                notes.append(f"load at iteration {record['iteration']} is incomplete: {record['error']}")
        if saves and folder_sizes is None and all(s["bytes"] is None for s in saves):
            notes.append("no checkpoint folder was measured and the log holds no byte counts: "
                         "sizes and bandwidth are left out")
        if complete and all(s["total_time"] is None for s in complete):
            bound = ("; where a save's part after its call returned is timed, it is its total_time_at_least (a lower "
                     "bound)") if any("total_time_at_least" in s for s in complete) else ""
            notes.append("the source gives no completion time for the saves (e.g. async saves "
                         f"in a log without timestamps): save_total_time is left out{bound}")

        report = {key: run_info.get(key) for key in CONFIG_KEYS}
        used_events = [e for c in saves + ([load] if load else []) for e in c.pop("_events")]
        for record in loads[:-1]:
            record.pop("_events")
        report.update(
            {
                "save_block_time": last["block_time"] if last else None,
                "save_total_time": last["total_time"] if last else None,
                **({"save_total_time_at_least": last["total_time_at_least"]}
                   if last and "total_time_at_least" in last else {}),
                "accurate": not any(s["overlapped"] for s in saves),
                "num_saved": len(complete),
                "load_time": load["time"] if load else None,
                "iter_folder_size": last["bytes"] if last else None,
                "save_bandwidth_in_mbps": last["bandwidth"] if last else None,
                "load_bandwidth_in_mbps": load["bandwidth"] if load else None,
                "saves": saves,
                "stats": save_stats(complete),
                **({"stats_by_tier": by_tier} if (by_tier := stats_by_tier(complete)) else {}),
                "load": load,
                "loads": loads if len(loads) > 1 else None,
                "verified": verification.get("verified") if verification else None,
                "verification": verification,
                "units": UNITS,
                "schema_version": SCHEMA_VERSION,  # report.schema: the types and docs/report.schema.json
                **_time_source(used_events),
                "environment": environment,
                "notes": notes,
            }
        )
        extra = {k: v for k, v in run_info.items() if k not in CONFIG_KEYS}
        if extra:
            report["config"] = extra
        return report

    def _common(self, checkpoint: _Checkpoint, folder_sizes: dict[int, int] | None) -> dict:
        ops = checkpoint.ranks
        nbytes, bytes_source = None, None
        # The measured folders are the save dir's own iter_* folders: a non-persistent checkpoint lives elsewhere.
        persistent = all(op.extra("tier") in (None, PERSISTENT) for op in ops)
        if folder_sizes is not None and persistent and checkpoint.iteration in folder_sizes:
            nbytes, bytes_source = folder_sizes[checkpoint.iteration], "disk"
        else:
            per_rank = [op.bytes for op in ops]
            if per_rank and all(b is not None for b in per_rank):
                nbytes, bytes_source = sum(per_rank), "ranks"
        errors = [op.error for op in ops if op.error]
        tier = _first_extra(ops, "tier")
        record = {
            "iteration": checkpoint.iteration,
            **({"tier": tier} if tier else {}),
            "complete": checkpoint.complete,
            "ranks": len(ops),
            "bytes": nbytes,
            "bytes_source": bytes_source,
            **_peaks(ops),
            "_events": [e for op in ops for e in op.timing_events()],
        }
        record.update(_time_source(record["_events"]))
        if errors:
            record["error"] = errors[0]
        return record

    def _save_record(self, checkpoint: _Checkpoint, folder_sizes: dict[int, int] | None) -> dict:
        ops = checkpoint.ranks
        block = {op.rank: op.block_s() for op in ops if op.block_s() is not None}
        total = {op.rank: op.total_s() for op in ops if op.total_s() is not None}
        waits = [w for w in (op.wait_for_previous_s() for op in ops) if w is not None]
        record = self._common(checkpoint, folder_sizes)
        total_time = max(total.values()) if total and len(total) == len(ops) else None
        record.update(
            {
                "block_time": _seconds(max(block.values())) if block else None,
                "total_time": _seconds(total_time),
                **_total_at_least(ops, total_time),
                "bandwidth": _mib_per_s(record["bytes"], total_time),
                "block_time_per_rank": _spread(block),
                "total_time_per_rank": _spread(total),
                "overlapped": any(op.overlapped for op in ops),
                "wait_for_previous": _seconds(max(waits)) if waits else None,
                **_phases(ops),
            }
        )
        semantics = _source_semantics(ops)
        if semantics is not None:
            record["source_semantics"] = semantics
        return record

    def _load_record(
        self, checkpoint: _Checkpoint, folder_sizes: dict[int, int] | None, cache: str | None
    ) -> dict:
        ops = checkpoint.ranks
        times = {op.rank: op.total_s() for op in ops if op.total_s() is not None}
        record = self._common(checkpoint, folder_sizes)
        load_time = max(times.values()) if times and len(times) == len(ops) else None
        reason = _first_extra(ops, "tier_reason")
        if reason:
            record["tier_reason"] = reason
        record["_reads_its_save"] = all(op.extra("reads_what_its_save_wrote") for op in ops)
        record.update(
            {
                "time": _seconds(load_time),
                "bandwidth": _mib_per_s(record["bytes"], load_time),
                "time_per_rank": _spread(times),
                "cache": cache,
                **_phases(ops),
            }
        )
        return record


PERSISTENT = "persistent"


def _first_extra(ops: list[Operation], key: str):
    """`key` of the first rank's operation that names it (a checkpoint's tier, why a load read it), or None."""
    return next((value for op in ops if (value := op.extra(key))), None)


def _sized_by_its_save(load: dict, saves: list[dict]) -> dict:
    """`load` with the bytes of the save that wrote its checkpoint (same iteration and tier) where nothing else
    sized it (a non-persistent checkpoint's folder is not measured) and the source says a load reads what its save
    wrote (not a save that also holds replicas of other ranks' files): its bandwidth then follows."""
    if not load.pop("_reads_its_save") or load["bytes"] is not None:
        return load
    save = next((save for save in reversed(saves) if save["complete"] and save["bytes"] is not None
                 and save["iteration"] == load["iteration"] and save.get("tier") == load.get("tier")), None)
    if save is not None:
        load.update(bytes=save["bytes"], bytes_source="save", bandwidth=_mib_per_s(save["bytes"], load["time"]))
    return load


def stats_by_tier(saves: list[dict]) -> dict | None:
    """`save_stats` of each checkpoint tier's saves, where a run saved more than one (Megatron-LM's persistent and
    non-persistent checkpoints: each tier's steady figures apart); None otherwise."""
    tiers = list(dict.fromkeys(save.get("tier") for save in saves))
    if len(tiers) < 2 or None in tiers:
        return None
    return {tier: save_stats([save for save in saves if save.get("tier") == tier]) for tier in tiers}


# What a save's `total_time_at_least` spans and leaves out.
AFTER_RETURN = ("from the save call's return to durable, on the source's clock (time_resolution_s): its start is not "
                "in the source, so the call itself is left out and total_time is at least this")


def _total_at_least(ops: list[Operation], total_time: float | None) -> dict:
    """A complete save's lower bound on its total time where the source times only its part after the call
    returned (`Operation.after_return_s`) on a rank: the slowest rank's known part; {} where the total is known."""
    if total_time is not None or not all(op.complete for op in ops) or \
            not any(op.after_return_s() is not None for op in ops):
        return {}
    known = [op.total_s() if op.total_s() is not None else op.after_return_s() for op in ops]
    return {"total_time_at_least": _seconds(max(s for s in known if s is not None)),
            "total_time_at_least_span": AFTER_RETURN}


def _source_semantics(ops: list[Operation]) -> dict | None:
    """What the source's figures of a save measure (`MEASURES` of its end events), None when no event says."""
    semantics = {
        figure: next((e.extra[MEASURES] for op in ops for e in [getattr(op, phase)] if e and MEASURES in e.extra),
                     None)
        for figure, phase in (("block_time", "block_end"), ("total_time", "end"))
    }
    return semantics if any(semantics.values()) else None


def _first_time(checkpoint: _Checkpoint) -> tuple:
    starts = [op.start for op in checkpoint.ranks if op.start is not None]
    walls = [e.wall_ns for e in starts if e.wall_ns is not None]
    seqs = [e.seq for e in starts]
    return (min(walls) if walls else 0, min(seqs) if seqs else 0)


def _time_source(events: list[CheckpointEvent]) -> dict:
    sources = sorted({e.source for e in events if e.source != TimeSource.NONE}, key=lambda s: s.value)
    resolutions = [RESOLUTION_S[s] for s in sources if RESOLUTION_S[s] is not None]
    return {
        "time_source": "+".join(s.value for s in sources) or None,
        "time_resolution_s": max(resolutions) if resolutions else None,
    }


def pair(events: Iterable[CheckpointEvent]) -> list[Operation]:
    """The events paired into operations by the report's own rules (duplicate ends merged, overlaps
    marked, times that run backwards refused): what report.html's timeline and per-call figures read."""
    return ReportBuilder().add_all(events).operations()


def rank_durations(events: Iterable[CheckpointEvent], kind: str, part: str = "total") -> dict[int | None, list[float]]:
    """Per rank, the seconds of each `kind` ("save" | "load") operation that did not fail, `part` "block"
    (until training could go on) or "total" (until durable), unrounded, in the order the rank started them. For
    what other tools print per call (s3torchbenchmarking's per-rank save times, dataflux's lines)."""
    durations: dict[int | None, list[float]] = {}
    for op in pair(events):
        seconds = op.block_s() if part == "block" else op.total_s()
        if op.kind == kind and op.error is None and seconds is not None:
            durations.setdefault(op.rank, []).append(seconds)
    return durations


def build_report(events: Iterable[CheckpointEvent], **kwargs) -> dict:
    """Convenience: `ReportBuilder().add_all(events).build(**kwargs)`."""
    return ReportBuilder().add_all(events).build(**kwargs)


def fractions_of_peak(report: dict, baseline: dict | None) -> dict:
    """`save_fraction_of_peak` and `load_fraction_of_peak`: what the saves and loads reached over what the
    storage itself did with their I/O shape at its best (ckpt_bench.storage.baseline: the fastest round). A
    save's figure is the steady bandwidth (report.metrics: the median of the saves after the first), over the
    baseline's write bandwidth; a load's is the median over the loads, over the baseline's cold read. A figure
    above its peak is no fraction: null, and `save_above_peak` / `load_above_peak` say by how much and why.
    None where either side is missing."""
    loads = [record for record in (report.get("loads") or [report.get("load") or {}])
             if record.get("bandwidth") is not None]
    baseline = baseline or {}
    from ckpt_bench.report.schema import Report  # typed only here: a report of logs need not import the types

    measured = {"save": Report.from_json({"stats": report.get("stats")}).steady_median("bandwidth"),
                "load": statistics.median(record["bandwidth"] for record in loads) if loads else None}
    figures: dict = {}
    for kind, direction in (("save", "write"), ("load", "read")):
        value, peak = measured[kind], baseline.get(f"{direction}_bandwidth")
        ratio = round(value / peak, 3) if value is not None and peak else None
        if ratio is not None and ratio > 1:
            warm = kind == "load" and any(record.get("cache") == "warm" for record in loads)
            figures[f"{kind}_above_peak"] = {"measured": value, "peak": peak, "ratio": ratio,
                                             "reason": _above_peak_reason(kind, direction, baseline, warm)}
            ratio = None
        figures[f"{kind}_fraction_of_peak"] = ratio
    return {key: figures[key] for key in ("save_fraction_of_peak", "load_fraction_of_peak", "save_above_peak",
                                          "load_above_peak") if key in figures}


def _above_peak_reason(kind: str, direction: str, baseline: dict, warm: bool) -> str:
    """Why a save or load beat the baseline's fastest round, as far as the baseline's rounds can tell."""
    if warm:
        return "the loads read from the page cache (--warm-load), the baseline from the storage (cold)"
    rounds = [r.get(f"{direction}_bandwidth") for r in baseline.get("rounds") or []]
    rounds = [value for value in rounds if value]
    if len(rounds) > 1 and max(rounds) >= 1.5 * min(rounds):
        return (f"the storage's own {direction} speed varied {max(rounds) / min(rounds):.1f}x over the baseline's "
                f"{len(rounds)} rounds (a shared or host-cached storage): none of them bounds this run's {kind}s")
    return (f"the {kind}s outran {baseline.get('tool')}'s plain {direction}s of the same shape "
            f"({baseline.get('files')} files, {baseline.get('concurrency')} at once"
            f"{', fsynced' if baseline.get('fsync') and kind == 'save' else ''}) in every one of its "
            f"{len(rounds) or 1} rounds: that pattern is not this storage's best for this checkpoint")
