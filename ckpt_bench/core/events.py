"""Checkpoint events: the one vocabulary every backend and every log parser speaks.

A save is three moments on each rank -- it starts, it stops blocking training, it is complete on
storage -- and a load is two (an async save whose finalize runs apart from its writer has a fourth,
SAVE_WRITTEN: its writer finished, the finalize still to come). Backends record them as they happen
(`EventRecorder`); log parsers recover them from text. Only `ckpt_bench.report.engine` turns events into
numbers, so the timing rules (what "block time" means, how ranks combine, when a save counts as
overlapped) live in one place.

An event carries whatever its source could know and nothing more: a parser of a log without
timestamps leaves the clocks empty and may instead give `elapsed_ns`, the duration a Megatron timer
measured for the phase the event closes.

An end event of our own workers also carries the *phases* of the span it closes (`PhaseSpan`, taken by
ckpt_bench.worker.phases from the engine's own steps): a SAVE_BLOCK_END those from SAVE_START to it (what
training waited for), an async save's SAVE_END those its background writer went through (or, after a
SAVE_WRITTEN carrying the writer's, those of its finalize), a LOAD_END the whole load's.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ckpt_bench.core.memory import MemoryWatch


class EventKind(str, Enum):
    SAVE_START = "save_start"
    # Training may go on from here; for a synchronous save this is the same moment as SAVE_END.
    SAVE_BLOCK_END = "save_block_end"
    # An async save's background writer finished this rank's files; the checkpoint is complete only at SAVE_END,
    # after its finalize (megatron-core runs it later, on the training process).
    SAVE_WRITTEN = "save_written"
    # The checkpoint is complete on storage (for an async save: written, and finalized where the engine has a
    # finalize: its metadata files written, the last collective left).
    SAVE_END = "save_end"
    LOAD_START = "load_start"
    LOAD_END = "load_end"


class TimeSource(str, Enum):
    """Where an event's time came from; the report names it with its resolution."""

    RECORDED = "recorded"  # our own backends: monotonic + wall clock, ns
    MEGATRON_TIMESTAMP = "megatron-timestamp"  # `[YYYY-MM-DD HH:MM:SS.ffffff]` in the message, 1 us
    MEGATRON_TIMER = "megatron-timer"  # `save-checkpoint ...: (min, max)` timers, 10 us as printed
    PRIMUS_PREFIX = "primus-prefix"  # `[YYYYMMDD HH:MM:SS]` line prefix, 1 s
    NEMO_PREFIX = "nemo-prefix"  # `[NeMo I YYYY-MM-DD HH:MM:SS ...]` line prefix, 1 s
    NEMO_CLOCK = "nemo-clock"  # NeMo's `Start time: <epoch>.mmms`, `Save duration: s.mmms`, 1 ms
    TORCHTITAN_TIMESTAMP = "torchtitan-timestamp"  # `YYYY-MM-DD HH:MM:SS,mmm` of Python logging, 1 ms
    TORCHTITAN_TIMER = "torchtitan-timer"  # torchtitan's `... in 12.34 seconds`, 10 ms
    DEEPSPEED_TIMESTAMP = "deepspeed-timestamp"  # `[YYYY-MM-DD HH:MM:SS,mmm]` of DeepSpeed's logger, 1 ms
    NONE = "none"  # the source holds no time for this event


RESOLUTION_S = {
    TimeSource.RECORDED: time.get_clock_info("monotonic").resolution,
    TimeSource.MEGATRON_TIMESTAMP: 1e-6,
    TimeSource.MEGATRON_TIMER: 1e-5,
    TimeSource.PRIMUS_PREFIX: 1.0,
    TimeSource.NEMO_PREFIX: 1.0,
    TimeSource.NEMO_CLOCK: 1e-3,
    TimeSource.TORCHTITAN_TIMESTAMP: 1e-3,
    TimeSource.TORCHTITAN_TIMER: 1e-2,
    TimeSource.DEEPSPEED_TIMESTAMP: 1e-3,
    TimeSource.NONE: None,
}


class Phase(str, Enum):
    """What a phase of a save or a load holds (docs/report.md, "Phases"). An engine step that cannot be
    split further is one phase named for all it holds (`WRITE_FSYNC`: a writer that fsyncs where we cannot
    time it, an fsspec stream)."""

    STATE_DICT = "state_dict"  # building the (sharded) state dict the engine saves or loads into
    VALIDATE_COMMON = "validate+common"  # megatron-core: the sharding check (all_gather) and common.pt
    PLAN = "plan"  # this rank's save or load plan
    EXCHANGE = "exchange"  # the plans' and metadata's collectives, the coordinator's global plan
    PLAN_EXCHANGE = "plan+exchange"  # both, where the engine makes its planner inside (megatron-core)
    STAGE = "stage"  # the copy (device to host, or a snapshot) that lets an async save return
    SCHEDULE = "schedule"  # handing an async save to its background writer (a thread, a fork, a queue)
    QUEUED = "queued"  # an async save handed over, its writer not started yet (busy with the previous one)
    WRITE = "write"  # serializing and writing this rank's files (into the page cache)
    WRITE_FSYNC = "write+fsync"  # the same, each file fsynced as it is written, the two not told apart
    FSYNC = "fsync"  # flushing this rank's files to storage, apart from writing them
    # A write call after its writers' last fsync: gathering their results, joining them (megatron-core's forked
    # writer processes exiting).
    COLLECT = "collect"
    PLAN_WRITE = "plan+write"  # a whole sharded save inside one call we cannot enter (Lightning's FSDP2)
    # An async save written, its finalize not started yet: megatron-core finalizes at the training loop's next
    # check (maybe_finalize_async_calls), once every rank's writer is done. The checkpoint is not loadable yet.
    AWAITING_FINALIZE = "awaiting_finalize"
    FINALIZE = "finalize"  # the checkpoint's metadata file, renames, the last collective
    WRITE_FINALIZE = "write+finalize"  # a log's background part: the write until its finalize line was printed
    METADATA = "metadata"  # a load reading the checkpoint's metadata
    READ = "read"  # a load reading and deserializing its bytes
    COPY_IN = "copy_in"  # a load copying what it read into the model and optimizer


@dataclass(frozen=True)
class PhaseSpan:
    """One phase of one operation on one rank, on that rank's monotonic clock (ns)."""

    phase: str  # a `Phase` value
    start_ns: int
    end_ns: int
    # Where several writer threads or processes did this phase's work side by side (write, fsync): how many, and
    # their own time in that work summed over them (can exceed the phase's span; ckpt_bench.worker.phases).
    writers: int | None = None
    writer_seconds: float | None = None


@dataclass(frozen=True)
class CheckpointEvent:
    kind: EventKind
    rank: int | None = None  # None: the source does not say which rank
    iteration: int | None = None
    bytes: int | None = None  # bytes this rank wrote (save) or read (load), when known
    mono_ns: int | None = None  # time.monotonic_ns(): comparable between ranks of one host only
    wall_ns: int | None = None  # time.time_ns()
    elapsed_ns: int | None = None  # duration of the phase this event closes, as the source measured it
    path: str | None = None  # checkpoint directory the event is about
    source: TimeSource = TimeSource.RECORDED
    seq: int = 0  # order within its source (line number, or record count), for sources without clocks
    error: str | None = None  # set on an *_END event when the operation failed
    # On end events of our own workers (ckpt_bench.core.memory): this rank's peak resident memory from the
    # operation's start to this event, and on CUDA the allocator's peak over the same span.
    peak_rss_bytes: int | None = None
    peak_device_bytes: int | None = None
    extra: dict = field(default_factory=dict)  # backend-specific facts (e.g. format, strategy)
    phases: tuple[PhaseSpan, ...] = ()  # on end events: the phases of the span the event closes, in order

    def to_json(self) -> str:
        record = {k: v for k, v in asdict(self).items() if v is not None and v != {} and v != ()}
        if self.phases:
            record["phases"] = [{k: v for k, v in span.items() if v is not None} for span in record["phases"]]
        record["kind"] = self.kind.value
        record["source"] = self.source.value
        return json.dumps(record, sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> CheckpointEvent:
        record = json.loads(line)
        record["kind"] = EventKind(record["kind"])
        record["source"] = TimeSource(record.get("source", TimeSource.RECORDED.value))
        record["phases"] = tuple(PhaseSpan(**span) for span in record.get("phases", ()))
        return cls(**record)


# `extra` key of a SAVE_START whose source says the save began before the previous one had finished
# (Megatron's "Starting a checkpoint save before previous has finished"): the report is not accurate.
OVERLAPS_PREVIOUS = "overlaps_previous"

class EventRecorder:
    """Appends one rank's events to `<dir>/rank-<R>.jsonl`, one JSON object per line.

    Each event is flushed as it is written so that a rank that dies mid-save still leaves the
    events before its death on disk: the report marks that save incomplete instead of losing it.
    Async saves finish on other threads (DCP's future callbacks, Lightning's writer thread), which
    record from there: a lock keeps their lines whole.
    """

    # kind -> (operation, whether the event ends it): where a MemoryWatch opens, reads and closes a peak.
    _MEMORY_SPANS = {
        EventKind.SAVE_START: ("save", None), EventKind.SAVE_BLOCK_END: ("save", False),
        EventKind.SAVE_WRITTEN: ("save", False), EventKind.SAVE_END: ("save", True),
        EventKind.LOAD_START: ("load", None), EventKind.LOAD_END: ("load", True),
    }

    def __init__(self, directory: str | os.PathLike, rank: int, memory: MemoryWatch | None = None):
        """`memory`: also record each operation's peak memory in its end events (our workers)."""
        self.rank = rank
        self.memory = memory
        self.path = Path(directory) / f"rank-{rank}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the rank
        self._seq = 0
        self._lock = threading.Lock()

    @staticmethod
    def now() -> tuple[int, int]:
        """(monotonic, wall) clock now, in ns: for an event whose fields take time to compute after it."""
        return time.monotonic_ns(), time.time_ns()

    def record(self, kind: EventKind, iteration: int | None = None, at: tuple[int, int] | None = None,
               **fields) -> CheckpointEvent:
        """Write one event, timed now or `at` (from `now()`)."""
        mono_ns, wall_ns = at or self.now()
        if self.memory is not None:
            operation, ends = self._MEMORY_SPANS[kind]
            if ends is None:
                self.memory.begin((operation, iteration))
            else:
                fields = {**self.memory.peak((operation, iteration), finished=ends), **fields}
        with self._lock:
            self._seq += 1
            event = CheckpointEvent(
                kind=kind,
                rank=self.rank,
                iteration=iteration,
                mono_ns=mono_ns,
                wall_ns=wall_ns,
                seq=self._seq,
                **fields,
            )
            self._file.write(event.to_json() + "\n")
            self._file.flush()
        return event

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> EventRecorder:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def read_event_files(paths: Iterable[str | os.PathLike]) -> Iterator[CheckpointEvent]:
    """Events from JSONL files written by `EventRecorder` (streamed, one line at a time)."""
    for path in paths:
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                if line.strip():
                    yield CheckpointEvent.from_json(line)


def event_files(directory: str | os.PathLike) -> list[Path]:
    return sorted(Path(directory).glob("rank-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
