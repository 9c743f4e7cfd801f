"""What every engine's rank-count costs are made of, and the DCP steps torch_dist and dcp share.

A step is one of an engine's own global steps (megatron-core's sharding validation, its fully parallel
distribution, DCP's global plan, the finalize), run here over the job's N ranks' inputs, built from the plan
we already derive, with the engine's own code. Its collectives are not run: their payloads are the objects
that step would exchange, pickled as `torch.distributed`'s `*_object` collectives pickle them, and the step
says how many bytes the busiest host receives (or sends); the projection prices them with a network figure.
What a step costs in CPU is the busiest rank's work (the coordinator's where one rank does it), timed with
`time.thread_time` (one core's CPU seconds on this machine, whatever else runs beside it).

A step that runs out of its budget (CPU seconds each step may spend) stops where it is: its time is then a lower
bound (`complete` False).

A step that is a sum over the ranks (the coordinator unpickles each rank's load plan and pickles it back, nothing
across ranks: DCP's `create_default_global_load_plan` returns the plans as they are) can be computed over a sample
of them (`RankSums`, `RankSample`): a few ranks of each class holding the same model shards, scaled by the items
the job's ranks hold to theirs.
"""

from __future__ import annotations

import contextlib
import gc
import pickle
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from ckpt_bench.core.collector import collector_paused

__all__ = ["EVERY_RANK", "TIMING_SPREAD", "Budget", "OutOfBudget", "RankCosts", "RankSample", "RankSums", "Step",
           "all_gather_bytes", "built_or_floor", "gather_bytes", "pickled_size", "unpickled"]

#: The least error a figure timed here carries: how much the same step's CPU moves between runs on this machine
#: (megatron-core's sharding validation at 1,024 ranks: 5.35-5.97 s).
NOISE = 0.1
#: The least error of a sum over the ranks timed over a sample of them: its per-item time moves with the heap of the
#: process timing it (DeepSeek-V3's load plan of every held shard, 16 of 1,024 ranks timed four times in one
#: worker: 471, 563, 580, 620 s; 483 s in a fresh one).
SAMPLE_NOISE = 0.15
#: How far one step's CPU moves between processes timing it, in log scale (a standard deviation): the spread the fit
#: of copies of the job carries to the model's depth (`sampled`). Pooled over DeepSeek-V3's copies at 1,024 ranks
#: (2, 4, 8 layers; its seven steps in five processes at 2 and 4 layers, two at 8; each step timed once): 0.114 over
#: 63 degrees of freedom, 2026-11-30.
TIMING_SPREAD = 0.12
#: The least error of a validation's pairwise checks priced at a sampled time a check (`pairwise_checks`), a factor's
#: excess (the checks' seconds lie within / (1 + it) and x (1 + it)): what torch's own validation of the same plan
#: moves between processes, where its chunks lie in memory. Llama 3.1 70B FSDP2's 134,774,784 checks at 8 layers x
#: 1,024 ranks took 100 s in one process and 161 s in another; its global plan at 80 layers, priced at the least of
#: its copies' times a check, came to 7,220 / 8,362, 10,279 / 14,163 and 12,057 / 21,866 s in three idle / busy pairs
#: of first plans: a spread of 0.30 in log scale; two of it, a factor of 1.8 (0.3, the first pair's alone, left the
#: third pair's ranges apart).
CHECK_SPREAD = 0.8
#: Payload bytes a sum over a sample of the ranks goes through at least (the sample's payloads again, where it
#: holds fewer; the job's own bytes where those are fewer): its time an item grows with what the coordinator holds
#: until about this (DeepSeek-V3's held load plans here: 48 us an item over 27 MB, 65 us over 53, 106 and 213 MB;
#: Mixtral 8x7B's: 9 us over 1 MB, 28 over 16 MB, 33-35 over its whole 66 MB).
SAMPLE_BYTES = 64 << 20


class OutOfBudget(Exception):
    """The computation's CPU budget is spent."""


class Budget:
    """CPU seconds a step of the computation may spend (this thread's), checked as it goes and, inside an engine's own
    function that runs long without returning (`enforced`), by a CPU timer that interrupts it."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.started = time.thread_time()

    @property
    def spent(self) -> float:
        return time.thread_time() - self.started

    def restart(self, spent: float = 0.0) -> Budget:
        """A step of its own: the budget is a step's (each global step may spend `seconds`), `spent` of it already
        (a piece of the step timed once for two steps)."""
        self.started = time.thread_time() - spent
        return self

    def check(self) -> None:
        if self.spent > self.seconds:
            raise OutOfBudget

    @contextlib.contextmanager
    def enforced(self) -> Iterator[None]:
        """Interrupt what runs inside once the budget is spent (ITIMER_VIRTUAL: this process's CPU time; the
        computation's process is single-threaded). Only in the main thread, where Python delivers signals."""
        self.check()
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def out(signum, frame):
            raise OutOfBudget

        previous = signal.signal(signal.SIGVTALRM, out)
        signal.setitimer(signal.ITIMER_VIRTUAL, max(1e-3, self.seconds - self.spent))
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
            signal.signal(signal.SIGVTALRM, previous)


@dataclass
class Step:
    """One global step of a save or a load at the job's size."""

    name: str
    operation: str
    """"save" or "load"."""
    what: str
    """What runs, in a few words, naming the engine's own functions."""
    cached_away: bool = False
    """Whether a save that reuses its structure skips it (megatron-core's `--ckpt-assume-constant-structure`,
    DCP's plan caching): a first save pays it, a cached save does not."""
    cpu_s: float | None = None
    """The busiest rank's CPU seconds for it, on one core of this machine; None: not computed (see `why`)."""
    complete: bool = True
    """False where the budget ran out: `cpu_s` is a lower bound."""
    collective: str | None = None
    """The collective its payloads travel by, and over which ranks."""
    host_bytes: int | None = None
    """Bytes the busiest host receives (or, for a coordinator's scatter, sends) in it."""
    rank_memory_bytes: int | None = None
    """The largest buffer one rank holds for its collective (an all_gather_object's output: group size x the
    largest payload, on the device for nccl)."""
    units: int | None = None
    """How many items it went through (sharded tensors and objects, write items), for the reader."""
    why: str | None = None
    """Why `cpu_s` is None or a bound."""
    extrapolated: dict[str, Any] | None = None
    """Where the figures were fitted from shallower copies of the job (`sampled`): the samples [ranks, layers] and
    the fit's error (a factor's excess: the CPU lies within cpu_s / (1 + error) and cpu_s x (1 + error); None:
    unknown); None: computed at the job's size."""
    rank_sample: dict[str, Any] | None = None
    """Where a sum over the ranks was computed over a sample of them (`RankSample`): {"ranks": how many, "of": the
    job's, "error": a fraction}; None: over every rank."""
    pairwise: dict[str, Any] | None = None
    """A global plan's validation, its pairwise overlap checks counted (`pairwise_checks`): {"checks": how many,
    "timed": how many ran, "check_s": CPU seconds a check where they were sampled (None: all ran)}."""
    assignment: dict[str, Any] | None = None
    """A fully parallel distribution whose greedy assignment was timed over a sample of its shards and scaled
    (`sampled_assignment`): {"shards": the group's, "timed": how many ran}."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RankSums:
    """How an engine computes its steps that are a sum over the ranks: over a sample of about `ranks` of them, at
    least two of each class of ranks holding the same model shards (None: every rank); `steps`: "all" of the
    engine's steps, the "sums" alone, or the "others" alone (`sampled`'s copies of the job, whose sums it takes
    from the job itself)."""

    ranks: int | None = None
    steps: str = "all"

    def __post_init__(self) -> None:
        if self.ranks is not None and self.ranks < 2:
            raise ValueError(f"a sample of {self.ranks} ranks: at least 2 (a class's spread is the error)")
        if self.steps not in ("all", "sums", "others"):
            raise ValueError(f"steps {self.steps!r}: all, sums or others")


#: Every step, each over every rank: an engine's computation at the job's size.
EVERY_RANK = RankSums()


@dataclass(frozen=True)
class RankSample:
    """Ranks standing for the job's in a sum over them: `ranks`, grouped by class (`classes`: each class's ranks
    in the sample and how many ranks of the job it has)."""

    classes: tuple[tuple[tuple[int, ...], int], ...]

    @property
    def ranks(self) -> list[int]:
        return [rank for members, _ in self.classes for rank in members]

    def scaled(self, sizes: dict[int, int]) -> tuple[float, float]:
        """(the job's total over the sampled ranks' `sizes` (a rank's items), its error): each class's mean times
        its rank count; the error the largest spread of a class's sampled sizes around their mean, never below
        the timing's `SAMPLE_NOISE`."""
        total, spread = 0.0, 0.0
        for members, count in self.classes:
            values = [sizes[rank] for rank in members]
            mean = sum(values) / len(values)
            total += mean * count
            if mean:
                spread = max(spread, (max(values) - min(values)) / mean)
        return total, max(SAMPLE_NOISE, spread)


@dataclass
class RankCosts:
    """An engine's global steps at the job's size, and what its checkpoint's metadata weighs."""

    engine: str
    world_size: int
    steps: list[Step]
    metadata_file_bytes: int | None = None
    """The checkpoint's global index (DCP's `.metadata`) at this size: written by the coordinator at each
    save's finalize, read by every rank at a restart."""
    every_rank_reads_metadata: bool = False
    computed_with: dict[str, str] = field(default_factory=dict)
    """The versions whose code ran (torch, megatron-core)."""
    budget_s: float | None = None
    spent_s: float | None = None
    peak_rss_bytes: int | None = None
    """This computation's peak memory: at least what the coordinator holds for the same steps."""
    notes: list[str] = field(default_factory=list)
    method: str = "computed"
    """"computed" at the job's size, or "extrapolated" from smaller copies of it (`sampled`)."""
    samples: list[list[int]] | None = None
    """The copies the steps were computed on (ranks, layers), where extrapolated."""
    rank0_units: int | None = None
    """Rank 0's sharded objects (tensors and objects) at the job's depth, where extrapolated (the depth axis: its
    count answers a worker's `count_only` request)."""

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "steps": [step.as_dict() for step in self.steps]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankCosts:
        return cls(**{**data, "steps": [Step(**step) for step in data["steps"]]})


def pickled_size(obj: Any) -> int:
    """Bytes `torch.distributed`'s object collectives send for `obj` (they pickle it with the highest protocol)."""
    return len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def all_gather_bytes(group_size: int, largest: int, ranks_per_node: int) -> int:
    """Bytes a host receives in an all_gather_object over groups of `group_size`: each of its ranks gets every
    member's payload, padded to the largest (torch pads each to the largest before the all_gather)."""
    return min(group_size, ranks_per_node) * group_size * largest if group_size > 1 else 0


def gather_bytes(world_size: int, largest: int) -> int:
    """Bytes the coordinator's host receives in a gather_object over the job (payloads padded to the largest),
    or sends in a scatter_object_list."""
    return world_size * largest if world_size > 1 else 0


def computation_failed(stderr: str) -> RuntimeError:
    """The error of a computation's process that ended without its answer: the last line it wrote to stderr."""
    return RuntimeError(f"computing the rank-count costs failed: {(stderr.strip().splitlines() or ['no output'])[-1]}")


def unpickled(payloads: list[bytes], budget: Budget) -> list:
    """Each payload unpickled, as a rank does with what an object collective brought it."""
    gathered = []
    for payload in payloads:
        budget.check()
        gathered.append(pickle.loads(payload))
    return gathered


def built_or_floor(step: Step, budget: Budget, build, floor_work) -> list | None:
    """Build a step's inputs with `build(kept)` (each rank's payload appended to `kept`, outside the timing: a
    rank's own payload is not a rank-count cost); where the budget runs out first, the step is a lower bound at
    what `floor_work(kept, fresh)` (the step's work over the payloads built so far, which every rank of the real
    job does and more, under a budget of its own) spends, never 0. Returns the payloads, or None where the step is
    a floor."""
    kept: list = []
    ran_out = False
    try:
        with collector_paused():
            build(kept)
    except OutOfBudget:
        ran_out = True
    if kept:
        pickle.loads(kept[0])  # once untimed: the classes it names imported, as in a training process
    if not ran_out:
        return kept
    gc.freeze()
    fresh = Budget(budget.seconds)
    started = time.thread_time()
    try:
        with fresh.enforced():
            floor_work(kept, fresh)
    except OutOfBudget:
        pass
    step.cpu_s, step.complete = round(time.thread_time() - started, 4), False
    step.why = (f"the budget ran out while building the ranks' inputs ({len(kept):,} built): a lower bound, "
                "the step's own work over those alone")
    return None


#: A step whose work takes less than this many CPU seconds is timed again (up to `_TIMINGS` times) and its least
#: time kept: short timings move with the cache and the collector's state (the sharding validation of a small job
#: moved 30 % between runs). Longer ones are timed once: DeepSeek-V3's 2- and 4-layer copies at 1,024 ranks, three
#: processes each, moved as much with their 0.6-2 s steps timed three times (1-19 % between runs) as timed once
#: (2-16 %), and the retimes took a quarter of each copy (23-26 s against 16-19 s at 2 layers; 46-50 s against
#: 34-39 s at 4). Timed once, every step of a 1,024-rank copy is timed alike, the shallow copies' as the deep ones'
#: (over 2 s, timed once before too), so the fit through them does not take a least-of-three for their growth.
_RETIME_BELOW_S = 0.5
_TIMINGS = 3


def timed_again(timings: list[float]) -> bool:
    """Whether work timed `timings` so far (CPU seconds each) is timed once more."""
    return len(timings) < _TIMINGS and max(timings) < _RETIME_BELOW_S


def settled_heap() -> None:
    """The collector's state a computation (a copy of the job, a sum over the ranks) starts from, the same whatever
    ran before in the process: everything held so far collected once and frozen out of later collections (its
    steps then freeze what they built, in the same order every time). A full collection runs when the objects that
    survived younger ones reach a quarter of those the last full one kept: unpickling a thousand ranks' metadata
    triggers few where the process's last full collection kept many, and more (each over what was unpickled so far)
    where it kept few; with only `gc.freeze`, what ran before decided (DeepSeek-V3's 2-layer sharding validation at
    1,024 ranks: 1.0 s after a large step in the same process, 2.0 s in a fresh one)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def run_step(step: Step, budget: Budget, work, once: bool = False, counted=None) -> Step:
    """Time `work()` (this thread's CPU) into `step`: the least of up to `_TIMINGS` timings where it is short
    (`once`: one timing, for work standing for more than it holds, whose memory a second timing would find warm); a
    budget that runs out leaves a lower bound. What the heap holds so far is frozen out of the collections the step
    may trigger (the computation started from `settled_heap`): a collection's cost is the whole heap's (this
    computation's inputs here, a training process's model and state there), not the step's. `counted()`, after each
    timing: the seconds it stands for beyond its CPU (work counted and not run, at its measured rate, less the
    counting's own CPU), 0 where none was counted in it."""
    gc.freeze()
    timings: list[float] = []
    while not timings or (not once and timed_again(timings)):
        started = time.thread_time()
        try:
            with budget.enforced():
                work()
        except OutOfBudget:
            if not timings:
                step.complete = False
                step.why = f"stopped when its {budget.seconds:g} s budget ran out: a lower bound"
                timings.append(time.thread_time() - started + (counted() if counted else 0.0))
            break
        timings.append(time.thread_time() - started + (counted() if counted else 0.0))
    step.cpu_s = round(min(timings), 4)
    return step
