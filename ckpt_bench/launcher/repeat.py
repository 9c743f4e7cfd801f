"""`--repeat N`: the whole benchmark N times, each in fresh processes, and the spread of its numbers.

One number from one run of a shared, host-cached machine means little; the same benchmark repeated in
fresh processes (new ranks, new process group, new page cache state after eviction) says how much a
figure moves. The repetitions are ordinary runs, one after another, in one folder:

    <runs-dir>/<stamp>-<runner>-repeat<N>/       (or <runs-dir>/<run-id>/ in a multi-node run)
        rep-1/ ... rep-N/                        each a complete run directory with its report
        report.json, report.html                 the series: every repetition's saves and loads, their
                                                 stats, repeat_stats, and the medians as the top-level figures

One report for the whole series, read like any other: `saves` and `loads` are every repetition's, each
tagged with its `repetition`; `stats` and the advice count the first save of every repetition apart
(each is a fresh process: report.metrics); each repetition's figure is its steady save (the median of
its saves after the first) and its load, and `repeat_stats` has for each of REPEATED_METRICS {n, median,
min, max, cv} over the repetitions that completed (cv = sample standard deviation / mean); the top-level
figures are those medians, and `load` the repetition's load nearest to the median. A note names every
figure whose cv exceeds 10 %. A repetition that fails or is interrupted ends the series; the report says so.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys

from ckpt_bench.core.rundir import RunDir
from ckpt_bench.launcher import nodes
from ckpt_bench.launcher.base import Backend
from ckpt_bench.launcher.config import LaunchConfig
from ckpt_bench.launcher.lifecycle import RunResult, execute
from ckpt_bench.present.html import write_run_html
from ckpt_bench.report.advice import add_advice
from ckpt_bench.report.assembly import to_json
from ckpt_bench.report.metrics import HEADLINE, save_stats
from ckpt_bench.report.schema import Report, RunSection

# Per repetition, its steady save figures and its load (report.metrics.Metric.steady).
REPEATED_METRICS = HEADLINE
NOISY_CV = 0.10


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


def run(runner: Backend, launch: LaunchConfig) -> RunResult:
    """The benchmark, once or `--repeat` times: what the CLI and every sweep job run."""
    return execute(runner, launch) if launch.repeat == 1 else execute_repeated(runner, launch)


def execute_repeated(runner: Backend, launch: LaunchConfig) -> RunResult:
    """`launch.repeat` runs of the benchmark, each its own run directory inside one folder (node 0
    creates it; the other nodes of a multi-node run join the same repetitions in it)."""
    if nodes.is_leader(launch.topology):
        folder = RunDir.create(launch.runs_path, f"{launch.runner}-repeat{launch.repeat}", launch.run_id)
    else:
        folder = RunDir(launch.runs_path / launch.run_id)
    results: list[RunResult] = []
    for index in range(1, launch.repeat + 1):
        print(f"repetition {index}/{launch.repeat}", file=sys.stderr, flush=True)
        repetition = dataclasses.replace(launch, runs_dir=str(folder.path), run_id=f"rep-{index}", repeat=1)
        results.append(execute(runner, repetition))
        if results[-1].status != "ok":
            break
    if not nodes.is_leader(launch.topology):
        return results[-1]
    report = add_advice(combined_report(folder, launch.repeat, [result.report for result in results]), launch,
                        strict=False)
    folder.report_path.write_text(to_json(report) + "\n")
    write_run_html(folder.path, report)
    return RunResult(folder, report)


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
    return {
        **{key: value for key, value in (completed or reports)[0].items() if key not in ("run", "notes", "advice")},
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
