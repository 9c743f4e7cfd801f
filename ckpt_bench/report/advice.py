"""Checkpoint interval advice and goodput, from the measured costs.

Given how often the job fails (its mean time between failures M) and what the benchmark measured --
the checkpoint cost C (what a save costs training) and the restart cost R (the load plus relaunch and
initialisation) -- how often should the job checkpoint, and how much of its time goes to useful work?

    Young (1974):  tau = sqrt(2 C M)
    Daly (2006):   tau = sqrt(2 C M) (1 + sqrt(C / 2M) / 3 + (C / 2M) / 9) - C     for C < 2M, else M
    goodput(tau) = tau / (M e^(R/M) (e^((tau + C)/M) - 1))

tau is the compute time between two checkpoints. goodput is Daly's expected-time model: failures are a
Poisson process (exponential times between failures, rate 1/M) that can strike during work, during a
save and during a restart; each failure loses the work since the last checkpoint, then costs R. With
M -> infinity goodput -> tau / (tau + C); with C -> 0 it tends to e^(-R/M).

Limits (also in docs/advice.md): failures are not exponential in practice (infant mortality, correlated
failures); C and R are taken as constant, measured at this scale (the what-if table keeps them for
larger jobs: weak scaling, storage bandwidth growing with the job); an async save's checkpoint only
counts once written, which this model does not charge (the work lost on a failure grows by up to the
save's total time); the iteration time comes from the benchmark's own training loop when measured.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import ClassVar

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.options import Flag, Options
from ckpt_bench.report.metrics import STEADY, steady_saves

HOUR_S = 3600.0
# Relaunch and initialisation before the load starts: the scheduler's requeue, process and container
# start-up, imports, process-group and NCCL set-up, the data loader. Five minutes is a typical order
# of magnitude for a large job; measure yours and give --restart-overhead.
DEFAULT_RESTART_OVERHEAD_S = 300.0
# Job sizes of the what-if table (with --gpu-mttf-hours), beside the one given.
WHAT_IF_GPUS = (1024, 8192, 32768)


@dataclass
class AdviceOptions(Options):
    """How often the job fails, and what a restart costs beyond the load: the checkpoint interval advice."""

    section: ClassVar[str] = "Checkpoint interval advice (Young / Daly) and goodput"

    mtbf_hours: float | None = Flag(
        ("--mtbf-hours",), "Mean time between failures of the whole job, in hours: adds `advice` (checkpoint "
        "interval, goodput) to the report.", type=float, metavar="H").field()
    gpu_mttf_hours: float | None = Flag(
        ("--gpu-mttf-hours",), "Mean time to failure of one GPU, in hours: job MTBF = H / --gpus (default: the "
        "run's world size); adds a what-if table for larger jobs.", type=float, metavar="H").field()
    gpus: int | None = Flag(("--gpus",), "GPUs of the job whose MTBF --gpu-mttf-hours gives.", type=int, min=1,
                            metavar="N").field()
    restart_overhead: float | None = Flag(
        ("--restart-overhead",), f"Seconds a restart costs beyond the load (relaunch, initialisation; default "
        f"{DEFAULT_RESTART_OVERHEAD_S:g}).", type=float, metavar="S").field()
    checkpoint_budget: float | None = Flag(
        ("--checkpoint-budget",), "The share of the job's time checkpointing may cost, in percent, at Daly's "
        "interval: the advice gives the write bandwidth the job needs for it (with --mtbf-hours or "
        "--gpu-mttf-hours).", type=float, metavar="PCT").field()

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("mtbf_hours", "gpu_mttf_hours"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"--{name.replace('_', '-')} {value:g}: must be a positive number of hours")
        if self.mtbf_hours is not None and self.gpu_mttf_hours is not None:
            raise ConfigError("--mtbf-hours and --gpu-mttf-hours both give the job's MTBF: give one of them")
        if self.gpus is not None and self.gpu_mttf_hours is None:
            raise ConfigError("--gpus N needs --gpu-mttf-hours H (job MTBF = H / N)")
        if self.gpus is not None and self.gpus < 1:
            raise ConfigError(f"--gpus {self.gpus}: must be at least 1")
        if self.restart_overhead is not None:
            if not (math.isfinite(self.restart_overhead) and self.restart_overhead >= 0):
                raise ConfigError(f"--restart-overhead {self.restart_overhead:g}: must be a number of seconds >= 0")
            if not self.asked:
                raise ConfigError("--restart-overhead S needs --mtbf-hours or --gpu-mttf-hours")
        if self.checkpoint_budget is not None:
            if not (math.isfinite(self.checkpoint_budget) and 0 < self.checkpoint_budget < 100):
                raise ConfigError(f"--checkpoint-budget {self.checkpoint_budget:g}: a percentage between 0 and 100")
            if not self.asked:
                raise ConfigError("--checkpoint-budget PCT needs --mtbf-hours or --gpu-mttf-hours")

    @property
    def asked(self) -> bool:
        return self.mtbf_hours is not None or self.gpu_mttf_hours is not None

    @property
    def restart_overhead_s(self) -> float:
        return DEFAULT_RESTART_OVERHEAD_S if self.restart_overhead is None else self.restart_overhead


# --- the formulas ---------------------------------------------------------------------------------


def young_interval(cost: float, mtbf: float) -> float:
    """Young's first-order optimum: sqrt(2 C M) seconds of work between checkpoints."""
    return math.sqrt(2 * cost * mtbf)


def daly_interval(cost: float, mtbf: float) -> float:
    """Daly's higher-order optimum (2006): sqrt(2CM)(1 + sqrt(C/2M)/3 + (C/2M)/9) - C for C < 2M, else M."""
    if cost >= 2 * mtbf:
        return mtbf
    ratio = cost / (2 * mtbf)
    return max(0.0, math.sqrt(2 * cost * mtbf) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - cost)


def goodput(interval: float, cost: float, restart: float, mtbf: float) -> float:
    """The fraction of wall-clock time that is useful work, checkpointing every `interval` seconds of
    work (Daly's expected-time model: exponential failures, also during saves and restarts)."""
    if interval <= 0:
        return math.exp(-restart / mtbf)  # the limit of checkpointing continuously
    try:
        return interval / (mtbf * math.exp(restart / mtbf) * math.expm1((interval + cost) / mtbf))
    except OverflowError:  # a restart or a save many MTBFs long: the job makes no progress
        return 0.0


def job_mtbf(gpu_mttf_s: float, gpus: int) -> float:
    """A job fails when any of its GPUs does: independent exponential failures add their rates."""
    return gpu_mttf_s / gpus


# --- the advice of a report -----------------------------------------------------------------------


def _median(values) -> float | None:
    values = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return statistics.median(values) if values else None


def per_save_training_cost(training: dict) -> dict[int, float]:
    """{iteration: seconds} each save cost the training loop, from `training.around_saves` (Megatron's
    --training-impact): the saving iteration's time and the next one's (an async save's write competes
    with it), each beyond the median iteration without saves. The next iteration counts only when it
    saves nothing itself; {} when the section has no per-save times."""
    typical = training.get("iteration_time_without_saves_median")
    around = training.get("around_saves") or []
    if not isinstance(typical, (int, float)) or not around:
        return {}
    saving = {row.get("iteration") for row in around}
    costs = {}
    for row in around:
        cost = row["iteration_time"] - typical
        if isinstance(row.get("next_iteration_time"), (int, float)) and row["iteration"] + 1 not in saving:
            cost += row["next_iteration_time"] - typical
        costs[row["iteration"]] = cost
    return costs


def checkpoint_cost(report: dict) -> tuple[float | None, str, list[str]]:
    """(C in seconds, where it came from, notes): what a save costs training, one definition for sync and async
    saves. Where the training loop measured it (--training-impact, Lightning --steps-per-save), that: the
    time training lost to each save, which for a sync save holds more than the save call (the next iteration
    slowed by the write-back, say). Else the part of the save training waits for: a sync save's total time,
    an async save's block time. Every source is the steady figure (`report.metrics`: the median of the saves
    after the first, whose one-off start-up a long job pays once)."""
    notes: list[str] = []
    saves = [s for s in report.get("saves") or [] if s.get("complete")]
    later = steady_saves(saves)
    which = STEADY if len(saves) > 1 else "the one complete save"
    if not saves:
        return None, "no complete save", ["no complete save: there is no checkpoint cost to advise from"]
    asynchronous = report.get("async_save") is True
    kind = "async saves" if asynchronous else "synchronous saves"
    training = report.get("training") if isinstance(report.get("training"), dict) else {}
    per_save, source = _measured_cost(later, saves, training, which)
    if per_save is not None and per_save > 0:
        return per_save, f"{source} ({kind})", notes
    waited = "block" if asynchronous else "total"
    if per_save is not None:
        notes.append(f"the measured training-visible cost of a save is {per_save:.3g} s (within noise): the "
                     f"save {waited} time is used instead")
    unmeasured = ("the training-visible cost was not measured (--training-impact, Lightning --steps-per-save)"
                  if per_save is None else "the measured cost was within noise")
    if not asynchronous:
        return (_median(s.get("total_time") for s in later),
                f"save total time ({which}; synchronous saves: training waits for the whole save): {unmeasured}",
                notes)
    return (_median(s.get("block_time") for s in later),
            f"save block time ({which}; async saves): {unmeasured}, so the background write's interference with "
            "training is not counted", notes)


def _measured_cost(later: list[dict], saves: list[dict], training: dict, which: str) -> tuple[float | None, str]:
    """A save's training-visible cost, steady, from the finest measurement the report has."""
    per_save = _median(s.get("save_impact_time") for s in later)
    if per_save is not None:
        return per_save, f"saves[].save_impact_time ({which}): the training-visible cost of each save"
    steady = {save.get("iteration") for save in later}
    around = per_save_training_cost(training)
    if around and steady & set(around):
        return (_median(cost for iteration, cost in around.items() if iteration in steady),
                f"training.around_saves ({which}): each save's iteration and the next beyond the median iteration "
                "without saves, the training-visible cost of each save")
    impact, count = training.get("save_impact_time"), training.get("saves")
    if not (isinstance(impact, (int, float)) and isinstance(count, int) and count > 0):
        return None, ""
    if len(saves) < 2:
        return impact / count, "training.save_impact_time / training.saves: the training-visible cost of the save"
    # The loop's total cost holds the first save's one-off start-up: take out what its blocking part
    # cost beyond a steady save's (what the loop cannot say per save).
    first_extra = max(0.0, (saves[0].get("block_time") or 0.0) - (_median(s.get("block_time") for s in later) or 0.0))
    return ((impact - first_extra) / count,
            f"(training.save_impact_time - the first save's block time beyond the {STEADY}) / training.saves: "
            "the training-visible cost of a steady save, measured with and without saves")


def iteration_time(report: dict) -> tuple[float | None, str | None]:
    """(seconds per training iteration, where from), from the `training` section when measured."""
    training = report.get("training") if isinstance(report.get("training"), dict) else {}
    median = training.get("iteration_time_without_saves_median")
    if isinstance(median, (int, float)) and median > 0:
        return float(median), "training.iteration_time_without_saves_median"
    fit, steps = training.get("fit_time_without_saves"), training.get("train_steps")
    if isinstance(fit, (int, float)) and isinstance(steps, int) and steps > 0 and fit > 0:
        return fit / steps, "training.fit_time_without_saves / training.train_steps"
    return None, None


def _no_logged_iteration_time(report: dict) -> str:
    """Why a log's report has no iteration time: no iteration-time line, or too few to time an interval."""
    training = report.get("training") if isinstance(report.get("training"), dict) else {}
    lines = training.get("iteration_lines")
    if not lines:
        return ("the log has no iteration-time line (Megatron-LM's, Primus's or Megatron-DeepSpeed's 'elapsed time "
                "per iteration'): the intervals are in seconds only")
    return (f"the log's {lines} iteration-time line{'s' * (lines > 1)} ('elapsed time per iteration') leave no "
            "interval to time: each line is the average since the line before, the first line of each process "
            "is its start-up and an interval in which a save started pays for the save; it takes 2 lines of one "
            "process with no save started between them: the intervals are in seconds only")


def configured_interval(report: dict) -> int | None:
    """The run's own save interval in iterations (Megatron's save_interval, Lightning's steps_per_save)."""
    training = report.get("training") if isinstance(report.get("training"), dict) else {}
    for value in (report.get("save_interval"), training.get("steps_per_save")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _iterations(seconds: float | None, per_iteration: float | None) -> int | None:
    if seconds is None or per_iteration is None:
        return None
    return max(1, round(seconds / per_iteration))


def job_gpus(report: dict) -> tuple[int | None, str]:
    """The GPUs (ranks) of the job the report is about, and where that comes from: the whole job's where the run
    was a part of it (a --subset: `config.job_world_size`), else the run's world size."""
    config = report.get("config") if isinstance(report.get("config"), dict) else {}
    job = config.get("job_world_size")
    if isinstance(job, int) and not isinstance(job, bool) and job > 0:
        ran = report.get("world_size")
        return job, ("the job's size (config.job_world_size)" if job == ran else
                     f"the job's size (config.job_world_size), not the {ran} ranks that ran")
    ran = report.get("world_size")
    return (ran if isinstance(ran, int) and ran > 0 else None), "the run's world size"


def projected_range(time: dict | None, key: str = "range_s") -> tuple[float | None, float | None]:
    """A projected time's (low, high): equal for a point, high None where only a lower bound is known; (None,
    None) where it has none."""
    if not isinstance(time, dict):
        return None, None
    low, high = ((time.get(key) or []) + [None, None])[:2]
    if low is None or (high is None and not low):
        return None, None
    return low, high


def bound_of(low: float | None, high: float | None) -> str | None:
    """What a (low, high) figure is: "point", "range" or "at least" (None: unknown)."""
    if low is None:
        return None
    if high is None:
        return "at least"
    return "point" if math.isclose(low, high, rel_tol=1e-6) else "range"


def steady_save(projection: dict) -> dict:
    """The projection's later saves (a process's third on), or its one save where it has no such split."""
    return projection.get("steady_save") or projection.get("save") or {}


def projected_costs(report: dict) -> tuple[float | None, str, float | None, str, list[str]]:
    """(C, its source, the load part of R, its source, notes) from the report's projection of the whole job
    (`projection.steady_save`: a process's third and later saves, what most checkpoints of a long job cost, at
    the experiment's settings; an async save's block time), or Nones where it has none."""
    projection = report.get("projection")
    if not isinstance(projection, dict) or projection.get("error"):
        return None, "", None, "", []
    job = projection.get("job") or {}
    save = steady_save(projection)
    asynchronous = bool(job.get("async_save"))
    cost_range = projected_range(save, "block_range_s" if asynchronous else "range_s")
    load_range = projected_range(projection.get("load"))
    cost, load = cost_range[0], load_range[0]
    ranks = job.get("ranks")
    notes = []
    where = f"projected for the whole job of {ranks:,} ranks" if isinstance(ranks, int) else "projected"
    cost_from = (f"{'save block time' if asynchronous else 'save total time'} {where} (projection.steady_save, "
                 f"bound by {save.get('binding')})")
    cost_kind, load_kind = bound_of(*cost_range), bound_of(*load_range)
    if cost_kind == "at least":
        notes.append("the projected checkpoint cost is a lower bound (an input of the projection is a bound or "
                     "unknown: projection.inputs): the interval is a lower bound too")
    elif cost_kind == "range":
        notes.append("the projected checkpoint cost is a range (extrapolated global steps with their fit's error, or "
                     "a storage ceiling not reached): C, the intervals and the goodput are given as ranges; the "
                     "single figures are at C's low end")
    if load_kind == "at least":
        notes.append("the projected load is a lower bound: so is the restart cost")
    elif load_kind == "range":
        notes.append("the projected load is a range: so is the restart cost (its single figure is the low end)")
    return cost, cost_from, load, f"load {where} (projection.load)", notes


def advise(report: dict, options: AdviceOptions) -> dict:
    """The report's `advice` section. Raises ConfigError when the MTBF cannot be worked out."""
    notes: list[str] = []
    if options.mtbf_hours is not None:
        mtbf, mtbf_from = options.mtbf_hours * HOUR_S, f"--mtbf-hours {options.mtbf_hours:g}"
        gpus = None
    else:
        gpus, by = job_gpus(report)
        gpus, by = (options.gpus, "--gpus") if options.gpus else (gpus, by)
        if not isinstance(gpus, int) or gpus < 1:
            raise ConfigError("--gpu-mttf-hours: the report does not give the world size; give --gpus N")
        mtbf = job_mtbf(options.gpu_mttf_hours * HOUR_S, gpus)
        mtbf_from = f"--gpu-mttf-hours {options.gpu_mttf_hours:g} / {gpus:,} GPUs ({by})"

    projected_cost, projected_from, projected_load, load_from, projected_notes = projected_costs(report)
    if projected_cost is not None:
        cost, cost_from, cost_notes = projected_cost, projected_from, projected_notes
    else:
        cost, cost_from, cost_notes = checkpoint_cost(report)
    notes += cost_notes
    load = report.get("load_time") if projected_load is None else projected_load
    overhead = options.restart_overhead_s
    restart = (load if isinstance(load, (int, float)) else 0.0) + overhead
    if projected_load is not None:
        restart_from = f"{load_from} {load:g} s + restart overhead {overhead:g} s"
    else:
        restart_from = (f"load time {load:g} s + restart overhead {overhead:g} s" if isinstance(load, (int, float))
                        else f"restart overhead {overhead:g} s (no load was measured)")
    per_iteration, iteration_from = iteration_time(report)
    configured = configured_interval(report)

    advice = {
        "checkpoint_cost_s": _round(cost, 4),
        "checkpoint_cost_from": cost_from,
        "restart_cost_s": _round(restart),
        "restart_cost_from": restart_from,
        "restart_overhead_s": overhead,
        "mtbf_s": _round(mtbf, 1),
        "mtbf_from": mtbf_from,
        "young_interval_s": None,
        "daly_interval_s": None,
        "goodput_at_optimum": None,
        "iteration_time_s": _round(per_iteration, 4),
        "iteration_time_from": iteration_from,
        "young_interval_iterations": None,
        "daly_interval_iterations": None,
        "configured_interval_iterations": configured,
        "configured_interval_s": None,
        "goodput_at_configured": None,
        "model": "Young: sqrt(2CM); Daly 2006: sqrt(2CM)(1 + sqrt(C/2M)/3 + C/18M) - C (M if C >= 2M); "
                 "goodput(tau) = tau / (M e^(R/M) (e^((tau+C)/M) - 1)), exponential failures",
    }
    advice.update(_ranges(report, cost, restart, overhead, mtbf, projected_cost is not None,
                          projected_load is not None))
    if cost is not None:
        young, daly = young_interval(cost, mtbf), daly_interval(cost, mtbf)
        advice.update(
            young_interval_s=_round(young), daly_interval_s=_round(daly),
            goodput_at_optimum=_round(goodput(daly, cost, restart, mtbf), 4),
            young_interval_iterations=_iterations(young, per_iteration),
            daly_interval_iterations=_iterations(daly, per_iteration),
        )
        if configured is not None and per_iteration is not None:
            configured_s = configured * per_iteration
            advice.update(configured_interval_s=_round(configured_s),
                          goodput_at_configured=_round(goodput(configured_s, cost, restart, mtbf), 4))
        total = _median(s.get("total_time") for s in steady_saves(report.get("saves") or []))
        if report.get("async_save") is True and total is not None and daly < total:
            notes.append(f"the optimum ({daly:.3g} s) is shorter than an async save's total time ({total:.3g} s): "
                         "saves would overlap; checkpoint no more often than every save's total time")
        if cost >= 2 * mtbf:
            notes.append("the checkpoint costs more than twice the MTBF: Daly's interval is the MTBF itself, and "
                         "the job makes little progress")
        if per_iteration is None and report.get("run") is None:
            notes.append(_no_logged_iteration_time(report))
        elif per_iteration is None:
            notes.append("no iteration time was measured (Megatron --training-impact, Lightning --steps-per-save): "
                         "the intervals are in seconds only")
    if options.gpu_mttf_hours is not None:
        advice["what_if"] = what_if(options.gpu_mttf_hours * HOUR_S, cost, restart,
                                    sorted({*WHAT_IF_GPUS, gpus}), per_iteration)
        if projected_cost is not None:
            notes.append(f"what if: every row uses C and R projected at the job's {gpus:,} GPUs; at another size "
                         "the checkpoint's layout, its hosts and its global steps differ (project that job with "
                         "--job-ranks)")
    if options.checkpoint_budget is not None:
        advice["checkpoint_budget"] = bandwidth_needed(report, options.checkpoint_budget / 100, cost, restart, mtbf)
    rows = purchase_rows(report, overhead, mtbf, options.checkpoint_budget)
    if rows:
        advice["purchase"] = rows
    advice["notes"] = notes
    return advice


def _ranges(report: dict, cost: float | None, restart: float, overhead: float, mtbf: float, cost_projected: bool,
            load_projected: bool) -> dict:
    """C, R, Daly's interval and the goodput at it as (low, high) where the projection gives a range or a lower
    bound (an extrapolated or cut-short step, a storage ceiling not reached), each with what it is: "point",
    "range" or "at least"; goodput's worst case is at the high C and R (None where they are open)."""
    projection = report.get("projection") if isinstance(report.get("projection"), dict) else {}
    cost_range: tuple[float | None, float | None] = (cost, cost)
    if cost_projected:
        asynchronous = bool((projection.get("job") or {}).get("async_save"))
        cost_range = projected_range(steady_save(projection), "block_range_s" if asynchronous else "range_s")
    restart_range: tuple[float | None, float | None] = (restart, restart)
    if load_projected:
        low, high = projected_range(projection.get("load"))
        restart_range = (restart, None if high is None else high + overhead) if low is not None else (restart, None)
    section: dict = {"checkpoint_cost_range_s": [_round(v, 4) for v in cost_range],
                     "checkpoint_cost_is": bound_of(*cost_range),
                     "restart_cost_range_s": [_round(v) for v in restart_range],
                     "restart_cost_is": bound_of(*restart_range)}
    section.update(_optimum_ranges(cost_range, restart_range, mtbf))
    return section


def _optimum_ranges(cost: tuple[float | None, float | None], restart: tuple[float, float | None],
                    mtbf: float) -> dict:
    """Daly's interval over C's (low, high), and the goodput there as [worst, best]: the best at C's and R's low
    ends, the worst at their high ends (None where one is open); both [None, None] without a C."""
    low_cost, high_cost = cost
    if low_cost is None:
        return {"daly_interval_range_s": [None, None], "goodput_at_optimum_range": [None, None]}
    best = goodput(daly_interval(low_cost, mtbf), low_cost, restart[0], mtbf)
    worst = (None if high_cost is None or restart[1] is None else
             goodput(daly_interval(high_cost, mtbf), high_cost, restart[1], mtbf))
    return {"daly_interval_range_s": [_round(daly_interval(low_cost, mtbf)),
                                      None if high_cost is None else _round(daly_interval(high_cost, mtbf))],
            "goodput_at_optimum_range": [None if worst is None else _round(worst, 4), _round(best, 4)]}


def purchase_rows(report: dict, overhead: float, mtbf: float, budget_percent: float | None) -> list[dict]:
    """The purchase table's advice: for each storage the projection priced (`projection.purchase`), C (its later
    saves; an async save's block time), R, Daly's interval, the goodput there, and whether checkpointing costs at
    most the budget's share ("unknown" where a bound decides it), each a range where its inputs are."""
    projection = report.get("projection") if isinstance(report.get("projection"), dict) else {}
    asynchronous = bool((projection.get("job") or {}).get("async_save"))
    rows = []
    for row in projection.get("purchase") or []:
        cost_low, cost_high = projected_range(row.get("steady_save"), "block_range_s" if asynchronous else "range_s")
        load_low, load_high = projected_range(row.get("load"))
        restart_low = (load_low or 0.0) + overhead
        restart_high = None if load_low is not None and load_high is None else (load_high or 0.0) + overhead
        entry = {"storage_write_gbps": row.get("storage_write_gbps"), "storage_read_gbps": row.get("storage_read_gbps"),
                 "checkpoint_cost_range_s": [_round(cost_low, 4), _round(cost_high, 4)],
                 "restart_cost_range_s": [_round(restart_low), _round(restart_high)],
                 **_optimum_ranges((cost_low, cost_high), (restart_low, restart_high), mtbf), "budget_met": None}
        if cost_low is not None and budget_percent is not None:
            allowed = largest_cost(budget_percent / 100, restart_low, mtbf)
            entry["budget_met"] = (False if cost_low > allowed else
                                   True if cost_high is not None and cost_high <= allowed else "unknown")
        rows.append(entry)
    return rows


def lost_share(cost: float, restart: float, mtbf: float) -> float:
    """The share of the job's time checkpointing costs at Daly's interval: what goodput loses beyond what
    failures alone cost (goodput with a free checkpoint, C -> 0, is e^(-R/M))."""
    free = math.exp(-restart / mtbf)
    return 1.0 if free == 0 else 1 - goodput(daly_interval(cost, mtbf), cost, restart, mtbf) / free


def largest_cost(share: float, restart: float, mtbf: float) -> float:
    """The largest checkpoint cost C whose lost share at Daly's interval is at most `share` (bisection: the
    share grows with C)."""
    low, high = 0.0, 2 * mtbf
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if lost_share(middle, restart, mtbf) <= share else (low, middle)
    return low


def bandwidth_needed(report: dict, share: float, cost: float | None, restart: float, mtbf: float) -> dict:
    """The inverse question: the write bandwidth the job needs so that checkpointing at Daly's interval costs at
    most `share` of its time. From the projection where the report has one (its save's global steps are fixed
    costs; the transfer has what is left: the whole job's bytes over it for the storage, the busiest host's
    for one host); else from this run's bytes, with no fixed cost known."""
    allowed = largest_cost(share, restart, mtbf)
    interval = daly_interval(allowed, mtbf)
    section: dict = {"percent": round(share * 100, 4), "max_checkpoint_cost_s": _round(allowed),
                     "daly_interval_s": _round(interval), "fixed_cost_s": None, "storage_write_gbps_needed": None,
                     "client_write_gbps_needed": None, "feasible": None, "from": None,
                     "current_checkpoint_cost_s": _round(cost, 4)}
    projection = report.get("projection") if isinstance(report.get("projection"), dict) else {}
    traffic = projection.get("save_traffic") or {}
    if traffic:
        save = steady_save(projection)
        steps = [term.get("range_s") or [0.0, 0.0] for term in save.get("terms") or [] if term.get("kind") == "step"]
        fixed = sum(low or 0.0 for low, _ in steps)
        fixed_high = None if any(high is None for _, high in steps) else sum(high for _, high in steps)
        total, busiest = traffic.get("bytes") or 0, (traffic.get("busiest_host") or {}).get("bytes") or 0
        source = ("projection.save_traffic (the whole job's bytes, the busiest host's) and the projected later "
                  "saves' global steps (projection.steady_save.terms), as fixed costs")
    else:
        saves = steady_saves(report.get("saves") or [])
        total = _median(s.get("bytes") for s in saves) or 0
        fixed, fixed_high, busiest = 0.0, 0.0, None
        source = "this run's steady save bytes, with no fixed cost known (no projection of the whole job)"
    section["from"] = source
    section["fixed_cost_s"] = _round(fixed)
    section["fixed_cost_range_s"] = [_round(fixed), _round(fixed_high)]
    section["share_counts"] = ("the job's time lost to checkpointing at Daly's interval beyond what failures alone "
                               "cost: the saves themselves and the work redone after each failure since the last "
                               "checkpoint (not the restarts, which failures cost anyway)")
    asynchronous = (projection.get("job") or {}).get("async_save") if projection else report.get("async_save")
    if asynchronous:
        # An async save's cost is its block time, which bandwidth does not change; its write must end before the
        # next save, at the async save's own optimum interval (Daly's at its block time), or saves overlap.
        interval = daly_interval(cost, mtbf) if cost else interval
        section["daly_interval_s"] = _round(interval)
        section["feasible"] = True
        section["why"] = ("async saves: the block time does not depend on the storage; the write must end within "
                          "the async save's own Daly interval (at its block time, current_checkpoint_cost_s), so "
                          "the bandwidth is the checkpoint's bytes over that interval")
        windows = (interval, interval)
    else:
        windows = (allowed - fixed, None if fixed_high is None else allowed - fixed_high)
        if windows[0] <= 0:
            section["feasible"] = False
            section["why"] = (f"the save's global steps alone take {fixed:.3g} s, more than the {allowed:.3g} s "
                              "this budget allows a checkpoint: no bandwidth meets it")
            return section
        certain = windows[1] is not None and windows[1] > 0
        section["feasible"] = True if certain else "unknown"
        section["why"] = ("a synchronous save: training waits for the whole save, so the bytes must move in the "
                          "checkpoint cost the budget allows, less the global steps")
        if not certain:
            section["why"] += (f"; the global steps are a bound ({fixed:.3g} s to "
                               f"{'an unknown upper end' if fixed_high is None else f'{fixed_high:.3g} s'}): "
                               "whether any bandwidth meets the budget is unknown")

    def needed(amount: float, window: float | None) -> float | None:
        return _significant(amount / window / 1e9) if amount and window and window > 0 else None

    section["storage_write_gbps_needed"] = needed(total, windows[0])
    section["client_write_gbps_needed"] = needed(busiest or 0, windows[0])
    section["storage_write_gbps_needed_range"] = [needed(total, windows[0]), needed(total, windows[1])]
    section["client_write_gbps_needed_range"] = [needed(busiest or 0, windows[0]), needed(busiest or 0, windows[1])]
    section["needed_is"] = "point" if windows[0] == windows[1] else "at least"
    return section


def _significant(value: float, digits: int = 4) -> float:
    return float(f"{value:.{digits}g}")


def what_if(gpu_mttf_s: float, cost: float | None, restart: float, gpu_counts, per_iteration: float | None,
            ) -> list[dict]:
    """The optimum and its goodput for jobs of other sizes, with this run's C and R (weak scaling)."""
    rows = []
    for gpus in gpu_counts:
        mtbf = job_mtbf(gpu_mttf_s, gpus)
        row = {"gpus": gpus, "mtbf_s": _round(mtbf, 1), "young_interval_s": None, "daly_interval_s": None,
               "daly_interval_iterations": None, "goodput_at_optimum": None}
        if cost is not None:
            daly = daly_interval(cost, mtbf)
            row.update(young_interval_s=_round(young_interval(cost, mtbf)), daly_interval_s=_round(daly),
                       daly_interval_iterations=_iterations(daly, per_iteration),
                       goodput_at_optimum=_round(goodput(daly, cost, restart, mtbf), 4))
        rows.append(row)
    return rows


def plan_advice(preview: dict, options: AdviceOptions) -> dict:
    """The advice of a plan (--plan with --mtbf-hours or --gpu-mttf-hours): from its projection of the job, where
    it has one (a plan measures nothing else)."""
    job = preview.get("world_size")
    advice = advise({"world_size": job, "config": {"job_world_size": job}, "projection": preview.get("projection"),
                     "saves": [], "run": {"status": "plan"}}, options)
    if preview.get("projection") is None:
        advice["notes"].append("a plan measures nothing: give a projection figure (--storage-write-gbps, "
                               "--client-write-gbps, ...) for a projected checkpoint cost")
    return advice


def add_advice(report: dict, options: AdviceOptions | None, strict: bool = True) -> dict:
    """`report` with its `advice` section when the options ask for it (in place; returned too). A report
    without checkpoints (the comms sweep) gets none. Not `strict` (after a run: the report must still be
    written), a MTBF that cannot be worked out becomes `advice.error`."""
    if options is None or not options.asked or "saves" not in report:
        return report
    try:
        report["advice"] = advise(report, options)
    except ConfigError as error:
        if strict:
            raise
        report["advice"] = {"error": str(error)}
    return report
