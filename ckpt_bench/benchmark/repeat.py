"""`--repeat N`: the whole benchmark N times, each in fresh processes, and the spread of its numbers.

One number from one run of a shared, host-cached machine means little; the same benchmark repeated in
fresh processes (new ranks, new process group, new page cache state after eviction) says how much a
figure moves. The repetitions are ordinary runs, one after another, in one folder:

    <runs-dir>/<stamp>-<runner>-repeat<N>/       (or <runs-dir>/<run-id>/ in a multi-node run)
        rep-1/ ... rep-N/                        each a complete run directory with its report
        report.json, report.html                 the series (ckpt_bench.report.series): every repetition's
                                                 saves and loads, their stats, repeat_stats, and the medians
                                                 as the top-level figures

A repetition that fails or is interrupted ends the series; the report says so.
"""

from __future__ import annotations

import dataclasses
import sys

from ckpt_bench.benchmark.lifecycle import RunResult, execute, save_report
from ckpt_bench.core.rundir import RunDir
from ckpt_bench.launcher import nodes
from ckpt_bench.launcher.base import Backend
from ckpt_bench.launcher.config import LaunchConfig
from ckpt_bench.report.advice import add_advice
from ckpt_bench.report.series import combined_report


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
    save_report(folder, report)
    return RunResult(folder, report)
