"""`--repeat N`: the whole benchmark N times, each in fresh processes, and the spread of its numbers.

One number from one run of a shared, host-cached machine means little; the same benchmark repeated in
fresh processes (new ranks, new process group, new page cache state after eviction) says how much a
figure moves. The repetitions are ordinary runs, one after another, in one folder:

    <runs-dir>/<stamp>-<runner>-repeat<N>/       (or <runs-dir>/<run-id>/ in a multi-node run)
        rep-1/ ... rep-N/                        each a complete run directory with its report
        report.json                              repeat_stats, each repetition's headline figures,
                                                 and the medians as the top-level figures

`repeat_stats` has, for each of REPEATED_METRICS, {n, median, min, max, cv} over the repetitions that
completed (cv = sample standard deviation / mean), and a note names every figure whose cv exceeds
10 %. A repetition that fails or is interrupted ends the series; the report says so.
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
from ckpt_bench.report.assembly import to_json
from ckpt_bench.report.metrics import HEADLINE_KEYS

# Per repetition, its report's top-level figure (the last complete save; the load).
REPEATED_METRICS = HEADLINE_KEYS
NOISY_CV = 0.10


def spread(values: list[float]) -> dict:
    """{n, median, min, max, cv} of `values` (cv None below 2 values or with a zero mean)."""
    mean = statistics.fmean(values)
    cv = statistics.stdev(values) / mean if len(values) > 1 and mean else None
    return {"n": len(values), "median": statistics.median(values), "min": min(values), "max": max(values),
            "cv": None if cv is None else round(cv, 4)}


def repeat_stats(reports: list[dict]) -> tuple[dict, list[str]]:
    """`repeat_stats` over the reports of the repetitions that completed, and notes on noisy figures."""
    stats, notes = {}, []
    for metric in REPEATED_METRICS:
        values = [r[metric] for r in reports if isinstance(r.get(metric), (int, float))]
        if not values:
            stats[metric] = None
            continue
        stats[metric] = spread(values)
        cv = stats[metric]["cv"]
        if cv is not None and cv > NOISY_CV:
            notes.append(f"{metric} varies by {100 * cv:.0f}% (cv) over {len(values)} repetitions: quote the "
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
    report = combined_report(folder, launch.repeat, [result.report for result in results])
    folder.report_path.write_text(to_json(report) + "\n")
    return RunResult(folder, report)


def combined_report(folder: RunDir, planned: int, reports: list[dict]) -> dict:
    completed = [r for r in reports if r["run"]["status"] == "ok"]
    stats, notes = repeat_stats(completed)
    last = reports[-1]
    status = last["run"]["status"]
    if len(reports) < planned:
        notes.append(f"repetition {len(reports)} of {planned} ended {status}: the series stopped there")
    run = {"dir": str(folder.path), "backend": last["run"].get("backend"), "status": status, "passes": [],
           "repetitions": [r["run"]["dir"] for r in reports]}
    if status == "interrupted":
        run["interrupted"] = last["run"]["interrupted"]
    headline = {metric: (stats.get(metric) or {}).get("median") for metric in REPEATED_METRICS}
    return {
        **{key: value for key, value in (completed or reports)[0].items() if key not in ("run", "notes")},
        **headline,
        "verified": all(r.get("verified") is not False for r in reports),
        "repeat_stats": stats,
        "repeats": [
            {"repetition": index, "dir": r["run"]["dir"], "status": r["run"]["status"],
             **{metric: r.get(metric) for metric in REPEATED_METRICS}}
            for index, r in enumerate(reports, start=1)
        ],
        "notes": [f"top-level {', '.join(REPEATED_METRICS)} are medians over {len(completed)} completed "
                  f"repetition(s) in fresh processes; saves, load and stats are the first repetition's", *notes],
        "run": run,
    }
