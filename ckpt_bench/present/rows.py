"""What a person reads of a report: the rows of its summary, shared by the terminal (`ckpt_bench.present.summary`,
rich tables) and the HTML report (`ckpt_bench.present.html`). Only presents the report's values: every
figure shown is a field of the typed report (`ckpt_bench.report.schema.Report`: `advice`, `training`,
`storage_baseline` included), read by attribute."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path

from ckpt_bench.core.units import MIB
from ckpt_bench.report import metrics
from ckpt_bench.report.advice import bound_of
from ckpt_bench.report.metrics import HEADLINE
from ckpt_bench.report.schema import (
    AbovePeak,
    Advice,
    CheckpointBudget,
    Comms,
    Comparable,
    DlioFigures,
    FirstSave,
    HostsBaseline,
    LoadRecord,
    MLPerf,
    MlpstorageFigures,
    ModelSize,
    Report,
    RunSection,
    SaveRecord,
    Stat,
    StorageBaseline,
    Training,
)
from ckpt_bench.report.sweep_results import SweepResults

NONE = "-"


def number(value) -> float | None:
    """A plain number, or None (bools and non-finite values are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def fmt(value, digits: int = 3) -> str:
    """One cell: '-' for None, yes/no for bools, numbers without noise."""
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return NONE
        if value != 0 and abs(value) < 10 ** -digits:
            return f"{value:.2g}"
        return f"{value:,.{digits}f}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(", ", ": "), default=str)
    return str(value)


def seconds(value) -> str:
    return NONE if number(value) is None else f"{fmt(float(value))} s"


def duration(value) -> str:
    """Seconds with a human unit beside them when long (advice intervals, MTBF)."""
    value = number(value)
    if value is None:
        return NONE
    for unit, scale in (("d", 86400), ("h", 3600), ("min", 60)):
        if value >= scale:
            return f"{value:,.1f} s ({value / scale:.2f} {unit})"
    return f"{value:.3g} s"


def size(nbytes: int) -> str:
    """A message or file size in binary units (64 KiB, 1 MiB)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.2f}".rstrip("0").rstrip(".") + f" {unit}"  # 1.17 GiB, 815.35 MiB, 64 KiB
    return f"{nbytes} B"


def mib(nbytes) -> str:
    return NONE if number(nbytes) is None else f"{nbytes / MIB:,.1f} MiB"


def mibps(value) -> str:
    return NONE if number(value) is None else f"{fmt(float(value), 1)} MiB/s"


def percent(fraction, digits: int = 2) -> str:
    return NONE if number(fraction) is None else f"{100 * fraction:.{digits}f} %"


def as_report(report: Report | dict) -> Report:
    """The entry points take report.json as read or already typed; everything below them reads a `Report`."""
    return report if isinstance(report, Report) else Report.from_json(report)


def _range(figures: Stat, render, digits: int) -> str:
    """'median (min-max)' of a stats entry, or the one value."""
    if figures.n > 1:
        return f"{render(figures.median)} ({fmt(figures.min, digits)}-{fmt(figures.max, digits)})"
    return render(figures.median)


def first_save_reason(report: Report) -> tuple[str, str]:
    """Why a process's first save costs more, as far as we know: (a few words, the full sentence)."""
    if report.ckpt_format == "torch_dist":
        reason = ("megatron-core starts its writer's helper process (a spawn-context Manager that imports torch) "
                  "on a process's first save")
        if report.assumes_constant_structure:
            reason += " and plans the save (later saves reuse the cached plan)"
        return "megatron-core's writer start-up", reason + "; every later save skips it"
    return "one-off set-up", "a process's first save pays one-off set-up (imports, allocations, planning)"


def _slower_than_steady(report: Report, save: SaveRecord | FirstSave) -> bool:
    """Whether a save's block or total time is at least 1.5x the steady median's: unusual enough to say why."""
    steady = report.steady
    return any(number(value) and stat is not None and number(stat.median) and value >= 1.5 * stat.median
               for value, stat in ((save.block_time, steady.block_time), (save.total_time, steady.total_time)))


def _against_steady(report: Report, save: FirstSave) -> str:
    """A first save under 1.5x the steady median, in words: how much slower it was, if at all."""
    steady = report.steady.total_time
    if number(save.total_time) and steady is not None and number(steady.median) and \
            save.total_time > 1.05 * steady.median:
        return f"{save.total_time / steady.median:.2f}x the later saves' median here"
    if number(save.total_time) is None:
        return "its total time is not known, so not compared with the later ones"
    return "no slower than the later ones here"


def save_remarks(report: Report, save: SaveRecord) -> list[str]:
    """What we know about a save's figures that a reader would otherwise misread, in a few words each."""
    remarks = []
    if report.first_save_apart is not None and _slower_than_steady(report, save) and \
            any(save is other for other in report.first_saves()):
        remarks.append(f"first save: {first_save_reason(report)[0]} (counted apart)")
    if save.overlapped:
        remarks.append("overlapped the previous save (an async save started before that one was written)")
    if number(save.total_time_at_least) is not None:
        remarks.append("total from the call's return (its start is not in the log)")
    if number(save.wait_for_previous) and save.wait_for_previous >= 0.01:
        remarks.append(f"waited {seconds(save.wait_for_previous)} for the previous save's write")
    spread = save.block_time_per_rank
    if spread is not None and number(spread.max) and number(spread.min) is not None and \
            spread.max - spread.min > max(0.05, spread.max / 2):
        remarks.append(f"ranks differ: rank {spread.max_rank} blocked {seconds(spread.max)}, rank "
                       f"{spread.min_rank} {seconds(spread.min)}")
    return remarks


def fsync_words(report: Report) -> str:
    """Whether "complete" meant durable: the first thing to check before comparing two save times."""
    if not report.says_fsync:
        return "not known (the source does not say)"
    return {True: "yes (a save is complete once on disk)",
            False: "no (complete once in the page cache: compare only with other unsynced saves)",
            None: "n/a (object storage: complete once the upload is acknowledged)"}.get(report.fsync, NONE)


def headline_rows(report: Report) -> list[tuple[str, str]]:
    """The report in a few lines: (label, value)."""
    run = report.run or RunSection()
    saves = report.saves or []
    last = [part for part in (f"block {seconds(report.save_block_time)}", f"total {seconds(report.save_total_time)}",
                              f"total at least {seconds(report.save_total_time_at_least)}",
                              mibps(report.save_bandwidth_in_mbps), mib(report.iter_folder_size))
            if not part.endswith(NONE)]
    overlapped = sum(1 for save in saves if save.overlapped)
    rows = [
        ("status", f"{run.status} ({run.backend or NONE})" if run.status else "from logs"),
        *([("experiment", report.experiment)] if report.experiment else
          [("workload", report.workload)] if report.workload else []),
        ("format", f"{fmt(report.ckpt_format)}, async save: {fmt(report.async_save)}"),
        ("fsync", fsync_words(report)),
        ("world size", f"{fmt(report.world_size)} of the job's {fmt(report.subset_of)} ranks (a subset; the job's "
                       f"data parallel {fmt(report.data_parallel_size)})" if report.subset_of else
                       f"{fmt(report.world_size)} (data parallel {fmt(report.data_parallel_size)})"),
        ("saves complete", f"{fmt(report.num_saved)} of {len(saves)}; "
                           + (f"{overlapped} overlapped the previous one (accurate: no)" if overlapped
                              else "none overlapped another (accurate: yes)") if saves
         else "none: the run ended before its first save (see the notes)"),
    ]
    first = report.first_save_apart
    if first is not None:
        slow = _slower_than_steady(report, first)
        why = first_save_reason(report)[1] if slow else _against_steady(report, first)
        total = f"total at least {seconds(first.total_time_at_least)}" if first.total_time is None and \
            number(first.total_time_at_least) is not None else f"total {seconds(first.total_time)}"
        rows.append(("first save", f"iteration {fmt(first.iteration)}: block {seconds(first.block_time)}, {total}, "
                                   f"{mibps(first.bandwidth)} -- counted apart: {why}"))
    steady = report.steady
    count = next((figures.n for figures in (steady.total_time, steady.block_time, steady.total_time_at_least)
                  if figures), None)
    parts = [f"{word} {_range(figures, render, digits)}" for figures, word, render, digits in
             ((steady.block_time, "block", seconds, 3), (steady.total_time, "total", seconds, 3),
              (steady.total_time_at_least, "total at least", seconds, 3), (steady.bandwidth, "", mibps, 1))
             if figures]
    if parts and first is not None:
        rows.append((f"steady save (n={count})", f"{metrics.STEADY}: " + ", ".join(part.strip() for part in parts)))
    elif parts:
        rows.append(("save", ", ".join(part.strip() for part in parts)))
    rows += tier_rows(report)
    if report.repeat_stats is not None:
        rows.append(("repetitions", repetition_words(report)))
    else:
        rows.append(("last save", ", ".join(last) or NONE))
    load = report.load
    if load:
        slowest = slowest_rank(load)
        which = f", slowest rank {slowest}" if slowest != NONE else ""
        rows.append(("load", f"{seconds(load.time)}, {mibps(load.bandwidth)}, {_cache_words(report, load)}{which}"))
    timed = [record for record in [*(saves[-1:]), *([load] if load else [])] if record.phases]
    if timed:
        rows.append(("where the time goes", "; ".join(
            f"{'load' if isinstance(record, LoadRecord) else 'last save'}: {dominant_words(record)}"
            for record in timed)))
    rows.append(("verified", "not checked" if report.verified is None else fmt(report.verified)))
    baseline = report.storage_baseline
    if baseline is not None:
        tool = f" ({baseline.tool})" if baseline.tool else ""
        rows.append(("storage baseline", f"write {mibps(baseline.write_bandwidth)}, read "
                                         f"{mibps(baseline.read_bandwidth)}{tool}{rounds_words(baseline)}"))
        if baseline.hosts is not None:
            rows.append(("storage from several hosts", hosts_baseline_words(baseline.hosts)))
    for fraction, above, label in (
            (report.save_fraction_of_peak, report.save_above_peak, "save fraction of peak (steady)"),
            (report.load_fraction_of_peak, report.load_above_peak, "load fraction of peak")):
        if fraction is not None or above is not None:
            rows.append((label, of_peak(fraction, above, full=True)))
    if report.training is not None and report.training.save_impact_time is not None:
        rows.append(("training impact", training_impact_words(report.training)))
    resolution = fmt(report.time_resolution_s)
    rows.append(("time source", f"{fmt(report.time_source)} (resolution {resolution} s)"))
    return rows


def hosts_baseline_words(hosts: HostsBaseline) -> str:
    """The aggregate from 1, 2, 4 ... hosts at once, and the ceiling it found (or that it is not reached)."""
    if hosts.error:
        return f"not measured: {hosts.error}"
    steps = ", ".join(f"{r.hosts}: {fmt(r.write_gbps)}/{fmt(r.read_gbps)}" for r in hosts.rounds)

    def ceiling(value, reached) -> str:
        return f"{fmt(value)} GB/s" if reached else f"not reached (at least {fmt(value)} GB/s)"

    write = ceiling(hosts.write_ceiling_gbps, hosts.write_ceiling_reached)
    return (f"hosts: write/read GB/s {steps}; write ceiling {write}, read "
            f"{ceiling(hosts.read_ceiling_gbps, hosts.read_ceiling_reached)}")


def rounds_words(baseline: StorageBaseline) -> str:
    """How far apart the baseline's rounds were: a storage whose own speed swings makes any fraction of its peak
    a loose one."""
    rounds = baseline.rounds or []
    if len(rounds) < 2:
        return ""
    spans = []
    for direction in ("write", "read"):
        values = [value for r in rounds if (value := getattr(r, f"{direction}_bandwidth"))]
        if values and max(values) >= 1.5 * min(values):
            spans.append(f"{direction}s {fmt(min(values), 0)}-{fmt(max(values), 0)} MiB/s")
    spread = f"; the storage's own speed varied: {', '.join(spans)}" if spans else ""
    return f"; the fastest of {len(rounds)} rounds{spread}"


def of_peak(fraction: float | None, above: AbovePeak | None, full: bool = False) -> str:
    """A fraction of the storage's peak, or, for a figure that beat the baseline, that it did (and why, `full`):
    never a fraction above 1."""
    if above is None:
        return percent(fraction, 1)
    words = f"above the baseline ({fmt(above.ratio, 2)}x its fastest round)"
    return f"{words}: no fraction -- {above.reason}" if full else words


def repetition_words(report: Report) -> str:
    """A --repeat series in one line: each figure's median over the repetitions, its range and its cv."""
    parts = []
    for metric in HEADLINE:
        figures = getattr(report.repeat_stats, metric.key)
        if not figures:
            continue
        cv = "" if figures.cv is None else f", cv {100 * figures.cv:.0f} %"
        parts.append(f"{'steady ' if metric.steady_figure else ''}{metric.label.rsplit(' (', 1)[0]} "
                     f"{fmt(figures.median, metric.digits)} {metric.unit} ({fmt(figures.min, metric.digits)}-"
                     f"{fmt(figures.max, metric.digits)}{cv})")
    return f"{len(report.repeats or [])} in fresh processes, medians over them: " + "; ".join(parts)


def training_impact_words(training: Training) -> str:
    """What the saves cost the training loop, said in full: of what, against what."""
    without = training.time_without_saves if training.time_without_saves is not None else \
        training.fit_time_without_saves
    return (f"+{seconds(training.save_impact_time)} of training time for {fmt(training.saves)} saves "
            f"(+{fmt(training.save_impact_percent, 1)} % over {seconds(without)} without saves; the first "
            "save's one-off start-up included)")


# The training section's figures as a person reads them (Megatron's --training-impact, Lightning's
# --steps-per-save), `around_saves` apart: a table of its own.
TRAINING_LABELS = {
    "iterations": "iterations (each of the two loops)",
    "iterations_logged": "iterations in the log intervals timed",
    "iteration_lines": "iteration-time lines in the log",
    "steps_per_save": "a save every N steps",
    "train_steps": "steps (each of the two fits)",
    "saves": "saves",
    "async_save": "async saves",
    "time_without_saves": "training time without saves",
    "time_with_saves": "training time with saves",
    "fit_time_without_saves": "fit time without saves",
    "fit_time_with_saves": "fit time with saves",
    "save_impact_time": "cost of the saves (with - without)",
    "save_impact_percent": "cost of the saves, % of the time without",
    "iteration_time_without_saves_median": "median iteration without saves",
    "timing": "how it was timed",
}


def training_rows(training: Training) -> list[tuple[str, str]]:
    """The figures the training section has (each backend measures its own), labelled in words."""
    rows = []
    for name, label in TRAINING_LABELS.items():
        value = getattr(training, name)
        if value is None:
            continue
        shown = seconds(value) if "time" in name and name != "timing" else \
            f"{fmt(value, 1)} %" if "percent" in name else fmt(value)
        rows.append((label, shown))
    return rows


def tier_rows(report: Report) -> list[tuple[str, str]]:
    """Each checkpoint tier's saves apart (a run with Megatron's non-persistent checkpoints): the steady ones where
    the tier saved more than once in a process, else all of them."""
    rows = []
    for tier, stats in (report.stats_by_tier or {}).items():
        figures, which = (stats.excluding_first, "steady") if stats.excluding_first else (stats, "all")
        words = [f"total {_range(figures.total_time, seconds, 3)}" if figures.total_time else None,
                 _range(figures.bandwidth, mibps, 1) if figures.bandwidth else None]
        count = figures.total_time.n if figures.total_time else 0
        rows.append((f"{tier_words(tier)} saves ({which}, n={count})", ", ".join(filter(None, words)) or NONE))
    return rows


def tier_words(tier: str | None) -> str:
    """A checkpoint tier as the tables say it: persistent, non-persistent global, non-persistent local."""
    return NONE if tier is None else tier.replace("non_persistent_", "non-persistent ")


def shows_tiers(report: Report) -> bool:
    """Whether the saves are of more than one checkpoint tier: the tables then say each one's."""
    return len({save.tier for save in report.saves or []}) > 1


def _cache_words(report: Report, load: LoadRecord) -> str:
    if load.cache == "cold" and report.says_fsync and report.fsync is None:
        return "read from the object store"
    return {"cold": "cold (evicted from the page cache first)", "warm": "warm (page cache)"}.get(
        load.cache, f"cache {fmt(load.cache)}")


def slowest_rank(record: SaveRecord | LoadRecord) -> str:
    """The rank whose time a save's or load's figure is, when more than one rank reported one: a log's
    (min, max) timer gives the slowest time of all ranks, but not which rank it was."""
    spread = record.time_per_rank if isinstance(record, LoadRecord) else \
        record.total_time_per_rank or record.block_time_per_rank
    if spread is None or record.ranks < 2:
        return NONE
    return fmt(spread.max_rank)


def save_columns(report: Report) -> list[str]:
    columns = ["iteration", *(["tier"] if shows_tiers(report) else []), "block s", "total s", "MiB/s", "size MiB",
               "slowest rank", "complete"]
    if any(number(save.peak_rss_bytes) is not None for save in report.saves or []):
        columns.append("peak RSS MiB")
    return [*columns, "why unusual"]


def _record_row(label: str, block_time: float | None, record: SaveRecord | LoadRecord, time: float | None,
                columns: list[str]) -> list[str]:
    """A save's or load's cells in `columns` (`save_columns`), up to its remarks."""
    row = [label, *([tier_words(record.tier)] if "tier" in columns else []), fmt(block_time), fmt(time),
           fmt(record.bandwidth, 1), mib_number(record.bytes), slowest_rank(record), fmt(record.complete)]
    return [*row, mib_number(record.peak_rss_bytes)] if "peak RSS MiB" in columns else row


def mib_number(nbytes) -> str:
    """Bytes as a number of MiB, for a column whose header says MiB."""
    return NONE if number(nbytes) is None else f"{nbytes / MIB:,.1f}"


def save_rows(report: Report) -> list[list[str]]:
    """One row per save (columns: `save_columns`; a total known only as a lower bound: `>= seconds`)."""
    columns = save_columns(report)
    rows = []
    for save in report.saves or []:
        row = _record_row(_which(save), save.block_time, save, save.total_time, columns)
        if save.total_time is None and number(save.total_time_at_least) is not None:
            row[columns.index("total s")] = f">= {fmt(save.total_time_at_least)}"
        rows.append([*row, "; ".join(save_remarks(report, save))])
    return rows


def _which(record: SaveRecord | LoadRecord) -> str:
    """A save's or load's iteration, and its repetition in a --repeat series."""
    iteration = fmt(record.iteration)
    return iteration if record.repetition is None else f"{iteration} (rep {record.repetition})"


def load_rows(report: Report) -> list[list[str]]:
    """One row per load, in `save_columns`; loads of one checkpoint numbered by call (Lightning's load calls)."""
    columns = save_columns(report)
    loads = report.every_load
    repeated = len({load.iteration for load in loads}) < len(loads)
    rows = []
    for call, load in enumerate(loads, start=1):
        label = f"load {_which(load)}" + (f" (call {call})" if repeated and load.repetition is None else "")
        remarks = "; ".join(filter(None, [_cache_words(report, load), load.tier_reason]))
        rows.append([*_record_row(label, None, load, load.time, columns), remarks])
    return rows


def _phased(report: Report) -> list[tuple[str, SaveRecord | LoadRecord]]:
    """The records the phase table shows: the first and the last save (the first pays one-off costs) and the
    last load, each with its phases."""
    saves = [save for save in report.saves or [] if save.phases]
    picked = [("first save", saves[0]), ("last save", saves[-1])] if len(saves) > 1 else \
        [("save", save) for save in saves]
    loads = [load for load in report.every_load if load.phases]
    return [(f"{label} {_which(record)}", record) for label, record in picked] + \
        [(f"load {_which(record)}", record) for record in loads[-1:]]


def phase_table(report: Report) -> tuple[list[str], list[list[str]]] | None:
    """Where the time went (docs/report.md, "Phases"): one row per phase in the order they ran, a column of
    seconds (the slowest rank's) and one of shares per record of `_phased`, then, with more than two saves (a
    --repeat series, a long run), each phase's median over the steady saves; a last row of the records' times.
    An async save's background phases are marked `(bg)`. None when no record carries phases (logs)."""
    records = _phased(report)
    if not records:
        return None
    names: dict[str, None] = {}
    for _, record in records:
        names.update(dict.fromkeys(record.phase_seconds()))
    steady = report.steady_phases() if sum(1 for save in report.saves or [] if save.phases) > 2 else {}
    columns = ["phase"]
    for label, _ in records:
        columns += [f"{label} s", "share"]
    if steady:
        columns.append("steady median s")
    rows = []
    for name in names:
        background = any(p.phase == name and p.blocking is False for _, r in records for p in r.phases)
        row = [name + (" (bg)" if background else "")]
        for _, record in records:
            spent = record.phase_seconds().get(name)
            whole = sum(record.phase_seconds().values())
            row += [fmt(spent), percent(spent / whole, 0) if spent is not None and whole else NONE]
        if steady:
            row.append(fmt(steady.get(name)))
        rows.append(row)
    total = ["total (block)"]
    for _, record in records:
        if isinstance(record, LoadRecord):
            total += [fmt(record.time), ""]
        else:
            total += [fmt(record.total_time) + ("" if record.block_time == record.total_time
                                                else f" ({fmt(record.block_time)})"), ""]
    if steady:
        total.append(fmt(report.steady_median("total_time")))
    return columns, [*rows, total]


def dominant_words(record: SaveRecord | LoadRecord) -> str:
    """Which phase a save or load spent most of its time in, and its share: of the whole (a load, a synchronous
    save), or of the block time and of the background part apart (an async save: its write, and where the engine
    finalizes later, the wait for the finalize and the finalize)."""
    background = isinstance(record, SaveRecord) and bool(record.phase_seconds(blocking=False))
    parts = []
    for blocking, of in (((True, "of the block time"), (False, "of the background part")) if background
                         else ((None, ""),)):
        dominant = record.dominant_phase(blocking)
        total = sum(record.phase_seconds(blocking).values())
        if dominant is not None and total:
            parts.append(f"{dominant[0]} {percent(dominant[1] / total, 0)}{' ' + of if of else ''}")
    rank = f" (rank {record.phases_rank})" if parts and record.ranks > 1 else ""
    return "; ".join(parts) + rank if parts else NONE


def advice_rows(advice: Advice) -> list[tuple[str, str]]:
    if advice.error:
        return [("advice", advice.error)]
    cost_is, restart_is = advice.checkpoint_cost_is, advice.restart_cost_is
    rows = [
        ("checkpoint cost C", f"{bounded(advice.checkpoint_cost_range_s, cost_is, advice.checkpoint_cost_s, duration)}"
                              f" -- {advice.checkpoint_cost_from}"),
        ("restart cost R", f"{bounded(advice.restart_cost_range_s, restart_is, advice.restart_cost_s, duration)} -- "
                           f"{advice.restart_cost_from}"),
        ("job MTBF M", f"{duration(advice.mtbf_s)} -- {advice.mtbf_from}"),
        ("Young interval sqrt(2CM)", _bound_word(cost_is) + _interval(advice.young_interval_s,
                                                                     advice.young_interval_iterations)),
        ("Daly interval", _interval(advice.daly_interval_s, advice.daly_interval_iterations)
         if cost_is in (None, "point") else
         f"{bounded(advice.daly_interval_range_s, cost_is, advice.daly_interval_s, duration)} (C is a bound)"),
        ("goodput at Daly's interval", percent(advice.goodput_at_optimum)
         if cost_is in (None, "point") and restart_is in (None, "point") else _goodput_range(advice)),
    ]
    configured = advice.configured_interval_iterations
    if configured is not None and advice.configured_interval_s is not None:
        rows.append(("configured interval", f"{fmt(configured)} iterations = {duration(advice.configured_interval_s)}"))
        rows.append(("goodput at the configured interval", percent(advice.goodput_at_configured)))
    elif configured is not None:
        rows.append(("configured interval", f"{fmt(configured)} iterations (no iteration time: no goodput for it)"))
    if advice.iteration_time_s is not None:
        rows.append(("iteration time", f"{seconds(advice.iteration_time_s)} -- {advice.iteration_time_from}"))
    if advice.checkpoint_budget is not None:
        rows.append((f"to cost at most {advice.checkpoint_budget.percent:g} % of the job's time",
                     budget_words(advice.checkpoint_budget)))
    return rows


def bounded(values: list | None, kind: str | None, point, show) -> str:
    """A figure as it is known: a point, a range "a-b", or "at least a"."""
    low, high = ((values or []) + [None, None])[:2]
    if kind == "range" and low is not None and high is not None:
        return f"{show(low)}-{show(high)}"
    if kind == "at least" and low is not None:
        return f"at least {show(low)}"
    return show(point)


def _bound_word(kind: str | None) -> str:
    return {"at least": "at least ", "range": "about "}.get(kind or "", "")


def _goodput_range(advice: Advice) -> str:
    best = ((advice.goodput_at_optimum_range or []) + [None, None])[1]
    return percent(advice.goodput_at_optimum) if best is None else goodput_span(advice.goodput_at_optimum_range)


def goodput_span(values: list | None) -> str:
    """A goodput [worst, best]: "at most best" where the worst is open, one figure where they agree."""
    worst, best = ((values or []) + [None, None])[:2]
    if best is None:
        return NONE
    if worst is None:
        return f"at most {percent(best)}"
    return percent(best) if abs(best - worst) < 5e-5 else f"{percent(worst)}-{percent(best)}"


def gbps_words(value: float | None) -> str:
    """A storage ceiling of the purchase table, or that none was given."""
    return "not given" if value is None else f"{value:,.4g}"


def budget_words(budget: CheckpointBudget) -> str:
    """The write bandwidth a checkpoint budget needs, or why none meets it."""
    allowed = f"C at most {duration(budget.max_checkpoint_cost_s)} (Daly's interval {duration(budget.daly_interval_s)})"
    if budget.feasible is False:
        return f"{allowed}: {budget.why}"
    lead = "at least " if budget.needed_is == "at least" else ""
    needs = [f"{lead}{budget.storage_write_gbps_needed:,.4g} GB/s from every host at once"
             if budget.storage_write_gbps_needed is not None else None,
             f"{lead}{budget.client_write_gbps_needed:,.4g} GB/s from the busiest host"
             if budget.client_write_gbps_needed is not None else None]
    if budget.feasible == "unknown":
        rate = " and ".join(n for n in needs if n) or "an unknown rate"
        return f"{allowed}: feasible unknown; if at all, writing {rate} -- {budget.why}; {budget.from_}"
    rate = " and ".join(n for n in needs if n) or "an unknown rate"
    return f"{allowed}: writing {rate} -- {budget.why}; {budget.from_}"


def _interval(seconds_of_work: float | None, iterations: int | None) -> str:
    return duration(seconds_of_work) + (f" = {iterations:,} iterations" if iterations is not None else "")


PURCHASE_ADVICE_COLUMNS = ["storage write / read (GB/s)", "C (later saves)", "R", "Daly interval", "goodput",
                           "budget met"]


def purchase_advice_rows(advice: Advice) -> list[list[str]]:
    """The purchase table's advice: each storage's C, R, interval and goodput, ranges where they are bounds."""
    def span(values) -> str:
        low, high = ((values or []) + [None, None])[:2]
        return bounded(values, bound_of(low, high), low, duration)

    rows = []
    for row in advice.purchase or []:
        met = {True: "yes", False: "no", "unknown": "unknown (a bound decides it)"}.get(row.budget_met, NONE)
        rows.append([f"{gbps_words(row.storage_write_gbps)} / {gbps_words(row.storage_read_gbps)}",
                     span(row.checkpoint_cost_range_s), span(row.restart_cost_range_s),
                     span(row.daly_interval_range_s), goodput_span(row.goodput_at_optimum_range), met])
    return rows


WHAT_IF_COLUMNS = ["GPUs", "job MTBF", "Young interval", "Daly interval", "Daly (iterations)", "goodput"]


def what_if_basis(advice: Advice) -> str:
    """The C and R the what-if rows hold: projected at the job's size, this run's, or one of each (a projection
    with no client read figure projects the save and leaves the load measured); at their low ends where they are
    bounds (the goodput then an upper bound)."""
    cost = "projected" in (advice.checkpoint_cost_from or "")
    restart = "projected" in (advice.restart_cost_from or "")
    if cost and restart:
        basis = "C and R projected at the job's size, held"
    elif cost or restart:
        basis = f"{'C' if cost else 'R'} projected at the job's size and this run's {'R' if cost else 'C'}, held"
    else:
        basis = "this run's C and R, held"
    if {advice.checkpoint_cost_is, advice.restart_cost_is} - {None, "point"}:
        basis += " at their low ends (they are bounds: each goodput is at most that, each interval at least)"
    return basis


def what_if_rows(advice: Advice) -> list[list[str]]:
    return [[f"{row.gpus:,}", duration(row.mtbf_s), duration(row.young_interval_s), duration(row.daly_interval_s),
             fmt(row.daly_interval_iterations), percent(row.goodput_at_optimum)] for row in advice.what_if or []]


def where_rows(report: Report) -> list[tuple[str, str]]:
    """Where the run's files are (those that exist)."""
    folder = report.run.dir if report.run else None
    if not folder:
        return []
    path = Path(folder)
    rows = [("run directory", str(path))]
    for name in ("report.json", "report.html"):
        if (path / name).is_file():
            rows.append((name, str(path / name)))
    return rows


# --- sweeps ----------------------------------------------------------------------------------------


def as_results(results: SweepResults | dict) -> SweepResults:
    """The sweep entry points take run_results.json as read or already typed."""
    return results if isinstance(results, SweepResults) else SweepResults.from_json(results)


def swept(results: SweepResults) -> dict[str, list]:
    """The swept parameters and their values, in the sweep file's order."""
    return results.sweep.get("sweep", {})


# With --storage-baseline: each job's storage peak (MiB/s) and how close its saves and loads came to it
# (of reports that have a storage_baseline).
PEAK_COLUMNS: tuple[tuple[Callable[[Report], str], str], ...] = (
    (lambda report: fmt(report.storage_baseline.write_bandwidth, 1), "peak write MiB/s"),
    (lambda report: of_peak(report.save_fraction_of_peak, report.save_above_peak), "steady save of peak"),
    (lambda report: fmt(report.storage_baseline.read_bandwidth, 1), "peak cold read MiB/s"),
    (lambda report: of_peak(report.load_fraction_of_peak, report.load_above_peak), "load of peak"))


def sweep_columns(results: SweepResults) -> list[str]:
    """Saves by their steady figure (report.metrics), loads as measured, and whether saves were fsynced:
    what two jobs can be compared on."""
    return ["job", "status", *swept(results), *(f"steady {m.column}" if m.steady_figure else m.column
                                                for m in HEADLINE), "fsync", "verified"]


def sweep_rows(results: SweepResults) -> list[list[str]]:
    parameters = swept(results)
    rows = []
    for job in results.jobs:
        report = job.report or Report()
        rows.append([str(job.index), str(job.status), *(fmt(job.params.get(name)) for name in parameters),
                     *(fmt(report.compared(m), m.digits) for m in HEADLINE),
                     fmt(report.fsync) if job.report else NONE, fmt(report.verified)])
    return rows


# MLPerf Storage's figures of a workload run by their report keys, as every comparison lists them (sweep tables,
# results.csv, --compare): DLIO's (rank 0) and mlpstorage's (the slowest rank), then the comparability verdict.
MLPERF_FIGURES = (*(f"mlperf.dlio.{item.name}" for item in dataclasses.fields(DlioFigures)),
                  *(f"mlperf.mlpstorage.{item.name}" for item in dataclasses.fields(MlpstorageFigures)))
MLPERF_VERDICT = "mlperf.comparable.verdict"
MLPERF_KEYS = (*MLPERF_FIGURES, MLPERF_VERDICT)
MLPERF_MEANINGS = {
    "mlperf.dlio": "DLIO's summary.json figure: rank 0's durations; GB = 2**30 bytes; stdev the population one",
    "mlperf.mlpstorage": "mlpstorage's: the slowest rank (mean_of_max), strict times over the ranks; GB = 2**30",
    MLPERF_VERDICT: "could it stand beside published MLPerf Storage results (CLOSED, OPEN, not comparable)",
}


def mlperf_figures(report: Report) -> dict[str, float | str | None]:
    """A workload run's MLPerf figures by `MLPERF_KEYS`; {} for a run without them."""
    mlperf = report.mlperf
    if mlperf is None:
        return {}
    sections = {"dlio": mlperf.dlio or DlioFigures(), "mlpstorage": mlperf.mlpstorage or MlpstorageFigures()}
    figures: dict[str, float | str | None] = {
        key: getattr(sections[key.split(".")[1]], key.rsplit(".", 1)[1]) for key in MLPERF_FIGURES}
    figures[MLPERF_VERDICT] = mlperf.comparable.verdict if mlperf.comparable is not None else None
    return figures


def mlperf_meanings(keys: list[str]) -> dict[str, str]:
    """What the MLPerf keys among `keys` are, in words: once per definition (`mlperf.dlio.*`), and the verdict."""
    groups = {key if key == MLPERF_VERDICT else key.rsplit(".", 1)[0] for key in keys if key in MLPERF_KEYS}
    return {(group if group == MLPERF_VERDICT else f"{group}.*"): MLPERF_MEANINGS[group]
            for group in MLPERF_MEANINGS if group in groups}


# The sweep table's MLPerf columns: each definition's save and load (duration, bandwidth), and the verdict.
MLPERF_COLUMNS_MEAN = ("GB = 2**30 bytes (DLIO's GB, a GiB); DLIO: rank 0's mean duration and bandwidth (its "
                       "summary.json); max: "
                       "mlpstorage's mean of the slowest rank's; strict: mlpstorage's bandwidth from strict times")
MLPERF_COLUMNS = (
    ("mlperf.dlio.save_checkpoint_duration_mean_seconds", "DLIO save s", 3),
    ("mlperf.dlio.save_checkpoint_io_mean_GB_per_second", "DLIO save GB/s", 3),
    ("mlperf.mlpstorage.mean_of_max_save_duration", "max save s", 3),
    ("mlperf.mlpstorage.calculated_mean_save_throughput_from_strict_times", "strict save GB/s", 3),
    ("mlperf.dlio.load_checkpoint_duration_mean_seconds", "DLIO load s", 3),
    ("mlperf.dlio.load_checkpoint_io_mean_GB_per_second", "DLIO load GB/s", 3),
    ("mlperf.mlpstorage.mean_of_max_load_duration", "max load s", 3),
    ("mlperf.mlpstorage.calculated_mean_load_throughput_from_strict_times", "strict load GB/s", 3),
    (MLPERF_VERDICT, "comparable", 0),
)


def sweep_mlperf_table(results: SweepResults) -> tuple[list[str], list[list[str]]] | None:
    """Workload jobs: MLPerf Storage's figures side by side (GB = 2**30 bytes); None when no job has them."""
    jobs = [job for job in results.jobs if job.report is not None and job.report.mlperf is not None]
    if not jobs:
        return None
    parameters = swept(results)
    rows = []
    for job in jobs:
        figures = mlperf_figures(job.report)
        rows.append([str(job.index), *(fmt(job.params.get(name)) for name in parameters),
                     *(fmt(figures[key], digits) for key, _label, digits in MLPERF_COLUMNS)])
    return ["job", *parameters, *(label for _key, label, _digits in MLPERF_COLUMNS)], rows


def sweep_peak_table(results: SweepResults) -> tuple[list[str], list[list[str]]] | None:
    """With --storage-baseline: per job, the storage's own peak beside its saves and loads; None when no
    job measured it."""
    jobs = [job for job in results.jobs if job.report is not None and job.report.storage_baseline is not None]
    if not jobs:
        return None
    parameters = swept(results)
    rows = [[str(job.index), *(fmt(job.params.get(name)) for name in parameters),
             *(figure(job.report) for figure, _label in PEAK_COLUMNS)] for job in jobs]
    return ["job", *parameters, *(label for _figure, label in PEAK_COLUMNS)], rows


def sweep_phase_table(results: SweepResults) -> tuple[list[str], list[list[str]]] | None:
    """Per job, each phase's steady median seconds (Report.steady_phases: the slowest rank's), side by side:
    which phase makes one job slower than another. None when no job recorded phases."""
    jobs = [(job, job.report.steady_phases()) for job in results.jobs if job.report is not None]
    jobs = [(job, phases) for job, phases in jobs if phases]
    if not jobs:
        return None
    parameters = swept(results)
    names = list(dict.fromkeys(name for _, phases in jobs for name in phases))
    rows = [[str(job.index), *(fmt(job.params.get(name)) for name in parameters),
             *(fmt(phases.get(name)) for name in names)] for job, phases in jobs]
    return ["job", *parameters, *names], rows


def comms_table(comms: Comms) -> tuple[list[str], list[list[str]]]:
    """The collectives a comms sweep or preflight measured: columns and rows (nccl-tests' figures)."""
    return (["collective", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)"],
            [[r.collective, size(r.size), fmt(r.time_us, 1), fmt(r.algbw_gbps), fmt(r.busbw_gbps)]
             for r in comms.results])


def run_title(report: Report) -> str:
    """What a run is, as a sentence: what it saved (its workload or experiment, and of a workload's job the
    ranks that ran), in which format on how many ranks, and a workload's model and bytes a rank."""
    run = report.run or RunSection()
    ranks = f"{report.world_size} ranks" if report.world_size else "ranks not known"
    if report.workload is None:
        what = f"{run.backend} run" if run.backend else "logs"
        of = f" of {report.experiment}" if report.experiment else ""
        return f"{what}{of}: {report.ckpt_format or 'format not known'} on {ranks}"
    scope = f"{report.world_size} of its {report.subset_of} ranks" if report.subset_of else f"all {ranks}"
    title = f"{report.experiment or report.workload} through {report.ckpt_format or '?'} on {scope}"
    return title + (f": {model_words(report.model_size)}" if report.model_size is not None else "")


def _count(parameters: int) -> str:
    """A parameter count in words: 46.7 B, 5.3 M."""
    return f"{parameters / 1e9:,.1f} B" if parameters >= 1e9 else f"{parameters / 1e6:,.1f} M"


def model_words(model: ModelSize) -> str:
    """A workload's model as a phrase: its kind, parameters (active ones of a MoE), bytes a rank writes."""
    words = f"a {model.kind} model"
    if model.parameters is not None:
        words += f" of {_count(model.parameters)} parameters"
        if model.active_parameters != model.parameters:
            words += f" ({_count(model.active_parameters)} active)"
    if size(model.rank_bytes_min) == size(model.rank_bytes_max):
        return f"{words}, each rank of the job writing {size(model.rank_bytes_max)} a save"
    return (f"{words}, each rank of the job writing {size(model.rank_bytes_min)} to {size(model.rank_bytes_max)} "
            f"a save (median {size(model.rank_bytes_median)}, rank {model.largest_rank} the most)")


def comparable_words(comparable: Comparable) -> str:
    """The verdict on MLPerf comparability in one line, with what kept it from CLOSED."""
    verdict = {"CLOSED": "yes, with CLOSED results", "OPEN": "with OPEN results only (its changes disclosed)"}.get(
        comparable.verdict, "no")
    return verdict + (f": {'; '.join(comparable.reasons)}" if comparable.reasons else "")


COMPARABLE_COLUMNS = ["rule (mlcommons/storage Rules.md)", "allows", "this run"]


def comparable_rows(comparable: Comparable) -> list[list[str]]:
    return [[check.rule, check.outcome, check.detail] for check in comparable.checks]


def _gib_words(gib: float | None, per_second: str = "") -> str:
    """An MLPerf figure counted in DLIO's GB (2**30 bytes) as the rest of the summary counts (MiB), with
    DLIO's own number beside it: `790.5 MiB/s = DLIO's 0.772 GB/s`."""
    if number(gib) is None:
        return NONE
    return f"{fmt(gib * 1024, 1)} MiB{per_second} = DLIO's {fmt(gib)} GB{per_second}"


def mlperf_rows(mlperf: MLPerf) -> list[tuple[str, str]]:
    """A workload run's MLPerf Storage figures: DLIO's (rank 0) and mlpstorage's (the slowest rank, strict
    times), in MiB as every other figure, each with DLIO's number in its GB (2**30 bytes)."""
    dlio, strict = mlperf.dlio or DlioFigures(), mlperf.mlpstorage or MlpstorageFigures()
    rows = [("checkpoint size", f"{_gib_words(dlio.checkpoint_size_GB)} (DLIO's GB is 2**30 bytes, a GiB): what the "
                                "ranks that ran write a save")]
    if mlperf.comparable is not None:
        rows.insert(0, ("comparable with published results", comparable_words(mlperf.comparable)))
    for kind, mean, stdev, bandwidth, mean_of_max, strict_bandwidth in (
            ("save", dlio.save_checkpoint_duration_mean_seconds, dlio.save_checkpoint_duration_stdev_seconds,
             dlio.save_checkpoint_io_mean_GB_per_second, strict.mean_of_max_save_duration,
             strict.calculated_mean_save_throughput_from_strict_times),
            ("load", dlio.load_checkpoint_duration_mean_seconds, dlio.load_checkpoint_duration_stdev_seconds,
             dlio.load_checkpoint_io_mean_GB_per_second, strict.mean_of_max_load_duration,
             strict.calculated_mean_load_throughput_from_strict_times)):
        if mean is None:
            continue
        rows.append((f"{kind}, DLIO (rank 0)",
                     f"{fmt(mean)} s mean (population stdev {fmt(stdev)}), {_gib_words(bandwidth, '/s')}"))
        rows.append((f"{kind}, mlpstorage (slowest rank)", f"{fmt(mean_of_max)} s mean of max, "
                                                           f"{_gib_words(strict_bandwidth, '/s')} from strict times"))
    return rows
