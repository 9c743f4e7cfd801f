"""A sweep's results (issue 18, issue 22 item 7d): the typed records read and write the files as they
always were, each job writes only its own job.json, and the aggregate (run_results.json, results.csv,
sweep_report.html) is written when the sweep starts and stops and at most every AGGREGATE_INTERVAL_S
between; --resume rebuilds it from the jobs' own files. The jobs here succeed at once, without a launch."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from ckpt_bench.cli.launch import parse_argv
from ckpt_bench.report.sweep_results import JobRecord, SweepResults
from ckpt_bench.sweep import run as sweep_run
from ckpt_bench.sweep.run import JOB_FILE, Job, run_sweep, summary

JOBS = 40
REPORT = {"world_size": 1, "save_bandwidth_in_mbps": 250.0, "load_time": None, "saves": [], "notes": [],
          "run": {"dir": "/runs/x", "backend": "dcp", "status": "ok", "passes": []}}


def _job_file(**changes) -> dict:
    """A job.json as run_job writes it: its keys in their order, `error` null, no `report`."""
    return {"index": 0, "params": {"thread_count": 1}, "command": "ckpt_launch.py --thread-count 1",
            "options": {"thread_count": 1}, "status": "ok", "error": None, "started": "2026-11-24T17:00:00+0000",
            "exit_code": 0, "report_file": "results_1.json", "run_dir": "/runs/x",
            "finished": "2026-11-24T17:01:00+0000", **changes}


def test_records_are_written_back_as_read():
    running = {key: value for key, value in _job_file().items()
               if key not in ("exit_code", "report_file", "run_dir", "finished")}
    running["status"] = "running"
    for job_file in (_job_file(), running, _job_file(status="failed", error="save pass failed")):
        assert json.dumps(JobRecord.from_json(job_file).to_json(with_report=False)) == json.dumps(job_file)
    results = {"name": "s", "results_file": "/sweep/run_results.json", "sweep_file": "s.yaml", "dir": "/sweep",
               "started": "t0", "updated": "t1", "sweep": {"name": "s", "sweep": {"thread_count": [1, 2]}},
               "environment": {"host": "h"}, "summary": {"not run": 1, "ok": 1}, "notes": [],
               "jobs": [{**_job_file(), "report": REPORT},
                        {"index": 1, "params": {"thread_count": 2}, "status": "not run", "error": None,
                         "report": None}]}
    typed = SweepResults.from_json(results)
    assert typed.jobs[0].report.save_bandwidth_in_mbps == 250.0 and typed.jobs[0].report.run.status == "ok"
    assert typed.jobs[1].report is None and not typed.jobs[1].has_result and typed.jobs[0].has_result
    # Same keys, same order, absent stays absent (the report's `load` and `stats`), null stays null.
    assert json.dumps(typed.to_json()) == json.dumps(results)
    with pytest.raises(ValueError, match="undeclared keys colour"):
        JobRecord.from_json(_job_file(colour="red"))


def _succeed_at_once(calls: list[int]):
    """run_job for a job that succeeds at once: its own files as run_job leaves them, no launch."""
    def run_job(root: Path, job: Job, outputs) -> JobRecord:
        calls.append(job.index)
        job_dir = root / str(job.index)
        job_dir.mkdir(exist_ok=True)
        (job_dir / "report.json").write_text(json.dumps(REPORT))
        record = JobRecord(**{**_job_file(index=job.index, params=job.params), "command": job.command,
                              "options": job.options})
        (job_dir / JOB_FILE).write_text(json.dumps(record.to_json(with_report=False)))
        return record
    return run_job


@pytest.fixture
def sweep_file(tmp_path) -> Path:
    path = tmp_path / "many.yaml"
    path.write_text(yaml.safe_dump({"name": "many", "backend": "dcp", "model": "tiny",
                                    "sweep": {"save_calls": list(range(1, JOBS + 1))}}))
    return path


@pytest.fixture
def writes(monkeypatch) -> Counter:
    """The files the sweep writes (atomically), by name."""
    written: Counter = Counter()
    write_atomic = sweep_run.write_atomic

    def counting(path, text):
        written[Path(path).name] += 1
        write_atomic(path, text)

    monkeypatch.setattr(sweep_run, "write_atomic", counting)
    return written


def test_the_aggregate_is_written_when_the_sweep_starts_and_ends_not_after_every_job(
        tmp_path, sweep_file, writes, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(sweep_run, "run_job", _succeed_at_once(calls))
    root, results = run_sweep(str(sweep_file), tmp_path / "runs", None, {}, parse_argv)
    assert calls == list(range(JOBS))
    # Jobs that take less than AGGREGATE_INTERVAL_S: the aggregate twice (start, end), not once per job.
    assert writes["run_results.json"] == 2 and writes["results.csv"] == 2
    written = SweepResults.from_json(json.loads((root / "run_results.json").read_text()))
    assert written.summary == {"ok": JOBS} and [job.index for job in written.jobs] == list(range(JOBS))
    assert written.jobs[-1].report.save_bandwidth_in_mbps == 250.0
    assert json.dumps(written.to_json()) == json.dumps(results.to_json(), default=str)  # what the sweep returns
    assert summary(results) == summary(results.to_json())  # typed, or as ckpt_report.py reads the file
    assert len((root / "results.csv").read_text().splitlines()) == JOBS + 1


def test_a_watcher_sees_the_aggregate_every_interval(tmp_path, sweep_file, writes, monkeypatch):
    monkeypatch.setattr(sweep_run, "run_job", _succeed_at_once([]))
    monkeypatch.setattr(sweep_run, "AGGREGATE_INTERVAL_S", 0.0)  # every job takes longer than the interval
    run_sweep(str(sweep_file), tmp_path / "runs", None, {}, parse_argv)
    assert writes["run_results.json"] == JOBS + 2


def test_an_interrupted_sweep_writes_the_aggregate_and_resume_rebuilds_it(tmp_path, sweep_file, monkeypatch):
    calls: list[int] = []
    succeed = _succeed_at_once(calls)

    def interrupted_at_job_5(root: Path, job: Job, outputs) -> JobRecord:
        if job.index == 5:  # Ctrl-C while the job is set up: its job.json says running
            (root / "5").mkdir()
            running = JobRecord(5, job.params, status="running")
            (root / "5" / JOB_FILE).write_text(json.dumps(running.to_json(with_report=False)))
            raise KeyboardInterrupt
        return succeed(root, job, outputs)

    monkeypatch.setattr(sweep_run, "run_job", interrupted_at_job_5)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(str(sweep_file), tmp_path / "runs", None, {}, parse_argv)
    (root,) = (tmp_path / "runs" / "sweeps" / "many").iterdir()
    written = SweepResults.from_json(json.loads((root / "run_results.json").read_text()))
    assert written.summary == {"not run": JOBS - 6, "ok": 5, "running": 1}

    calls.clear()
    (root / "run_results.json").unlink()  # rebuilt from the jobs' own files alone
    failed = json.loads((root / "2" / JOB_FILE).read_text())
    (root / "2" / JOB_FILE).write_text(json.dumps({**failed, "status": "failed"}))  # a failed job runs again
    monkeypatch.setattr(sweep_run, "run_job", succeed)
    _root, results = run_sweep(None, tmp_path / "runs", str(root), {}, parse_argv)
    assert calls == [2, *range(5, JOBS)]  # the 4 that finished ok are skipped
    written = SweepResults.from_json(json.loads((root / "run_results.json").read_text()))
    assert written.summary == {"ok": JOBS} and all(job.report is not None for job in written.jobs)
