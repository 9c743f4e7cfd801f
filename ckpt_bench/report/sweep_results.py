"""A sweep's results, typed: each job's record (`<job>/job.json`) and the sweep's aggregate
(`run_results.json`, or `ckpt_bench_results.json` beside another tool's files).

`from_json` reads what `to_json` writes, and `to_json` writes the same keys in the same order as the
files have always held: an optional key that is unset is left out, not written as null (`error` and
`report` excepted: they are null when there is none). A job's report is embedded in run_results.json
exactly as its report.json holds it; `JobRecord.report` is the same report typed (`Report`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ckpt_bench.report.metrics import STEADY
from ckpt_bench.report.schema import Report

NOT_RUN = "not run"  # the status of a job without a job.json: never started, or its folder was not ours
# A job's keys written as null when unset; its other optional keys are left out.
JOB_KEYS_WRITTEN_AS_NULL = ("error",)
# The sweep's keys left out when unset (results written by hand, or before they were recorded).
SWEEP_KEYS_LEFT_OUT = ("results_file", "sweep_file", "figures")


# A job report's figures that have a twin in the sweep's tables and results.csv, said once in run_results.json.
FIGURES = {
    "save_block_time, save_total_time, save_bandwidth_in_mbps": (
        "a job report's top-level save figures, Primus's keys: its last complete save (a --repeat job's: the "
        "median of its repetitions' steady saves); the tables and results.csv compare jobs on the steady figures"),
    "steady_save_block_time, steady_save_total_time, steady_save_bandwidth": (
        f"the tables' and results.csv's save figures: the {STEADY} (report.stats.excluding_first's median)"),
    "stats.*.stdev": "the sample standard deviation (divided by n - 1)",
    "mlperf.dlio.*_stdev_*": "DLIO's population standard deviation (divided by n), over rank 0's durations",
}


def _check_keys(data: dict, declared: set[str], where: str) -> None:
    """`data` holds only `declared` keys: a key we would not write back is an error, not a silent loss."""
    unknown = sorted(set(data) - declared)
    if unknown:
        raise ValueError(f"{where}: undeclared keys {', '.join(unknown)}")


@dataclass
class JobRecord:
    """One job of a sweep: `<job>/job.json`, and its entry in run_results.json's `jobs` (with `report`).
    Fields are declared in the order the files hold them."""

    index: int
    """The job's number: its folder is `<sweep dir>/<index>/`."""
    params: dict[str, Any]
    """The swept values, in declaration order."""
    command: str | None = None
    """`ckpt_launch.py <options>`: the command line the job is."""
    options: dict[str, Any] | None = None
    """Every option, as the command line's parser gave them."""
    status: str = NOT_RUN
    """running, ok, failed, verification-failed, interrupted, or not run."""
    error: str | None = None
    """Why the job has no result, in one line; null when it has one."""
    started: str | None = None
    """Local time the job started (ISO 8601)."""
    exit_code: int | None = None
    """The exit code its command line would have had; unset when the run never ended."""
    report_file: str | None = None
    """The report's name in the job folder, `results_<values>.json` (s3torchbenchmarking's name)."""
    run_dir: str | None = None
    """The job's run directory."""
    finished: str | None = None
    """Local time the job ended; unset while it runs."""
    report_json: dict[str, Any] | None = field(default=None, repr=False)
    """The job's report.json as written: run_results.json's `report`, verbatim (a `Report` does not keep
    which keys were absent)."""
    report: Report | None = field(init=False, default=None)
    """`report_json`, typed."""

    def __post_init__(self) -> None:
        self.report = Report.from_json(self.report_json) if self.report_json is not None else None

    @property
    def has_result(self) -> bool:
        """Whether `--resume` skips the job: it ran to a verdict (a mismatch is a result too)."""
        return self.status in ("ok", "verification-failed")

    @classmethod
    def from_json(cls, data: dict) -> JobRecord:
        """A job.json, or an entry of run_results.json's `jobs` (its `report` typed)."""
        values = dict(data)
        report_json = values.pop("report", None)
        _check_keys(values, {item.name for item in dataclasses.fields(cls) if item.init} - {"report_json"},
                    f"job record {values.get('index')}")
        return cls(**values, report_json=report_json)

    def to_json(self, with_report: bool = True) -> dict:
        """The record as the files hold it; job.json is written `with_report=False` (report.json is beside it)."""
        data = {item.name: getattr(self, item.name) for item in dataclasses.fields(self)
                if item.name not in ("report_json", "report")}
        data = {key: value for key, value in data.items() if value is not None or key in JOB_KEYS_WRITTEN_AS_NULL}
        if with_report:
            data["report"] = self.report_json
        return data


def status_counts(jobs: list[JobRecord]) -> dict[str, int]:
    """{status: number of jobs}, statuses sorted: run_results.json's `summary`."""
    return dict(sorted(Counter(job.status for job in jobs).items()))


@dataclass(kw_only=True)
class SweepResults:
    """run_results.json: the sweep, where it ran, and every job's record with its report. Fields are
    declared in the order the file holds them."""

    name: str
    """The sweep's name (its file's `name:`, or the file's stem)."""
    results_file: str | None = None
    """This file's own path."""
    sweep_file: str | None = None
    """The sweep file that was run."""
    dir: str
    """The sweep directory."""
    started: str
    """Local time the sweep first started (a resumed sweep keeps it)."""
    updated: str
    """Local time this file was written."""
    sweep: dict[str, Any]
    """The sweep as run: its name, fixed settings and `sweep:` lists."""
    environment: dict[str, Any]
    """Tool and library versions, host (`ckpt_bench.core.environment`)."""
    summary: dict[str, int]
    """The number of jobs per status (`status_counts`)."""
    notes: list[str] = field(default_factory=list)
    """What the sweep file asked that does not apply here."""
    figures: dict[str, str] | None = None
    """What the figures of the jobs' reports are where the tables show their twins (`FIGURES`, as the sweep
    writes it)."""
    jobs: list[JobRecord] = field(default_factory=list)
    """Every job, in order, with its report."""

    @classmethod
    def from_json(cls, data: dict) -> SweepResults:
        _check_keys(data, {item.name for item in dataclasses.fields(cls)}, "sweep results")
        return cls(**{**data, "jobs": [JobRecord.from_json(job) for job in data.get("jobs", [])]})

    def to_json(self) -> dict:
        data = {item.name: getattr(self, item.name) for item in dataclasses.fields(self)
                if not (item.name in SWEEP_KEYS_LEFT_OUT and getattr(self, item.name) is None)}
        data["jobs"] = [job.to_json() for job in self.jobs]
        return data
