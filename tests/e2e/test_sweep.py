"""Sweeps: a 3-job sweep over disk and S3 (a failing job included), resumed; sweep file validation."""

import csv
import json
from pathlib import Path

import yaml
from helpers import launch


def test_sweep_runs_every_job_and_resumes(tmp_path, s3_endpoint):
    bucket = s3_endpoint.create_bucket()
    sweep_file = tmp_path / "small.yaml"
    sweep_file.write_text(yaml.safe_dump({
        "name": "small",
        "backend": "dcp",
        "nproc_per_node": 1,
        "save_calls": 1,
        "s3_region": s3_endpoint.region,
        # The bucket `missing` does not exist: its jobs fail when they start, and the sweep goes on.
        "sweep": {"model": ["tiny"], "save_dir": [str(tmp_path / "ckpts"), f"s3://{bucket}/sweep",
                                                  "s3://missing-ckpt-bench/sweep"]},
    }, sort_keys=False))
    runs = tmp_path / "runs"
    # --s3-endpoint on the command line: a fixed setting of every job, recorded in sweep.yaml.
    result = launch("--sweep", str(sweep_file), "--runs-dir", str(runs), "--s3-endpoint", s3_endpoint.url)
    assert result.returncode == 1, result.stderr[-3000:]  # one job failed
    summary = json.loads(result.stdout)
    root = Path(summary["dir"])
    assert root.parent == runs / "sweeps" / "small"
    assert [j["status"] for j in summary["jobs"]] == ["ok", "ok", "failed"]

    results = json.loads((root / "run_results.json").read_text())
    assert results["environment"]["torch"] and results["environment"]["host"]
    jobs = results["jobs"]
    assert jobs[0]["command"].startswith("ckpt_launch.py ") and "--model tiny" in jobs[0]["command"]
    assert jobs[1]["report"]["config"]["storage"] == "s3" and jobs[1]["report"]["verified"] is True
    assert "missing-ckpt-bench" in jobs[2]["error"]
    for index, name in ((0, "results_tiny_disk.json"), (1, "results_tiny_s3.json")):
        job_dir = root / str(index)
        assert {"benchmark.log", "report.json", "job.json", name} <= {p.name for p in job_dir.iterdir()}
        assert json.loads((job_dir / name).read_text())["num_saved"] == 1
    assert "missing-ckpt-bench" in (root / "2" / "benchmark.log").read_text()
    rows = list(csv.DictReader(open(root / "results.csv")))
    assert [r["status"] for r in rows] == ["ok", "ok", "failed"]
    assert float(rows[0]["steady_save_bandwidth"]) > 0 and rows[1]["save_dir"].startswith("s3://")
    # Jobs compare on the steady save (one save each: that one), not the last save's Primus key, and say whether
    # it was fsynced (S3: neither).
    assert "save_bandwidth_in_mbps" not in rows[0]
    assert (rows[0]["fsync"], rows[1]["fsync"]) == ("True", "")

    # --resume: tests/unit/test_sweep_results.py (which jobs run again), test_faults.py (end to end).
