"""Sweeps: a 4-job sweep over disk and S3 (a failing job included), resumed; sweep file validation."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.config import ConfigError
from bench.sweep import build_sweep, load_sweep

ROOT = Path(__file__).resolve().parents[1]


def launch(*args):
    return subprocess.run([sys.executable, str(ROOT / "ckpt_launch.py"), *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_sweep_runs_every_job_and_resumes(tmp_path, s3_endpoint):
    bucket = s3_endpoint.create_bucket()
    sweep_file = tmp_path / "small.yaml"
    sweep_file.write_text(yaml.safe_dump({
        "name": "small",
        "backend": "dcp",
        "nproc_per_node": 1,
        "save_calls": 1,
        "s3_region": s3_endpoint.region,
        # `nope` is not a model: its jobs fail at planning, and the sweep goes on.
        "sweep": {"model": ["tiny", "nope"], "save_dir": [str(tmp_path / "ckpts"), f"s3://{bucket}/sweep"]},
    }, sort_keys=False))
    runs = tmp_path / "runs"
    # --s3-endpoint on the command line: a fixed setting of every job, recorded in sweep.yaml.
    result = launch("--sweep", str(sweep_file), "--runs-dir", str(runs), "--s3-endpoint", s3_endpoint.url)
    assert result.returncode == 1, result.stderr[-3000:]  # two jobs failed
    summary = json.loads(result.stdout)
    root = Path(summary["dir"])
    assert root.parent == runs / "sweeps" / "small"
    assert [(j["model"], j["status"]) for j in summary["jobs"]] == [
        ("tiny", "ok"), ("tiny", "ok"), ("nope", "failed"), ("nope", "failed")]

    results = json.loads((root / "run_results.json").read_text())
    assert results["environment"]["torch"] and results["environment"]["host"]
    jobs = results["jobs"]
    assert jobs[0]["command"].startswith("ckpt_launch.py ") and "--model tiny" in jobs[0]["command"]
    assert jobs[1]["report"]["config"]["storage"] == "s3" and jobs[1]["report"]["verified"] is True
    assert "--model 'nope' is not known" in jobs[2]["error"]
    for index, name in ((0, "results_tiny_disk.json"), (1, "results_tiny_s3.json")):
        job_dir = root / str(index)
        assert {"benchmark.log", "report.json", "job.json", name} <= {p.name for p in job_dir.iterdir()}
        assert json.loads((job_dir / name).read_text())["num_saved"] == 1
    assert "--model 'nope' is not known" in (root / "2" / "benchmark.log").read_text()
    rows = list(csv.DictReader(open(root / "results.csv")))
    assert [r["status"] for r in rows] == ["ok", "ok", "failed", "failed"]
    assert float(rows[0]["save_bandwidth_in_mbps"]) > 0 and rows[1]["save_dir"].startswith("s3://")

    # An interrupted sweep: job 1 was running when it was killed. --resume reruns it (and the failed
    # jobs) and leaves job 0 alone.
    job1 = json.loads((root / "1" / "job.json").read_text())
    (root / "1" / "job.json").write_text(json.dumps({**job1, "status": "running"}))
    (root / "1" / "report.json").unlink()
    job0_log = (root / "0" / "benchmark.log").stat().st_mtime_ns
    result = launch("--resume", str(root))
    assert result.returncode == 1, result.stderr[-3000:]
    assert "4 jobs" in result.stderr and "1 finished before, skipped" in result.stderr
    assert (root / "0" / "benchmark.log").stat().st_mtime_ns == job0_log
    assert json.loads((root / "1" / "job.json").read_text())["status"] == "ok"
    assert (root / "1" / "report.json").is_file()
    results = json.loads((root / "run_results.json").read_text())
    assert results["summary"] == {"failed": 2, "ok": 2}


def _sweep(**definition):
    return build_sweep({"backend": "dcp", **definition}, "test.yaml")


@pytest.mark.parametrize(
    "definition,needle",
    [
        ({}, "`sweep:` must map option names to lists"),
        ({"sweep": {"thread_count": 2}}, "sweep.thread_count must be a non-empty list"),
        ({"sweep": {"thread_count": []}}, "sweep.thread_count must be a non-empty list"),
        ({"sweep": {"thread_counts": [1]}}, "'thread_counts' is not an option of ckpt_launch.py (did you mean "
                                            "'thread_count'?)"),
        ({"nproc-per-node": 2, "sweep": {"model": ["tiny"]}}, "'nproc-per-node' is not an option"),
        ({"runs_dir": "x", "sweep": {"model": ["tiny"]}}, "'runs_dir' cannot be set in a sweep file"),
        ({"model": "tiny", "sweep": {"model": ["tiny"]}}, "model is both fixed and swept"),
        ({"sweep": {"thread_count": [1, 0]}}, "job 1 (thread_count=0): Invalid value for '--thread-count'"),
        ({"sweep": {"dist_backend": ["mpi"]}}, "job 0 (dist_backend=mpi): Invalid value for '--dist-backend'"),
    ],
)
def test_sweep_file_mistakes(definition, needle):
    with pytest.raises(ConfigError) as raised:
        _sweep(**definition)
    assert needle in str(raised.value) and "\n" not in str(raised.value)


def test_sweep_mistake_on_the_command_line(tmp_path):
    result = launch("--sweep", str(tmp_path / "missing.yaml"), "--runs-dir", str(tmp_path / "runs"))
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: --sweep {tmp_path / 'missing.yaml'}: sweep file not found"
    assert not (tmp_path / "runs").exists()


def test_jobs_are_cli_invocations_in_declaration_order():
    sweep = _sweep(save_calls=2, sweep={"model": ["tiny", "small"], "async_save": [False, True]})
    assert [job.params for job in sweep.jobs] == [
        {"model": "tiny", "async_save": False}, {"model": "tiny", "async_save": True},
        {"model": "small", "async_save": False}, {"model": "small", "async_save": True}]
    job = sweep.jobs[1]
    assert job.argv == ["--backend", "dcp", "--save-calls", "2", "--model", "tiny", "--async-save"]
    assert job.options["nproc_per_node"] == 2 and job.options["save_calls"] == 2  # click's defaults and types
    assert job.report_name == "results_tiny_async_save.json"


def test_shipped_sweeps():
    dcp = load_sweep(ROOT / "configs/sweeps/dcp.yaml")
    assert len(dcp.jobs) == 8
    assert "results_vit-base_gloo_2_2_s3.json" in {job.report_name for job in dcp.jobs}
    assert {job.options["backend"] for job in dcp.jobs} == {"dcp"}
    megatron = load_sweep(ROOT / "configs/sweeps/megatron_parallelism.yaml")
    assert [job.params for job in megatron.jobs][1] == {"tp": 1, "ckpt_format": "torch"}
    assert {job.options["backend"] for job in megatron.jobs} == {"megatron"}
    for name in ("dcp_disk.yaml", "dcp_ddp_ec2.yaml"):
        assert load_sweep(ROOT / "configs/sweeps" / name).jobs
