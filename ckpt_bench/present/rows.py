"""What a person reads of a report: the rows of its summary, shared by the terminal (`ckpt_bench.present.summary`,
rich tables) and the HTML report (`ckpt_bench.present.html`). Only presents the report's values: every
figure shown is a key of the JSON report (`advice`, `training`, `storage_baseline` included)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ckpt_bench.core.units import MIB
from ckpt_bench.report import metrics
from ckpt_bench.report.metrics import HEADLINE

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
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def mib(nbytes) -> str:
    return NONE if number(nbytes) is None else f"{nbytes / MIB:,.1f} MiB"


def mibps(value) -> str:
    return NONE if number(value) is None else f"{fmt(float(value), 1)} MiB/s"


def percent(fraction, digits: int = 2) -> str:
    return NONE if number(fraction) is None else f"{100 * fraction:.{digits}f} %"


def peak_rss(save: dict) -> float | None:
    """A save's peak RSS in bytes (`saves[].peak_rss_bytes`: a number, or per-rank figures with a max)."""
    value = save.get("peak_rss_bytes")
    if isinstance(value, dict):
        value = value.get("max", max((v for v in value.values() if number(v) is not None), default=None))
    return number(value)


def baseline_mibps(report: dict, direction: str) -> float | None:
    """The storage baseline's bandwidth for `direction` ('write' or 'read') in MiB/s, when measured:
    the first number in `storage_baseline` whose key path names the direction and a bandwidth."""
    baseline = report.get("storage_baseline")
    if not isinstance(baseline, dict):
        return None
    aliases = {"write": ("write", "save"), "read": ("read", "load")}[direction]

    def leaves(value, path):
        if isinstance(value, dict):
            for key, inner in value.items():
                yield from leaves(inner, f"{path}.{key}".lower())
        elif number(value) is not None:
            yield path, value

    for path, value in leaves(baseline, ""):
        if any(a in path for a in aliases) and any(u in path for u in ("mbps", "mib", "bandwidth", "bw")):
            return float(value)
    return None


def _range(figures: dict, render, digits: int) -> str:
    """'median (min-max)' of a stats entry, or the one value."""
    if figures.get("n", 0) > 1:
        return f"{render(figures.get('median'))} ({fmt(figures.get('min'), digits)}-{fmt(figures.get('max'), digits)})"
    return render(figures.get("median"))


def first_save_reason(report: dict) -> tuple[str, str]:
    """Why a process's first save costs more, as far as we know: (a few words, the full sentence)."""
    config = report.get("config") or {}
    if report.get("ckpt_format") == "torch_dist":
        reason = ("megatron-core starts its writer's helper process (a spawn-context Manager that imports torch) "
                  "on a process's first save")
        if config.get("ckpt_assume_constant_structure"):
            reason += " and plans the save (later saves reuse the cached plan)"
        return "megatron-core's writer start-up", reason + "; every later save skips it"
    return "one-off set-up", "a process's first save pays one-off set-up (imports, allocations, planning)"


def _slower_than_steady(report: dict, save: dict) -> bool:
    """Whether a save's block or total time is at least 1.5x the steady median's: unusual enough to say why."""
    steady = metrics.steady_stats(report)
    return any(number(save.get(key)) and number((steady.get(key) or {}).get("median"))
               and save[key] >= 1.5 * steady[key]["median"] for key in ("block_time", "total_time"))


def save_remarks(report: dict, save: dict) -> list[str]:
    """What we know about a save's figures that a reader would otherwise misread, in a few words each."""
    remarks = []
    if metrics.first_save_apart(report) is not None and _slower_than_steady(report, save) and \
            any(save is other for other in metrics.first_saves(report.get("saves") or [])):
        remarks.append(f"first save: {first_save_reason(report)[0]} (counted apart)")
    if save.get("overlapped"):
        remarks.append("overlapped the previous save (an async save started before that one was written)")
    if number(save.get("wait_for_previous")) and save["wait_for_previous"] >= 0.01:
        remarks.append(f"waited {seconds(save['wait_for_previous'])} for the previous save's write")
    spread = save.get("block_time_per_rank") or {}
    if number(spread.get("max")) and number(spread.get("min")) is not None and \
            spread["max"] - spread["min"] > max(0.05, spread["max"] / 2):
        remarks.append(f"ranks differ: rank {spread.get('max_rank')} blocked {seconds(spread['max'])}, rank "
                       f"{spread.get('min_rank')} {seconds(spread['min'])}")
    return remarks


def fsync_words(report: dict) -> str:
    """Whether "complete" meant durable: the first thing to check before comparing two save times."""
    if not metrics.says_fsync(report):
        return "not known (the source does not say)"
    fsync = metrics.fsync(report)
    return {True: "yes (a save is complete once on disk)",
            False: "no (complete once in the page cache: compare only with other unsynced saves)",
            None: "n/a (object storage: complete once the upload is acknowledged)"}.get(fsync, NONE)


def headline_rows(report: dict) -> list[tuple[str, str]]:
    """The report in a few lines: (label, value)."""
    run = report.get("run") or {}
    saves = report.get("saves") or []
    last = [part for part in (f"block {seconds(report.get('save_block_time'))}",
                              f"total {seconds(report.get('save_total_time'))}",
                              mibps(report.get("save_bandwidth_in_mbps")), mib(report.get("iter_folder_size")))
            if not part.endswith(NONE)]
    overlapped = sum(1 for save in saves if save.get("overlapped"))
    rows = [
        ("status", f"{run['status']} ({run.get('backend') or NONE})" if run.get("status") else "from logs"),
        ("format", f"{fmt(report.get('ckpt_format'))}, async save: {fmt(report.get('async_save'))}"),
        ("fsync", fsync_words(report)),
        ("world size", f"{fmt(report.get('world_size'))} (data parallel {fmt(report.get('data_parallel_size'))})"),
        ("saves complete", f"{fmt(report.get('num_saved'))} of {len(saves)}; "
                           + (f"{overlapped} overlapped the previous one (accurate: no)" if overlapped
                              else "none overlapped another (accurate: yes)") if saves
         else "none: the run ended before its first save (see the notes)"),
    ]
    first = metrics.first_save_apart(report)
    if first is not None:
        slow = _slower_than_steady(report, first)
        why = first_save_reason(report)[1] if slow else "no slower than the later ones here"
        rows.append(("first save", f"iteration {fmt(first.get('iteration'))}: block "
                                   f"{seconds(first.get('block_time'))}, total {seconds(first.get('total_time'))}, "
                                   f"{mibps(first.get('bandwidth'))} -- counted apart: {why}"))
    steady = metrics.steady_stats(report)
    count = (steady.get("total_time") or steady.get("block_time") or {}).get("n")
    parts = [f"{word} {_range(steady[key], render, digits)}" for key, word, render, digits in
             (("block_time", "block", seconds, 3), ("total_time", "total", seconds, 3), ("bandwidth", "", mibps, 1))
             if steady.get(key)]
    if parts and first is not None:
        rows.append((f"steady save (n={count})", f"{metrics.STEADY}: " + ", ".join(part.strip() for part in parts)))
    elif parts:
        rows.append(("save", ", ".join(part.strip() for part in parts)))
    if report.get("repeat_stats"):
        rows.append(("repetitions", repetition_words(report)))
    else:
        rows.append(("last save", ", ".join(last) or NONE))
    load = report.get("load")
    if load:
        slowest = slowest_rank(load)
        which = f", slowest rank {slowest}" if slowest != NONE else ""
        rows.append(("load", f"{seconds(load.get('time'))}, {mibps(load.get('bandwidth'))}, "
                             f"{_cache_words(report, load)}{which}"))
    verified = report.get("verified")
    rows.append(("verified", "not checked" if verified is None else fmt(verified)))
    write, read = baseline_mibps(report, "write"), baseline_mibps(report, "read")
    if report.get("storage_baseline") is not None:
        tool = report["storage_baseline"].get("tool") if isinstance(report["storage_baseline"], dict) else None
        rows.append(("storage baseline", f"write {mibps(write)}, read {mibps(read)}" + (f" ({tool})" if tool else "")))
    for key, label in (("save_fraction_of_peak", "save fraction of peak (steady)"),
                       ("load_fraction_of_peak", "load fraction of peak")):
        if report.get(key) is not None:
            rows.append((label, percent(report[key], 1)))
    training = report.get("training")
    if isinstance(training, dict) and training.get("save_impact_time") is not None:
        rows.append(("training impact", training_impact_words(training)))
    resolution = fmt(report.get("time_resolution_s"))
    rows.append(("time source", f"{fmt(report.get('time_source'))} (resolution {resolution} s)"))
    return rows


def repetition_words(report: dict) -> str:
    """A --repeat series in one line: each figure's median over the repetitions, its range and its cv."""
    parts = []
    for metric in HEADLINE:
        figures = (report.get("repeat_stats") or {}).get(metric.key)
        if not figures:
            continue
        cv = "" if figures.get("cv") is None else f", cv {100 * figures['cv']:.0f} %"
        parts.append(f"{'steady ' if metric.steady_figure else ''}{metric.label.rsplit(' (', 1)[0]} "
                     f"{fmt(figures['median'], metric.digits)} {metric.unit} ({fmt(figures['min'], metric.digits)}-"
                     f"{fmt(figures['max'], metric.digits)}{cv})")
    count = len(report.get("repeats") or [])
    return f"{count} in fresh processes, medians over them: " + "; ".join(parts)


def training_impact_words(training: dict) -> str:
    """What the saves cost the training loop, said in full: of what, against what."""
    without = training.get("time_without_saves", training.get("fit_time_without_saves"))
    return (f"+{seconds(training.get('save_impact_time'))} of training time for {fmt(training.get('saves'))} saves "
            f"(+{fmt(training.get('save_impact_percent'), 1)} % over {seconds(without)} without saves; the first "
            "save's one-off start-up included)")


# The training section's keys as a person reads them (Megatron's --training-impact, Lightning's
# --steps-per-save).
TRAINING_LABELS = {
    "iterations": "iterations (each of the two loops)",
    "train_steps": "steps (each of the two fits)",
    "steps_per_save": "a save every N steps",
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


def training_rows(training: dict) -> list[tuple[str, str]]:
    """The training section (`around_saves` apart: a table of its own), labelled in words."""
    rows = []
    for key, value in training.items():
        if key == "around_saves":
            continue
        shown = seconds(value) if "time" in key and key != "timing" else \
            f"{fmt(value, 1)} %" if "percent" in key and number(value) is not None else fmt(value)
        rows.append((TRAINING_LABELS.get(key, key.replace("_", " ")), shown))
    return rows


def _cache_words(report: dict, load: dict) -> str:
    if load.get("cache") == "cold" and metrics.says_fsync(report) and metrics.fsync(report) is None:
        return "read from the object store"
    return {"cold": "cold (evicted from the page cache first)", "warm": "warm (page cache)"}.get(
        load.get("cache"), f"cache {fmt(load.get('cache'))}")


def slowest_rank(record: dict) -> str:
    """The rank whose time a save's or load's figure is, when more than one rank reported one: a log's
    (min, max) timer gives the slowest time of all ranks, but not which rank it was."""
    spread = record.get("total_time_per_rank") or record.get("block_time_per_rank") or record.get("time_per_rank")
    if not spread or (record.get("ranks") or 0) < 2:
        return NONE
    return fmt(spread.get("max_rank"))


def save_columns(report: dict) -> list[str]:
    columns = ["iteration", "block s", "total s", "MiB/s", "size MiB", "slowest rank", "complete"]
    if any(peak_rss(s) is not None for s in report.get("saves") or []):
        columns.append("peak RSS MiB")
    return [*columns, "why unusual"]


def save_rows(report: dict) -> list[list[str]]:
    """One row per save (columns: `save_columns`), then one per load."""
    memory = "peak RSS MiB" in save_columns(report)
    rows = []
    for save in report.get("saves") or []:
        slowest = slowest_rank(save)
        row = [_which(save), fmt(save.get("block_time")), fmt(save.get("total_time")),
               fmt(save.get("bandwidth"), 1),
               NONE if number(save.get("bytes")) is None else f"{save['bytes'] / MIB:,.1f}",
               slowest, fmt(save.get("complete"))]
        if memory:
            rss = peak_rss(save)
            row.append(NONE if rss is None else f"{rss / MIB:,.1f}")
        rows.append([*row, "; ".join(save_remarks(report, save))])
    return rows


def _which(record: dict) -> str:
    """A save's or load's iteration, and its repetition in a --repeat series."""
    iteration = fmt(record.get("iteration"))
    return f"{iteration} (rep {record['repetition']})" if "repetition" in record else iteration


def load_rows(report: dict) -> list[list[str]]:
    """One row per load, in `save_columns`; loads of one checkpoint numbered by call (Lightning's load calls)."""
    memory = "peak RSS MiB" in save_columns(report)
    loads = report.get("loads") or ([report["load"]] if report.get("load") else [])
    repeated = len({load.get("iteration") for load in loads}) < len(loads)
    rows = []
    for call, load in enumerate(loads, start=1):
        label = f"load {_which(load)}" + (f" (call {call})" if repeated and "repetition" not in load else "")
        row = [label, NONE, fmt(load.get("time")), fmt(load.get("bandwidth"), 1),
               NONE if number(load.get("bytes")) is None else f"{load['bytes'] / MIB:,.1f}",
               slowest_rank(load), fmt(load.get("complete"))]
        if memory:
            rss = peak_rss(load)
            row.append(NONE if rss is None else f"{rss / MIB:,.1f}")
        rows.append([*row, _cache_words(report, load)])
    return rows


def advice_rows(advice: dict) -> list[tuple[str, str]]:
    if advice.get("error"):
        return [("advice", advice["error"])]
    rows = [
        ("checkpoint cost C", f"{duration(advice.get('checkpoint_cost_s'))} -- {advice.get('checkpoint_cost_from')}"),
        ("restart cost R", f"{duration(advice.get('restart_cost_s'))} -- {advice.get('restart_cost_from')}"),
        ("job MTBF M", f"{duration(advice.get('mtbf_s'))} -- {advice.get('mtbf_from')}"),
        ("Young interval sqrt(2CM)", _interval(advice, "young")),
        ("Daly interval", _interval(advice, "daly")),
        ("goodput at Daly's interval", percent(advice.get("goodput_at_optimum"))),
    ]
    configured = advice.get("configured_interval_iterations")
    if configured is not None and advice.get("configured_interval_s") is not None:
        rows.append(("configured interval", f"{fmt(configured)} iterations = "
                                            f"{duration(advice.get('configured_interval_s'))}"))
        rows.append(("goodput at the configured interval", percent(advice.get("goodput_at_configured"))))
    elif configured is not None:
        rows.append(("configured interval", f"{fmt(configured)} iterations (no iteration time: no goodput for it)"))
    if advice.get("iteration_time_s") is not None:
        rows.append(("iteration time", f"{seconds(advice['iteration_time_s'])} -- {advice.get('iteration_time_from')}"))
    return rows


def _interval(advice: dict, which: str) -> str:
    text = duration(advice.get(f"{which}_interval_s"))
    iterations = advice.get(f"{which}_interval_iterations")
    return text + (f" = {iterations:,} iterations" if iterations is not None else "")


WHAT_IF_COLUMNS = ["GPUs", "job MTBF", "Young interval", "Daly interval", "Daly (iterations)", "goodput"]


def what_if_rows(advice: dict) -> list[list[str]]:
    return [[f"{row['gpus']:,}", duration(row.get("mtbf_s")), duration(row.get("young_interval_s")),
             duration(row.get("daly_interval_s")), fmt(row.get("daly_interval_iterations")),
             percent(row.get("goodput_at_optimum"))] for row in advice.get("what_if") or []]


def where_rows(report: dict) -> list[tuple[str, str]]:
    """Where the run's files are (those that exist)."""
    folder = (report.get("run") or {}).get("dir")
    if not folder:
        return []
    path = Path(folder)
    rows = [("run directory", str(path))]
    for name in ("report.json", "report.html"):
        if (path / name).is_file():
            rows.append((name, str(path / name)))
    return rows


# --- sweeps ----------------------------------------------------------------------------------------

# With --storage-baseline: each job's storage peak (MiB/s) and how close its saves and loads came to it.
PEAK_COLUMNS = (("storage_baseline.write_bandwidth", "peak write MiB/s", 1),
                ("save_fraction_of_peak", "steady save of peak", 2),
                ("storage_baseline.read_bandwidth", "peak cold read MiB/s", 1),
                ("load_fraction_of_peak", "load of peak", 2))


def _dotted(report: dict, path: str):
    value = report
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def sweep_columns(results: dict) -> list[str]:
    """Saves by their steady figure (report.metrics), loads as measured, and whether saves were fsynced:
    what two jobs can be compared on."""
    return ["job", "status", *_swept(results), *(f"steady {m.column}" if m.steady_figure else m.column
                                                 for m in HEADLINE), "fsync", "verified"]


def _swept(results: dict) -> dict:
    return (results.get("sweep") or {}).get("sweep", {})


def sweep_rows(results: dict) -> list[list[str]]:
    lists = _swept(results)
    rows = []
    for job in results.get("jobs") or []:
        report = job.get("report") or {}
        rows.append([str(job.get("index")), str(job.get("status")), *(fmt(job["params"].get(k)) for k in lists),
                     *(fmt(m.steady(report), m.digits) for m in HEADLINE),
                     fmt(metrics.fsync(report)) if report else NONE, fmt(report.get("verified"))])
    return rows


def sweep_peak_table(results: dict) -> tuple[list[str], list[list[str]]] | None:
    """With --storage-baseline: per job, the storage's own peak beside its saves and loads; None when no
    job measured it."""
    jobs = [job for job in results.get("jobs") or [] if (job.get("report") or {}).get("storage_baseline")]
    if not jobs:
        return None
    lists = _swept(results)
    rows = [[str(job.get("index")), *(fmt(job["params"].get(k)) for k in lists),
             *(fmt(_dotted(job["report"], path), digits) for path, _label, digits in PEAK_COLUMNS)] for job in jobs]
    return ["job", *lists, *(label for _path, label, _digits in PEAK_COLUMNS)], rows


def comms_table(comms: dict) -> tuple[list[str], list[list[str]]]:
    """The collectives a comms sweep or preflight measured: columns and rows (nccl-tests' figures)."""
    return (["collective", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)"],
            [[r["collective"], size(r["size"]), fmt(r.get("time_us"), 1), fmt(r.get("algbw_gbps")),
              fmt(r.get("busbw_gbps"))] for r in comms.get("results") or []])


def mlperf_rows(report: dict) -> list[tuple[str, str]]:
    """A workload run's MLPerf Storage figures (report.mlperf): DLIO's (rank 0) and mlpstorage's (the
    slowest rank, strict times), GB = 2**30 bytes as DLIO counts it."""
    section = report.get("mlperf") or {}
    dlio, strict = section.get("dlio") or {}, section.get("mlpstorage") or {}
    rows = [("checkpoint size", f"{fmt(dlio.get('checkpoint_size_GB'))} GB (2**30 bytes)")]
    for kind in ("save", "load"):
        if dlio.get(f"{kind}_checkpoint_duration_mean_seconds") is None:
            continue
        rows.append((f"{kind}, DLIO (rank 0)",
                     f"{fmt(dlio[f'{kind}_checkpoint_duration_mean_seconds'])} s mean "
                     f"(stdev {fmt(dlio.get(f'{kind}_checkpoint_duration_stdev_seconds'))}), "
                     f"{fmt(dlio.get(f'{kind}_checkpoint_io_mean_GB_per_second'))} GB/s"))
        rows.append((f"{kind}, mlpstorage (slowest rank)",
                     f"{fmt(strict.get(f'mean_of_max_{kind}_duration'))} s mean of max, "
                     f"{fmt(strict.get(f'calculated_mean_{kind}_throughput_from_strict_times'))} GB/s from strict "
                     "times"))
    return rows
