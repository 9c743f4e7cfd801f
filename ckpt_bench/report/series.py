"""The report of a `--repeat` series (ckpt_bench.benchmark.repeat runs it): its repetitions' reports in one.

`saves` and `loads` are every repetition's, each tagged with its `repetition`; `stats` and the advice
count the first save of every repetition apart (each is a fresh process: report.metrics); each
repetition's figure is its steady save (the median of its saves after the first) and its load, and
`repeat_stats` has for each of REPEATED_METRICS {n, median, min, max, cv} over the repetitions that
completed (cv = sample standard deviation / mean); the top-level figures are those medians, and `load` the
repetition's load nearest to the median. A note names every figure whose cv exceeds 10 %.
"""

from __future__ import annotations

import statistics

from ckpt_bench.core.rundir import RunDir
from ckpt_bench.report.engine import fractions_of_peak
from ckpt_bench.report.metrics import HEADLINE, save_stats
from ckpt_bench.report.schema import Report, RunSection

# Per repetition, its steady save figures and its load (Report.compared).
REPEATED_METRICS = HEADLINE
NOISY_CV = 0.10
# A repetition's storage baseline and its fractions: the series' own are taken over every repetition's.
PEAK_KEYS = ("storage_baseline", "save_fraction_of_peak", "load_fraction_of_peak", "save_above_peak",
             "load_above_peak")


def spread(values: list[float], digits: int) -> dict:
    """{n, median, min, max, cv} of `values`, rounded to `digits` (cv None below 2 values or with a zero mean)."""
    mean = statistics.fmean(values)
    cv = statistics.stdev(values) / mean if len(values) > 1 and mean else None
    return {"n": len(values), "median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits), "cv": None if cv is None else round(cv, 4)}


def repeat_stats(reports: list[Report]) -> tuple[dict, list[str]]:
    """`repeat_stats` over the reports of the repetitions that completed, and notes on noisy figures."""
    stats, notes = {}, []
    for metric in REPEATED_METRICS:
        values = [value for report in reports if isinstance(value := report.compared(metric), (int, float))]
        if not values:
            stats[metric.key] = None
            continue
        stats[metric.key] = spread(values, metric.digits + 1)
        cv = stats[metric.key]["cv"]
        if cv is not None and cv > NOISY_CV:
            notes.append(f"{metric.key} varies by {100 * cv:.0f}% (cv) over {len(values)} repetitions: quote the "
                         "median, and look at the storage's own variation (--storage-baseline)")
    return stats, notes


def _tagged(reports: list[dict], key: str) -> list[dict]:
    """Every repetition's `saves` (or loads), each tagged with its repetition."""
    records = []
    for index, report in enumerate(reports, start=1):
        own = report.get(key) if key == "saves" else report.get("loads") or ([report["load"]] if report.get("load")
                                                                             else [])
        records += [{**record, "repetition": index} for record in own or []]
    return records


def combined_report(folder: RunDir, planned: int, reports: list[dict]) -> dict:
    """The series' report from its repetitions' reports: each read typed (`Report`), its saves and loads
    copied as written."""
    typed = [Report.from_json(report) for report in reports]
    runs = [report.run or RunSection() for report in typed]
    completed = [report for report, repetition in zip(reports, runs, strict=True) if repetition.status == "ok"]
    stats, notes = repeat_stats([report for report, repetition in zip(typed, runs, strict=True)
                                 if repetition.status == "ok"])
    status = runs[-1].status
    if len(reports) < planned:
        notes.append(f"repetition {len(reports)} of {planned} ended {status}: the series stopped there")
    run = {"dir": str(folder.path), "backend": runs[-1].backend, "status": status, "passes": [],
           "repetitions": [repetition.dir for repetition in runs]}
    if status == "interrupted":
        run["interrupted"] = reports[-1]["run"]["interrupted"]  # copied as written
    headline = {metric.key: (stats.get(metric.key) or {}).get("median") for metric in REPEATED_METRICS}
    saves, loads = _tagged(reports, "saves"), _tagged(reports, "loads")
    median_load = headline.get("load_time")
    load = min((x for x in loads if isinstance(x.get("time"), (int, float))), default=None,
               key=lambda x: abs(x["time"] - median_load)) if median_load is not None else None
    series = {
        **{key: value for key, value in (completed or reports)[0].items()
           if key not in ("run", "notes", "advice", *PEAK_KEYS)},
        **headline,
        "accurate": not any(save.get("overlapped") for save in saves),
        "num_saved": sum(1 for save in saves if save.get("complete")),
        "saves": saves,
        "stats": save_stats(saves),
        "load": load,
        "loads": loads,
        "verified": all(report.verified is not False for report in typed),
        "repeat_stats": stats,
        "repeats": [
            {"repetition": index, "dir": repetition.dir, "status": repetition.status,
             **{metric.key: report.compared(metric) for metric in REPEATED_METRICS}}
            for index, (report, repetition) in enumerate(zip(typed, runs, strict=True), start=1)
        ],
        "notes": [f"a series of {len(reports)} repetition(s), each in fresh processes: saves and loads are every "
                  "repetition's; each repetition's figure is its steady save (the median of its saves after its "
                  f"first) and its load, and the top-level figures are their medians over {len(completed)} "
                  "completed repetition(s)", *notes],
        "run": run,
    }
    baseline = best_baseline([report.get("storage_baseline") for report in completed])
    if baseline is not None:  # each repetition measured the storage: the series' peak is their fastest round
        series["storage_baseline"] = baseline
        series.update(fractions_of_peak(series, baseline))
    return series


def best_baseline(baselines: list[dict | None]) -> dict | None:
    """The storage baseline of a series: every repetition's rounds, the fastest write and the fastest cold read
    over all of them (a peak bounds every repetition's saves, not its own alone); None when none measured."""
    measured = [baseline for baseline in baselines if isinstance(baseline, dict)]
    if not measured:
        return None
    combined = dict(measured[0])
    for key in ("write_bandwidth", "read_bandwidth"):
        combined[key] = max((b[key] for b in measured if b.get(key) is not None), default=None)
    combined["rounds"] = [one for baseline in measured for one in baseline.get("rounds") or []]
    combined["peak"] = (f"the fastest of the {len(combined['rounds'])} rounds of {len(measured)} repetitions' "
                        "baselines, write and read each")
    return combined
