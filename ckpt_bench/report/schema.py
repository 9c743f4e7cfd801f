"""The report's types: what report.json holds, as dataclasses, and the JSON Schema made from them.

The report engine and assembly write report.json; these types say what it may hold, field by field, so a
reader gets it typed (`Report.from_json`) and a key nobody declared is an error, not a silent extra. The
published schema (`docs/report.schema.json`, `python -m ckpt_bench.report.schema`) is generated from the
same types, and the tests check that every report we write validates against it.

Every section a reader reads is typed here to the last field, each naming the module that writes it.
`config` (the run's and the backend's own settings) and `environment` (the host, its software) stay open
objects, shown whole; the keys of `config` a reader needs have typed accessors (`Report.fsync`,
`Report.assumes_constant_structure`). `Report`'s readers (`steady`, `first_save_apart`, `first_saves`,
`compared`, `fsync`) are report.metrics' definitions, on the typed report.
"""

from __future__ import annotations

import dataclasses
import json
import keyword
import statistics
import sys
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Union

from ckpt_bench.core.errors import SchemaError
from ckpt_bench.core.run_facts import stated
from ckpt_bench.report import SCHEMA_VERSION
from ckpt_bench.report.metrics import Metric, split_first_saves

Section = dict[str, Any]


@dataclass
class Spread:
    """The slowest and fastest rank of one figure."""

    max: float | None = None
    max_rank: int | None = None
    min: float | None = None
    min_rank: int | None = None


@dataclass
class Stat:
    """Statistics of one figure over saves."""

    n: int = 0
    min: float | None = None
    median: float | None = None
    mean: float | None = None
    max: float | None = None
    stdev: float | None = None
    """The sample standard deviation (divided by n - 1); mlperf.dlio's are DLIO's population ones (by n)."""


@dataclass
class FirstSave:
    """The first save of a process, shown apart (a writer's start-up)."""

    iteration: int | None = None
    block_time: float | None = None
    total_time: float | None = None
    total_time_at_least: float | None = None  # where its total is known only in part (SaveRecord)
    bandwidth: float | None = None


@dataclass
class StatsBlock:
    block_time: Stat | None = None
    total_time: Stat | None = None
    bandwidth: Stat | None = None
    total_time_at_least: Stat | None = None  # where saves were timed only in part (SaveRecord)


@dataclass
class SaveStats(StatsBlock):
    """Over the complete saves; `excluding_first` is the steady state."""

    first_save: FirstSave | None = None
    excluding_first: StatsBlock | None = None
    steady: Section | None = None


@dataclass
class PhaseTime:
    """One phase of a save or a load on one rank (report.engine; the phases: docs/report.md, "Phases")."""

    phase: str
    seconds: float
    blocking: bool | None = None  # inside the save call, before training could go on (a save's); None for a load
    start: float | None = None  # seconds from the operation's start on its rank (in `phases_per_rank`)
    # Where writer threads or processes did the work side by side (write, fsync): how many, and their own
    # seconds in this work summed over them (more than `seconds` where they overlapped).
    writers: int | None = None
    writer_seconds: float | None = None


@dataclass
class RankPhases:
    """One rank's phases of a save or a load, in order."""

    rank: int | None
    phases: list[PhaseTime]


@dataclass
class Operation:
    """What a save and a load record share."""

    iteration: int | None = None
    # The checkpoint tier where the source names one: Megatron's persistent, non_persistent_global or
    # non_persistent_local (the built-in worker's saves and load).
    tier: str | None = None
    complete: bool = False
    ranks: int = 0
    bytes: int | None = None
    bytes_source: str | None = None  # disk (the folder measured), ranks (their counts summed), save (its save's)
    peak_rss_bytes: int | None = None
    peak_rss_bytes_per_rank: Spread | None = None
    peak_device_bytes: int | None = None
    peak_device_bytes_per_rank: Spread | None = None
    time_source: str | None = None
    time_resolution_s: float | None = None
    bandwidth: float | None = None
    error: str | None = None
    repetition: int | None = None
    phases: list[PhaseTime] | None = None  # the slowest rank's, in order; sum to its time
    phases_rank: int | None = None  # whose `phases` they are
    phases_per_rank: list[RankPhases] | None = None

    def phase_seconds(self, blocking: bool | None = None) -> dict[str, float]:
        """Seconds per phase name of `phases`, in the order they first ran (a phase that recurs, as each
        file's write and fsync, summed); the blocking ones only, or the background ones only, when asked."""
        seconds: dict[str, float] = {}
        for phase in self.phases or []:
            if blocking is None or phase.blocking is blocking:
                seconds[phase.phase] = seconds.get(phase.phase, 0.0) + phase.seconds
        return seconds

    def dominant_phase(self, blocking: bool | None = None) -> tuple[str, float] | None:
        """The phase that took longest (`phase_seconds`), and its seconds."""
        seconds = self.phase_seconds(blocking)
        return max(seconds.items(), key=lambda item: item[1]) if seconds else None


@dataclass
class SaveRecord(Operation):
    """One save across ranks: the slowest rank's times."""

    block_time: float | None = None
    total_time: float | None = None
    # Where the source times a save only from its call's return to durable (its start not in the log): that
    # part, a lower bound on the null total_time, and what it spans.
    total_time_at_least: float | None = None
    total_time_at_least_span: str | None = None
    block_time_per_rank: Spread | None = None
    total_time_per_rank: Spread | None = None
    overlapped: bool = False
    wait_for_previous: float | None = None
    source_semantics: dict[str, str] | None = None
    unusual: list[str] | None = None


@dataclass
class LoadRecord(Operation):
    """One load across ranks."""

    time: float | None = None
    time_per_rank: Spread | None = None
    cache: str | None = None
    tier_reason: str | None = None  # why the load read its tier's checkpoint (a run with non-persistent ones)


@dataclass
class Mismatch:
    """The first tensor that came back different (worker.integrity.combine)."""

    rank: int | None = None
    tensor: str | None = None


@dataclass
class Verification:
    """Every tensor loaded compared with what was saved (worker.integrity.combine); `reason` when no rank
    reported a verdict."""

    verified: bool | None = None
    ranks_checked: int = 0
    tensors_checked: int = 0
    mismatched: int = 0
    first_mismatch: Mismatch | None = None
    calls_checked: int | None = None
    reason: str | None = None


@dataclass
class FailedRank:
    """A rank of a failed pass (launcher.torchrun.RankFailure.failed_rank)."""

    rank: int | None
    local_rank: int | None
    exit_code: int | None
    signal: str | None
    """The signal that ended it (a negative exit code), e.g. SIGKILL."""
    cause: str | None
    """`first failure`, `stopped by torchrun after the first failure` or `failed`."""
    killed_by: str | None = None
    """Who sent a root cause's SIGKILL, as far as known (launcher.oom)."""
    exception: str | None = None
    """What the rank died of, `Type: message`: torchelastic's error file where the rank wrote one (torch's
    `@record`), else its stderr log (our workers' `<phase> failed:` line, or the last Python traceback); None
    for a rank ended by a signal (`signal` is its cause) or that left none."""


@dataclass(kw_only=True)
class PassSummary:
    """One pass of one node, as the launcher writes it to run.json and the report (`run.passes`):
    launcher.torchrun.PassResult.summary, launcher.nodes for the other nodes'."""

    name: str
    exit_code: int | None
    """The pass's exit code on this node; None: the node did not report it (`error` says why)."""
    ok: bool
    cause: str | None
    """What went wrong with the storage, when known (launcher.torchrun.PassResult.cause)."""
    failed_ranks: list[FailedRank]
    log_dir: str | None
    """The pass's torchrun logs on this node."""
    node_rank: int | None = None
    """The node, in a run of several."""
    interrupted: str | None = None
    """The signal that stopped the pass (Ctrl-C, SIGTERM)."""
    error: str | None = None
    """Why the node has no result (it did not finish in time)."""

    @classmethod
    def from_json(cls, data: dict) -> PassSummary:
        return _build(cls, data, "pass")

    def to_json(self) -> dict:
        """Its fields in order; an optional one left out while unset, as each failed rank's `killed_by`."""
        return {**stated(self), "failed_ranks": [stated(rank) for rank in self.failed_ranks]}


@dataclass
class Interrupted:
    """Ctrl-C or SIGTERM (benchmark.lifecycle): the signal, the exit code it gives, the pass it stopped."""

    signal: str | None = None
    exit_code: int | None = None
    pass_: str | None = None  # report.json's `pass`


@dataclass
class RunSection:
    """The run behind the report (our runs only)."""

    dir: str | None = None
    backend: str | None = None
    status: str | None = None
    passes: list[PassSummary] = field(default_factory=list)
    interrupted: Interrupted | None = None
    launcher: Section | None = None
    repetitions: list[str] | None = None
    node_rank: int | None = None


@dataclass
class Measurement:
    """What each figure is, in words (report.assembly)."""

    fsync: bool | None = None
    fsync_means: str | None = None
    load_cache: str | None = None
    load_cache_means: str | None = None
    storage_baseline: str | None = None
    time: str | None = None
    memory: str | None = None


@dataclass
class WhatIf:
    """The advice for a job of another size, with this run's checkpoint and restart cost (report.advice.what_if)."""

    gpus: int = 0
    mtbf_s: float | None = None
    young_interval_s: float | None = None
    daly_interval_s: float | None = None
    daly_interval_iterations: int | None = None
    goodput_at_optimum: float | None = None


@dataclass
class CheckpointBudget:
    """--checkpoint-budget: the write bandwidth the job needs for checkpointing to cost at most that share of its
    time at Daly's interval (report.advice.bandwidth_needed)."""

    percent: float = 0.0
    max_checkpoint_cost_s: float | None = None
    daly_interval_s: float | None = None
    fixed_cost_s: float | None = None
    storage_write_gbps_needed: float | None = None
    """The aggregate write bandwidth (GB/s, 10^9 bytes a second), every host at once."""
    client_write_gbps_needed: float | None = None
    """What the busiest host must write (GB/s), where the projection knows it."""
    feasible: bool | str | None = None
    """True, False, or "unknown" where a bound of the global steps decides it."""
    current_checkpoint_cost_s: float | None = None
    why: str | None = None
    from_: str | None = None
    fixed_cost_range_s: list[float | None] | None = None
    share_counts: str | None = None
    storage_write_gbps_needed_range: list[float | None] | None = None
    client_write_gbps_needed_range: list[float | None] | None = None
    needed_is: str | None = None
    """"point", or "at least" where the global steps are a bound."""


@dataclass
class AdvicePurchaseRow:
    """One storage of the purchase table with its advice (advice.purchase): each figure [low, high]."""

    storage_write_gbps: float | None = None
    storage_read_gbps: float | None = None
    checkpoint_cost_range_s: list[float | None] = field(default_factory=list)
    restart_cost_range_s: list[float | None] = field(default_factory=list)
    daly_interval_range_s: list[float | None] = field(default_factory=list)
    goodput_at_optimum_range: list[float | None] = field(default_factory=list)
    """[worst, best]."""
    budget_met: bool | str | None = None
    """Whether checkpointing costs at most --checkpoint-budget of the job's time: true, false, "unknown" where a
    bound decides it; null without a budget."""


@dataclass
class Advice:
    """Checkpoint interval advice and goodput (report.advice.advise); `error` alone when the MTBF could not
    be worked out."""

    checkpoint_cost_s: float | None = None
    checkpoint_cost_from: str | None = None
    restart_cost_s: float | None = None
    restart_cost_from: str | None = None
    restart_overhead_s: float | None = None
    mtbf_s: float | None = None
    mtbf_from: str | None = None
    young_interval_s: float | None = None
    daly_interval_s: float | None = None
    goodput_at_optimum: float | None = None
    iteration_time_s: float | None = None
    iteration_time_from: str | None = None
    young_interval_iterations: int | None = None
    daly_interval_iterations: int | None = None
    configured_interval_iterations: int | None = None
    configured_interval_s: float | None = None
    goodput_at_configured: float | None = None
    model: str | None = None
    checkpoint_cost_range_s: list[float | None] | None = None
    """C as (low, high): equal for a point, high None for a lower bound (projected from a bound)."""
    checkpoint_cost_is: str | None = None
    """"point", "range" or "at least"."""
    restart_cost_range_s: list[float | None] | None = None
    restart_cost_is: str | None = None
    daly_interval_range_s: list[float | None] | None = None
    goodput_at_optimum_range: list[float | None] | None = None
    """(worst, best): the worst at C's and R's high ends (None where they are open)."""
    what_if: list[WhatIf] | None = None
    checkpoint_budget: CheckpointBudget | None = None
    purchase: list[AdvicePurchaseRow] | None = None
    """What each storage priced buys (several --storage-write-gbps), with its interval and goodput."""
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @classmethod
    def from_json(cls, data: dict) -> Advice:
        """An advice section (--plan's, too), typed; raises SchemaError where it has another shape."""
        return _build(cls, data, "advice")


@dataclass
class ProjectionJob:
    """The job projected (projection.model)."""

    ranks: int = 0
    nodes: int = 0
    ranks_per_node: int = 0
    engine: str | None = None
    storage: str | None = None
    async_save: bool | None = None
    hosts_that_ran: list[int] | None = None
    """The job's hosts this run's hosts played (a subset of whole hosts); None: a --plan, or not whole hosts."""


@dataclass
class HostShare:
    host: int = 0
    bytes: int = 0
    files: int = 0
    ranks_moving_bytes: int = 0


@dataclass
class ByteSpread:
    min: int = 0
    median: int = 0
    max: int = 0


@dataclass
class PageCachedReads:
    """A restart's reads with each host's page cache serving a shard its ranks share once (projection.model.
    page_cached_reads): the low end of its transfer, every rank's own reads (`Traffic.bytes`) the high end."""

    bytes: int = 0
    busiest_host_bytes: int = 0


@dataclass
class Traffic:
    """What one save (load) of the whole job moves (projection.job.Traffic)."""

    bytes: int = 0
    files: int = 0
    ranks_moving_bytes: int = 0
    hosts_moving_bytes: int = 0
    rank_bytes: ByteSpread | None = None
    host_bytes: ByteSpread | None = None
    busiest_host: HostShare | None = None
    page_cached: PageCachedReads | None = None
    """Only a restart from a file system that reads replicas: torch_dist's without the fully parallel load, or the
    legacy format's."""


@dataclass
class ProjectionFigure:
    """One input of the projection and its source (projection.inputs.Figure)."""

    value: float | None = None
    source: str | None = None
    at_least: bool = False


@dataclass
class HostPhase:
    phase: str = ""
    seconds: float | None = None
    source: str = ""


@dataclass
class ProjectionInputs:
    client_write_gbps: ProjectionFigure | None = None
    client_read_gbps: ProjectionFigure | None = None
    storage_write_gbps: ProjectionFigure | None = None
    storage_read_gbps: ProjectionFigure | None = None
    network_gbps: ProjectionFigure | None = None
    write_requests_per_s: ProjectionFigure | None = None
    read_requests_per_s: ProjectionFigure | None = None
    host_phases: list[HostPhase] = field(default_factory=list)
    """Phases each host pays in a save around its writes, measured on the hosts that ran (torch_dist's stage)."""


@dataclass
class ProjectionTerm:
    """One term of a projected time: a global step (one after another) or a transfer limit (the slowest)."""

    name: str = ""
    kind: str = ""
    seconds: float | None = None
    """Where its inputs are measured or given; else null and `range_s` bounds it."""
    range_s: list[float | None] = field(default_factory=list)
    what: str | None = None


@dataclass
class ProjectionFloor:
    """What the hosts that ran measured for a steady save: the whole job's save takes at least that."""

    seconds: float | None = None
    what: str = ""


@dataclass
class ProjectedTime:
    """A projected save or restart of the whole job (projection.model)."""

    seconds: float | None = None
    range_s: list[float | None] = field(default_factory=list)
    """[low, high]; high null where a term is unbounded (an unknown figure)."""
    binding: str | None = None
    could_also_bind: list[str] = field(default_factory=list)
    terms: list[ProjectionTerm] = field(default_factory=list)
    block_range_s: list[float | None] | None = None
    block_note: str | None = None
    feasible: bool | None = None
    """False where the job's hosts cannot hold it (projection.feasibility): then no time, only `cannot_run`
    and what it would take if it ran (`range_if_it_ran_s`); null where the host memory is unknown."""
    cannot_run: str | None = None
    range_if_it_ran_s: list[float | None] | None = None
    floor: ProjectionFloor | None = None
    """Where the hosts that ran measured a slower save than the model projects: that save, the floor."""


@dataclass
class PurchaseRow:
    """One storage of the purchase table (several --storage-write-gbps / --storage-read-gbps): the job's saves
    and restart at its ceilings, from the same global steps (projection.purchase)."""

    storage_write_gbps: float | None = None
    storage_read_gbps: float | None = None
    save: ProjectedTime | None = None
    steady_save: ProjectedTime | None = None
    load: ProjectedTime | None = None


@dataclass
class StepFit:
    """How an extrapolated step was fitted (projection.rank_costs.sampled)."""

    samples: list[list[int]] = field(default_factory=list)
    """The copies of the job it was computed on: [ranks, layers]."""
    error: float | None = None
    """The fit's error at the job's depth, a factor's excess: the step's CPU lies within cpu_s / (1 + error) and
    cpu_s x (1 + error); None: unknown."""


@dataclass
class PairwiseChecks:
    """A global plan's validation whose pairwise overlap checks were counted (projection.rank_costs.
    pairwise_checks): torch's sweep, each check not run priced at the sampled checks' time a check."""

    checks: int = 0
    """The `_check_box_overlap` calls torch's sweep makes (at the job's depth: on the quadratic through the copies)."""
    timed: int = 0
    """How many of them ran and were timed (0 where fitted from copies)."""
    check_s: float | None = None
    """CPU seconds a check; None: torch's own validation ran them all."""


@dataclass
class AssignmentSample:
    """A fully parallel distribution whose greedy assignment (megatron-core's `distribute_shards_to_ranks`) ran over
    every stride-th of its shards in order of coverage, its CPU scaled to all of them
    (projection.rank_costs.sampled_assignment)."""

    shards: int = 0
    """The group's shards."""
    timed: int = 0
    """How many of them ran and were timed."""


@dataclass
class RankSampleFit:
    """How a step that is a sum over the ranks was computed over a sample of them (projection.rank_costs.base.
    RankSample)."""

    ranks: int = 0
    """The ranks whose payloads it went through."""
    of: int = 0
    """The job's ranks."""
    error: float = 0.0
    """Its error, a fraction: the largest spread of a class's sampled ranks' items around their mean, at least the
    timing's noise."""


@dataclass
class RankCostStep:
    """One of the engine's global steps computed at the job's size (projection.rank_costs.base.Step)."""

    name: str = ""
    operation: str = ""
    what: str = ""
    cached_away: bool = False
    cpu_s: float | None = None
    complete: bool = True
    collective: str | None = None
    host_bytes: int | None = None
    rank_memory_bytes: int | None = None
    units: int | None = None
    why: str | None = None
    extrapolated: StepFit | None = None
    """Where fitted from copies of the job with fewer layers: the samples [ranks, layers] and the fit's error (a
    fraction; None: unknown)."""
    rank_sample: RankSampleFit | None = None
    """Where a sum over the ranks was computed at the job's size over a sample of its ranks, scaled."""
    pairwise: PairwiseChecks | None = None
    """Where the step's validation had its pairwise overlap checks counted."""
    assignment: AssignmentSample | None = None
    """Where the step's greedy assignment of shards to ranks was timed over a sample of its shards."""


@dataclass
class RankCostsSection:
    engine: str = ""
    world_size: int = 0
    steps: list[RankCostStep] = field(default_factory=list)
    metadata_file_bytes: int | None = None
    every_rank_reads_metadata: bool = False
    computed_with: dict[str, str] = field(default_factory=dict)
    budget_s: float | None = None
    spent_s: float | None = None
    peak_rss_bytes: int | None = None
    notes: list[str] = field(default_factory=list)
    method: str = "computed"
    """"computed" at the job's size or "extrapolated" from copies of it with fewer layers."""
    samples: list[list[int]] | None = None
    rank0_units: int | None = None


@dataclass
class ProjectionSetting:
    """One checkpoint setting the projection follows (model.checkpointing.CheckpointSettings)."""

    name: str = ""
    value: bool | int | str | None = None
    source: str = ""
    """The file that set it (the experiment, a preset), --set, or Megatron-LM's default."""


@dataclass
class HostMemoryCheck:
    """What the busiest host holds for a save or a restart (projection.feasibility), against the host memory."""

    host: int = 0
    bytes_needed: int = 0
    fits: bool | None = None
    what: str = ""


@dataclass
class FilesCheck:
    files_a_checkpoint: int = 0
    limit: int | None = None
    fits: bool | None = None
    what: str | None = None


@dataclass
class ProjectionFeasibility:
    host_memory_gb: ProjectionFigure | None = None
    save: HostMemoryCheck | None = None
    load: HostMemoryCheck | None = None
    files: FilesCheck | None = None


@dataclass
class ProjectionCapacity:
    """The storage the experiment's checkpoints take under its retention (projection.feasibility.capacity)."""

    checkpoint_bytes: int = 0
    saves_per_run: int | None = None
    checkpoints_kept: int | None = None
    footprint_bytes: int | None = None
    peak_bytes: int | None = None
    retention: str | None = None
    what: str | None = None
    why: str | None = None


@dataclass
class ChangeSide:
    range_s: list[float | None] = field(default_factory=list)
    binding: str | None = None
    feasible: bool | None = None


@dataclass
class ChangeEffect:
    figure: str = ""
    before: ChangeSide | None = None
    after: ChangeSide | None = None


@dataclass
class ProjectionChange:
    """One setting to change, projected again (projection.changes)."""

    change: str = ""
    why: str = ""
    effects: list[ChangeEffect] = field(default_factory=list)
    steps_computed: bool = True
    """False where the change's engine has no global steps computed at this size: its times are lower bounds."""
    notes: list[str] = field(default_factory=list)


@dataclass
class Projection:
    """The whole job's save and restart from a few hosts (projection.model.project); `error` alone where the
    engine's global steps could not be computed."""

    job: ProjectionJob | None = None
    save_traffic: Traffic | None = None
    load_traffic: Traffic | None = None
    inputs: ProjectionInputs | None = None
    settings: list[ProjectionSetting] | None = None
    """The job's checkpoint settings the figures assume, each with its source; null for a job not Megatron's."""
    save: ProjectedTime | None = None
    """A process's first save (every restart's)."""
    second_save: ProjectedTime | None = None
    steady_save: ProjectedTime | None = None
    """A process's third and later saves: what most checkpoints of a long job cost."""
    load: ProjectedTime | None = None
    feasibility: ProjectionFeasibility | None = None
    """Host memory for a save and a restart, and files, against the limits given (projection.feasibility)."""
    capacity: ProjectionCapacity | None = None
    """The storage the experiment's retention keeps, and its peak during a save."""
    what_to_change: list[ProjectionChange] = field(default_factory=list)
    """Each setting that moves a figure for the better, with the figures before and after."""
    purchase: list[PurchaseRow] | None = None
    """What each storage ceiling given buys (several --storage-write-gbps): one row each."""
    rank_costs: RankCostsSection | None = None
    units: dict[str, str] | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @classmethod
    def from_json(cls, data: dict) -> Projection:
        """A projection section (--plan's, too), typed; raises SchemaError where it has another shape."""
        return _build(cls, data, "projection")


@dataclass
class AroundSave:
    """A saving iteration's time and the next one's (Megatron's --training-impact)."""

    iteration: int = 0
    iteration_time: float | None = None
    next_iteration_time: float | None = None


@dataclass
class Training:
    """What the saves cost the training loop, timed without then with saves: Megatron's --training-impact
    (iterations, backends.megatron.worker) or Lightning's --steps-per-save (fits, backends.lightning.worker);
    for a log, its iteration time alone (report.parsers.iterations). Fields in the order their writers write them."""

    iterations: int | None = None
    iterations_logged: int | None = None
    """A log's: the iterations in the log intervals its median is taken over (report.parsers.iterations)."""
    iteration_lines: int | None = None
    """A log's: its iteration-time lines, kept or not (too few leave no interval: a null median)."""
    steps_per_save: int | None = None
    train_steps: int | None = None
    saves: int | None = None
    async_save: bool | None = None
    time_without_saves: float | None = None
    time_with_saves: float | None = None
    fit_time_without_saves: float | None = None
    fit_time_with_saves: float | None = None
    save_impact_time: float | None = None
    save_impact_percent: float | None = None
    iteration_time_without_saves_median: float | None = None
    around_saves: list[AroundSave] | None = None
    timing: str | None = None


@dataclass
class BaselineRound:
    """One round of the storage baseline."""

    write_bandwidth: float | None = None
    read_bandwidth: float | None = None


@dataclass
class HostsRound:
    hosts: int = 0
    bytes: int = 0
    write_gbps: float | None = None
    read_gbps: float | None = None


@dataclass
class HostsBaseline:
    """The storage's aggregate from 1, 2, 4 ... hosts at once (launcher.hosts_baseline; GB/s = 10^9 bytes/s)."""

    rounds: list[HostsRound] = field(default_factory=list)
    write_ceiling_gbps: float | None = None
    write_ceiling_reached: bool | None = None
    """False while the last round still scaled: the storage takes at least `write_ceiling_gbps`."""
    read_ceiling_gbps: float | None = None
    read_ceiling_reached: bool | None = None
    method: str | None = None
    error: str | None = None


@dataclass
class StorageBaseline:
    """The storage's own write and cold-read bandwidth (MiB/s) with the checkpoint's I/O shape
    (--storage-baseline: storage.baseline, the fastest of its rounds: `peak` says how it was taken)."""

    tool: str | None = None
    write_bandwidth: float | None = None
    read_bandwidth: float | None = None
    write_time: float | None = None
    read_time: float | None = None
    files: int | None = None
    bytes: int | None = None
    concurrency: int | None = None
    fsync: bool | None = None
    read_cache: str | None = None
    units: dict[str, str] | None = None
    location: str | None = None
    fio_version: str | None = None
    method: str | None = None
    rounds: list[BaselineRound] | None = None
    peak: str | None = None
    shape_of_iteration: int | None = None
    hosts: HostsBaseline | None = None
    """A multi-node run's: the storage's aggregate from several hosts at once."""


@dataclass
class AbovePeak:
    """A save or load that beat the storage baseline: no fraction of peak is given for it
    (report.save_above_peak, load_above_peak)."""

    measured: float | None = None  # MiB/s: the steady save's, or the median load's
    peak: float | None = None  # MiB/s: the baseline's fastest round
    ratio: float | None = None
    reason: str = ""


@dataclass
class DlioFigures:
    """DLIO's figures (rank 0's durations; GB = 2**30 bytes), as its summary.json names them (report.mlperf)."""

    checkpoint_size_GB: float | None = None
    save_checkpoint_duration_mean_seconds: float | None = None
    save_checkpoint_duration_stdev_seconds: float | None = None
    save_checkpoint_io_mean_GB_per_second: float | None = None
    save_checkpoint_io_stdev_GB_per_second: float | None = None
    load_checkpoint_duration_mean_seconds: float | None = None
    load_checkpoint_duration_stdev_seconds: float | None = None
    load_checkpoint_io_mean_GB_per_second: float | None = None
    load_checkpoint_io_stdev_GB_per_second: float | None = None


@dataclass
class MlpstorageFigures:
    """mlpstorage's figures (the slowest rank; strict times over the ranks), as it names them (report.mlperf)."""

    mean_of_max_save_duration: float | None = None
    calculated_mean_save_throughput_from_strict_times: float | None = None
    mean_of_max_load_duration: float | None = None
    calculated_mean_load_throughput_from_strict_times: float | None = None


@dataclass
class ComparableCheck:
    """One of MLPerf Storage's checkpointing rules and what the run allows under it (report.mlperf.comparable)."""

    rule: str = ""
    outcome: str = ""  # CLOSED | OPEN | not comparable
    detail: str = ""


@dataclass
class Comparable:
    """Whether a workload run could stand beside published MLPerf Storage results: the best division every
    check allows, and the reasons it is not CLOSED (report.mlperf.comparable)."""

    verdict: str = ""
    reasons: list[str] = field(default_factory=list)
    checks: list[ComparableCheck] = field(default_factory=list)
    rules: str | None = None


@dataclass
class MLPerf:
    """MLPerf Storage's checkpointing figures of a workload run (report.mlperf)."""

    dlio: DlioFigures | None = None
    mlpstorage: MlpstorageFigures | None = None
    definitions: dict[str, str] | None = None
    comparable: Comparable | None = None


@dataclass
class CollectiveResult:
    """One collective at one message size, nccl-tests' figures (backends.comms.measure.Measurement)."""

    collective: str = ""
    size: int = 0
    count: int | None = None
    iters: int | None = None
    time_us: float | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None


@dataclass
class Comms:
    """A comms sweep (backends.comms.worker): the comms backend's report, or a --preflight before the benchmark."""

    dist_backend: str | None = None
    world_size: int | None = None
    nnodes: int | None = None
    device: str | None = None
    dtype: str | None = None
    iters: int | None = None
    warmup: int | None = None
    results: list[CollectiveResult] = field(default_factory=list)
    unsupported: dict[str, str] | None = None


@dataclass
class RepeatFigure:
    """One headline figure over the repetitions of a --repeat series (report.series.spread)."""

    n: int = 0
    median: float | None = None
    min: float | None = None
    max: float | None = None
    cv: float | None = None  # sample standard deviation / mean


@dataclass
class RepeatStats:
    """A --repeat series' spread of each headline figure (report.metrics.HEADLINE)."""

    save_block_time: RepeatFigure | None = None
    save_total_time: RepeatFigure | None = None
    save_bandwidth_in_mbps: RepeatFigure | None = None
    load_time: RepeatFigure | None = None
    load_bandwidth_in_mbps: RepeatFigure | None = None


@dataclass
class Repetition:
    """One repetition of a --repeat series: its run and its headline figures (steady saves, its load)."""

    repetition: int = 0
    dir: str | None = None
    status: str | None = None
    save_block_time: float | None = None
    save_total_time: float | None = None
    save_bandwidth_in_mbps: float | None = None
    load_time: float | None = None
    load_bandwidth_in_mbps: float | None = None


@dataclass(frozen=True)
class ModelSize:
    """A workload run's model and how its checkpoint falls on ranks (from its config section)."""

    kind: str
    """dense, MoE, with +MLA, +MTPn."""
    parameters: int | None
    active_parameters: int | None
    rank_bytes_min: int
    rank_bytes_median: int
    rank_bytes_max: int
    largest_rank: int


@dataclass
class Report:
    """report.json: the Primus checkpoint tool's keys first, then ours."""

    world_size: int | None = None
    data_parallel_size: int | None = None
    ckpt_format: str | None = None
    ckpt_fully_parallel_save: bool | None = None
    ckpt_fully_parallel_load: bool | None = None
    async_save: bool | None = None
    save: str | None = None
    save_interval: int | None = None
    optimizer: str | None = None
    use_distributed_optimizer: bool | None = None
    params_dtype: str | None = None
    main_params_dtype: str | None = None
    exp_avg_dtype: str | None = None
    exp_avg_sq_dtype: str | None = None
    save_block_time: float | None = None
    save_total_time: float | None = None
    save_total_time_at_least: float | None = None  # the last complete save's, where its total_time is null
    accurate: bool | None = None
    num_saved: int | None = None
    load_time: float | None = None
    iter_folder_size: int | None = None
    save_bandwidth_in_mbps: float | None = None
    load_bandwidth_in_mbps: float | None = None
    saves: list[SaveRecord] | None = None  # None: a report of no checkpoint (a comms run, a follower node)
    stats: SaveStats | None = None
    stats_by_tier: dict[str, SaveStats] | None = None  # tier -> its saves' `stats`, where a run saved more than one
    load: LoadRecord | None = None
    loads: list[LoadRecord] | None = None
    verified: bool | None = None
    verification: Verification | None = None
    units: dict[str, str] | None = None
    time_source: str | None = None
    time_resolution_s: float | None = None
    environment: Section | None = None
    notes: list[str] = field(default_factory=list)
    config: Section | None = None
    unmatched_ends: list[Section] | None = None
    mlperf: MLPerf | None = None
    preflight: Comms | None = None
    comms: Comms | None = None
    training: Training | None = None
    storage_baseline: StorageBaseline | None = None
    save_fraction_of_peak: float | None = None
    load_fraction_of_peak: float | None = None
    save_above_peak: AbovePeak | None = None  # the steady save beat the baseline: no fraction of peak
    load_above_peak: AbovePeak | None = None
    not_cleaned_up: list[str] | None = None
    measurement: Measurement | None = None
    projection: Projection | None = None
    advice: Advice | None = None
    repeat_stats: RepeatStats | None = None
    repeats: list[Repetition] | None = None
    run: RunSection | None = None
    sources: list[str] | None = None  # the logs of this run, when logs of several runs are reported apart
    schema_version: int | None = None

    @classmethod
    def from_json(cls, data: dict) -> Report:
        """A report.json, typed; raises SchemaError for a key that is not declared or a wrong type."""
        return _build(cls, data, "report")

    @property
    def every_load(self) -> list[LoadRecord]:
        """Every load: `loads` (several load calls, a --repeat series), else the one `load`."""
        return self.loads or ([self.load] if self.load else [])

    @property
    def steady(self) -> StatsBlock:
        """The steady save figures (report.metrics.save_stats' `excluding_first`): over the saves after the
        first of each process, or over every save when no process saved twice; empty without a complete save."""
        if self.stats is None:
            return StatsBlock()
        return self.stats.excluding_first or StatsBlock(self.stats.block_time, self.stats.total_time,
                                                        self.stats.bandwidth, self.stats.total_time_at_least)

    def steady_median(self, figure: str) -> float | None:
        """The steady median of `figure` ("block_time", "total_time", "bandwidth" or "total_time_at_least")."""
        stat = getattr(self.steady, figure)
        return None if stat is None else stat.median

    @property
    def first_save_apart(self) -> FirstSave | None:
        """The first save when later saves are summarised without it."""
        return self.stats.first_save if self.stats is not None and self.stats.excluding_first else None

    def first_saves(self) -> list[SaveRecord]:
        """The first complete save of each process when one saved twice (a --repeat series' processes are
        its repetitions), else none: report.metrics.steady_saves' rule."""
        first, later = split_first_saves([save for save in self.saves or [] if save.complete],
                                         lambda save: save.repetition)
        return first if later else []

    def compared(self, metric: Metric) -> float | None:
        """The figure runs are compared on (sweeps, --compare, --repeat): a save's steady median, falling
        back to the top-level value (a log without stats); a load's top-level value."""
        if metric.steady_figure is not None:
            value = self.steady_median(metric.steady_figure)
            if value is not None:
                return value
        return getattr(self, metric.key)

    @property
    def says_fsync(self) -> bool:
        """Whether the report knows if its saves were fsynced (a run does; a log does not say)."""
        return self.measurement is not None or "fsync" in (self.config or {})

    @property
    def fsync(self) -> bool | None:
        """Whether a save counted as complete only once fsynced (None: object storage, or not known: see
        `says_fsync`)."""
        if self.measurement is not None:
            return self.measurement.fsync
        return (self.config or {}).get("fsync")

    @property
    def workload(self) -> str | None:
        """The workload whose checkpoint a workload run wrote (--workload), None for other runs."""
        return (self.config or {}).get("workload")

    @property
    def engine(self) -> str | None:
        """The checkpoint engine of a workload run (--engine), None for other runs."""
        return (self.config or {}).get("engine")

    @property
    def experiment(self) -> str | None:
        """The experiment file a run came from, beside its exp_name (`exp_name (file.yaml)`); None: no
        experiment (DLIO's workloads, DCP, Lightning, logs)."""
        return (self.config or {}).get("experiment")

    @property
    def model_size(self) -> ModelSize | None:
        """A workload run's model, parameters and bytes per rank over the whole job; None for other runs."""
        config = self.config or {}
        if config.get("model") is None or config.get("rank_bytes_max") is None:
            return None
        return ModelSize(config["model"], config.get("parameters"), config.get("active_parameters"),
                         config["rank_bytes_min"], config["rank_bytes_median"], config["rank_bytes_max"],
                         config["largest_rank"])

    @property
    def subset_of(self) -> int | None:
        """The ranks of the whole job when a workload run ran a subset of them (--subset), else None."""
        config = self.config or {}
        return config.get("job_world_size") if config.get("subset") else None

    def steady_phases(self) -> dict[str, float]:
        """Each phase's median seconds (its slowest rank's) over the steady saves that recorded phases (the
        saves after the first of each process, or all: report.metrics' rule); a phase a save did not run
        counts 0 for it."""
        complete = [save for save in self.saves or [] if save.complete]
        _first, later = split_first_saves(complete, lambda save: save.repetition)
        saves = [save for save in later or complete if save.phases]
        names = dict.fromkeys(name for save in saves for name in save.phase_seconds())
        return {name: round(statistics.median(save.phase_seconds().get(name, 0.0) for save in saves), 6)
                for name in names}

    @property
    def assumes_constant_structure(self) -> bool:
        """megatron-core's ckpt_assume_constant_structure: later saves reuse the first save's plan."""
        return bool((self.config or {}).get("ckpt_assume_constant_structure"))


@dataclass
class LogRuns:
    """ckpt-report of logs that are not one job's (report.assembly): each run's report, with its `sources`,
    and why they are apart."""

    runs: list[Report] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict) -> LogRuns:
        return _build(cls, data, "report")


def _unwrap(annotation) -> tuple[list, bool]:
    """The alternatives of a type and whether None is one of them."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        options = list(typing.get_args(annotation))
        return [o for o in options if o is not type(None)], type(None) in options
    return [annotation], False


def _fields(cls) -> dict[str, tuple[str, Any]]:
    """{key in report.json: (field name, type)}; a key that is a Python keyword (`pass`) is the field with a
    trailing underscore (`pass_`)."""
    hints = typing.get_type_hints(cls, vars(sys.modules[__name__]))
    return {(name[:-1] if name.endswith("_") and keyword.iskeyword(name[:-1]) else name): (name, hint)
            for name, hint in hints.items()}


def _build(annotation, value, where: str):
    options, nullable = _unwrap(annotation)
    if value is None:
        if nullable:
            return None
        raise SchemaError(f"{where}: null where {annotation} is expected")
    for option in options:
        if dataclasses.is_dataclass(option):
            if not isinstance(value, dict):
                raise SchemaError(f"{where}: expected an object, got {type(value).__name__}")
            fields = _fields(option)
            unknown = sorted(set(value) - set(fields))
            if unknown:
                raise SchemaError(f"{where}: keys not in the report's types: {', '.join(unknown)}")
            try:
                return option(**{fields[key][0]: _build(fields[key][1], item, f"{where}.{key}")
                                 for key, item in value.items()})
            except TypeError as error:  # a field without a default is missing
                raise SchemaError(f"{where}: {error}") from None
        origin = typing.get_origin(option)
        if origin is list:
            (item_type,) = typing.get_args(option)
            if not isinstance(value, list):
                raise SchemaError(f"{where}: expected a list, got {type(value).__name__}")
            return [_build(item_type, item, f"{where}[{index}]") for index, item in enumerate(value)]
        if origin is dict and dataclasses.is_dataclass(typing.get_args(option)[1]):  # named entries of one type
            if not isinstance(value, dict):
                raise SchemaError(f"{where}: expected an object, got {type(value).__name__}")
            return {key: _build(typing.get_args(option)[1], item, f"{where}.{key}") for key, item in value.items()}
        if origin is dict or option is Any:
            return value
        if option is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        if isinstance(value, option) and not (option is int and isinstance(value, bool)):
            return value
    raise SchemaError(f"{where}: {value!r} is not {annotation}")


def _schema(annotation, definitions: dict) -> dict:
    options, nullable = _unwrap(annotation)
    alternatives = []
    for option in options:
        if dataclasses.is_dataclass(option):
            name = option.__name__
            if name not in definitions:
                definitions[name] = {}  # a placeholder while its fields are made (recursion)
                fields = _fields(option)
                without_default = {f.name for f in dataclasses.fields(option)
                                   if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
                definitions[name] = {
                    "type": "object", "description": (option.__doc__ or "").strip(),
                    "properties": {key: _schema(hint, definitions) for key, (_, hint) in fields.items()},
                    **({"required": [key for key, (field_name, _) in fields.items() if field_name in without_default]}
                       if without_default else {}),
                    "additionalProperties": False}
            alternatives.append({"$ref": f"#/$defs/{name}"})
        elif typing.get_origin(option) is list:
            alternatives.append({"type": "array", "items": _schema(typing.get_args(option)[0], definitions)})
        elif typing.get_origin(option) is dict and dataclasses.is_dataclass(typing.get_args(option)[1]):
            alternatives.append({"type": "object",
                                 "additionalProperties": _schema(typing.get_args(option)[1], definitions)})
        elif typing.get_origin(option) is dict or option is Any:
            alternatives.append({"type": "object"} if option is not Any else {})
        else:
            alternatives.append({"type": {int: "integer", float: "number", str: "string", bool: "boolean"}[option]})
    if nullable:
        alternatives.append({"type": "null"})
    return alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}


def json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of report.json, made from `Report`."""
    definitions: dict = {}
    root = _schema(Report, definitions)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "ckpt-bench/report.schema.json",
            "title": "ckpt-bench report", "description": f"schema_version {SCHEMA_VERSION}", **root,
            "$defs": definitions}


if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2))
