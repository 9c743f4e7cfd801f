"""Where workload runs are compared -- a sweep's table, results.csv, run_results.json, sweep_report.html,
`ckpt_report.py SWEEP` and `--compare` -- MLPerf Storage's figures stand beside ours, and a figure with a
twin says which it is. The sweep's jobs succeed at once with a report written here: nothing is launched."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import yaml
from helpers import ROOT

from ckpt_bench.benchmark.registry import FRAMEWORKS
from ckpt_bench.cli.launch import parse_argv
from ckpt_bench.present.compare import compare, load_sources
from ckpt_bench.present.html import render_sweep
from ckpt_bench.present.summary import print_sweep
from ckpt_bench.report.sweep_results import JobRecord
from ckpt_bench.sweep import run as sweep_run
from ckpt_bench.sweep.run import JOB_FILE, Job, run_sweep, summary

ENGINES = {"torch-save": (0.8, 0.45), "dcp": (1.6, 0.225)}  # engine -> DLIO's save seconds, GB/s


def workload_report(engine: str) -> dict:
    seconds, rate = ENGINES[engine]
    saves = [{"iteration": i, "complete": True, "block_time": seconds, "total_time": seconds,
              "bandwidth": 100.0 * i} for i in (1, 2, 3)]
    return {
        "world_size": 2, "ckpt_format": engine, "save_bandwidth_in_mbps": 300.0, "saves": saves,
        "stats": {"bandwidth": {"n": 3, "median": 200.0}, "first_save": {"iteration": 1},
                  "excluding_first": {"bandwidth": {"n": 2, "median": 250.0}}},
        "notes": [], "run": {"dir": "/runs/x", "backend": "workload", "status": "ok", "passes": []},
        "mlperf": {"dlio": {"checkpoint_size_GB": 0.371, "save_checkpoint_duration_mean_seconds": seconds,
                            "save_checkpoint_io_mean_GB_per_second": rate},
                   "mlpstorage": {"mean_of_max_save_duration": seconds + 0.5},
                   "comparable": {"verdict": "not comparable", "reasons": ["tiny is not one of MLPerf's models"]}},
    }


def _succeed_at_once(root: Path, job: Job, outputs) -> JobRecord:
    job_dir = root / str(job.index)
    job_dir.mkdir(exist_ok=True)
    (job_dir / "report.json").write_text(json.dumps(workload_report(job.params["engine"])))
    record = JobRecord(index=job.index, params=job.params, command=job.command, options=job.options, status="ok",
                       exit_code=0)
    (job_dir / JOB_FILE).write_text(json.dumps(record.to_json(with_report=False)))
    return record


def engines_sweep(tmp_path, monkeypatch):
    path = tmp_path / "engines.yaml"
    path.write_text(yaml.safe_dump({
        "name": "engines", "backend": "workload", "nproc_per_node": 2,
        "workload": str(ROOT / "tests" / "fixtures" / "workloads" / "dlio_tiny_zero3.yaml"),
        "sweep": {"engine": list(ENGINES)}}))
    monkeypatch.setattr(sweep_run, "run_job", _succeed_at_once)
    return run_sweep(str(path), tmp_path / "runs", None, {}, parse_argv)


def test_results_csv_and_the_sweeps_json_carry_mlperfs_figures_and_name_the_save_figure(tmp_path, monkeypatch):
    root, results = engines_sweep(tmp_path, monkeypatch)
    rows = list(csv.DictReader(open(root / "results.csv")))
    assert [row["engine"] for row in rows] == list(ENGINES)
    assert [float(row["mlperf.dlio.save_checkpoint_duration_mean_seconds"]) for row in rows] == [0.8, 1.6]
    assert rows[1]["mlperf.mlpstorage.mean_of_max_save_duration"] == "2.1"
    assert rows[0]["mlperf.comparable.verdict"] == "not comparable"
    # Saves by the steady figure the tables show; the last save's Primus key (300) is not a CSV column.
    assert rows[0]["steady_save_bandwidth"] == "250.0" and "save_bandwidth_in_mbps" not in rows[0]
    jobs = summary(results)["jobs"]
    assert jobs[0]["steady_save_bandwidth"] == 250.0 and "save_bandwidth_in_mbps" not in jobs[0]
    assert jobs[1]["mlperf.dlio.save_checkpoint_io_mean_GB_per_second"] == 0.225
    # run_results.json holds each report as written (300.0, the last save) and says which figure that is.
    written = json.loads((root / "run_results.json").read_text())
    assert written["jobs"][0]["report"]["save_bandwidth_in_mbps"] == 300.0
    assert "last complete save" in written["figures"]["save_block_time, save_total_time, save_bandwidth_in_mbps"]


def test_the_sweep_table_and_sweep_report_put_mlperf_per_engine_side_by_side(tmp_path, monkeypatch):
    root, results = engines_sweep(tmp_path, monkeypatch)
    out = io.StringIO()
    print_sweep(summary(results), results, out)
    text = out.getvalue()
    assert "MLPerf Storage's figures" in text
    table = text[text.index("MLPerf Storage's figures"):]
    assert "0.800" in table and "1.600" in table and "0.225" in table
    page = render_sweep(results)
    assert '<a href="#mlperf">MLPerf Storage</a>' in page and 'id="mlperf-sweep-table"' in page


def test_compare_of_a_sweep_gives_mlperfs_figures_with_their_ratio(tmp_path, monkeypatch):
    root, _results = engines_sweep(tmp_path, monkeypatch)
    comparison = compare(load_sources(root), FRAMEWORKS)
    key = "mlperf.dlio.save_checkpoint_duration_mean_seconds"
    assert key in comparison.metrics and "mlperf.comparable.verdict" in comparison.metrics
    torch_save, dcp = comparison.sources
    assert (torch_save.metrics[key], dcp.metrics[key], dcp.ratio_to_first[key]) == (0.8, 1.6, 2.0)
    assert "rank 0" in comparison.meanings["mlperf.dlio.*"] and key not in comparison.meanings
    assert "the last complete save" in comparison.meanings["save_bandwidth_in_mbps"]


def test_ckpt_report_compares_the_jobs_of_one_sweep_directory(tmp_path, monkeypatch):
    from helpers import ckpt_report

    root, _results = engines_sweep(tmp_path, monkeypatch)
    result = ckpt_report("--compare", root, "--format", "json")
    assert result.returncode == 0, result.stderr
    columns = json.loads(result.stdout)["sources"]
    assert columns[1]["metrics"]["mlperf.dlio.save_checkpoint_duration_mean_seconds"] == 1.6
