"""s3torchbenchmarking's configs run unchanged (tests/fixtures/peers/, their shapes) with the overrides
its scripts pass, against disk and the loopback S3 endpoint; the result files are read back as its
collector reads them (run_results.json's job_results, each job's job_results.json).

Kept small: `+model=tiny` (ckpt-bench's own 0.15M-parameter shape; their smallest, vit-base, is 330 MiB)
and one rank. Between them the tests run the current DCP config on disk and S3, the Jan 2025 one on disk
and the Lightning one on S3 (pytorch_checkpointing takes Lightning's path: tests/unit/test_peer_configs.py).
"""

import json
from pathlib import Path

from helpers import ROOT, launch

PEERS = ROOT / "tests" / "fixtures" / "peers"


def their_collector(sweep_dir: Path) -> list[dict]:
    """What s3torchbenchmarking's notebook reads: run_results.json's job_results, one per job."""
    run = json.loads((sweep_dir / "run_results.json").read_text())
    assert run["scenario"] and run["versions"]["hydra"] and run["run_elapsed_time_s"] > 0
    for index, job in enumerate(run["job_results"]):
        assert json.loads((sweep_dir / str(index) / "job_results.json").read_text()) == job
    return run["job_results"]


def run_theirs(tmp_path, s3_endpoint, config: str, jobs: int, *overrides: str) -> tuple[Path, object]:
    bucket = s3_endpoint.create_bucket()
    sweep_dir = tmp_path / "multirun"
    result = launch("--sweep", PEERS / config, f"+path={tmp_path / 'nvme'}/", f"s3.region={s3_endpoint.region}",
                    f"s3.uri=s3://{bucket}/ckpt/", f"hydra.sweep.dir={sweep_dir}", "+model=tiny", *overrides,
                    "--s3-endpoint", s3_endpoint.url)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["summary"] == {"ok": jobs}
    assert s3_endpoint.object_keys(bucket) == []  # every job removed what it wrote
    return sweep_dir, result


def test_current_dcp_config_on_disk_and_s3(tmp_path, s3_endpoint):
    sweep_dir, _ = run_theirs(tmp_path, s3_endpoint, "dcp_ddp_save.yaml", 2, "+backend=gloo", "+world_size=1",
                              "+thread_count=1", "epochs=1")
    jobs = their_collector(sweep_dir)
    assert [job["config"]["checkpoint"]["storage"] for job in jobs] == ["disk", "s3"]
    for index, job in enumerate(jobs):
        metrics = job["metrics"]
        assert len(metrics["throughput_mibs"]) == 1 == len(metrics["corrected_save_durations_s"])  # 1 rank, 1 epoch
        assert metrics["throughput_mibs"][0] == metrics["model_mib"] / metrics["corrected_save_durations_s"][0]
        assert metrics["written_bytes_bandwidth_mibs"][0] > 0
        report = json.loads((sweep_dir / str(index) / "report.json").read_text())  # ours, beside theirs
        assert report["verified"] is True and report["config"]["model"] == "tiny"
    assert (sweep_dir / "0" / "results_tiny_gloo_1_1_disk.json").is_file()
    assert (sweep_dir / "multirun.yaml").is_file() and (sweep_dir / "ckpt_bench_results.json").is_file()


def test_jan_2025_dcp_config_epochs_are_fresh_processes(tmp_path, s3_endpoint):
    """The Jan 2025 shape (conf/dcp.yaml), its disk job: epochs=2 is two fresh sets of processes, one save
    each (--repeat 2 --save-calls 1), and each rank's throughput is listed once per epoch. (This is also
    the end-to-end test of --repeat.)"""
    sweep_dir, _ = run_theirs(tmp_path, s3_endpoint, "dcp.yaml", 1, "+backend=gloo", "+world_size=1",
                              "+thread_count=1", "epochs=2", "+checkpoint.storage=disk")
    [job] = their_collector(sweep_dir)
    assert job["config"]["epochs"] == 2 and job["config"]["checkpoint"]["storage"] == "disk"
    assert len(job["metrics"]["throughput_mibs"]) == 2 == len(job["metrics"]["corrected_save_durations_s"])
    # Our report of the job: --repeat's, two fresh runs (as their mp.spawn) and their statistics.
    report = json.loads((sweep_dir / "0" / "report.json").read_text())
    folder = Path(report["run"]["dir"])
    assert [r["status"] for r in report["repeats"]] == ["ok", "ok"]
    assert report["run"]["repetitions"] == [str(folder / "rep-1"), str(folder / "rep-2")]
    assert all((folder / f"rep-{k}" / "report.json").is_file() for k in (1, 2))
    assert report["repeat_stats"]["save_total_time"]["n"] == 2
    assert report["save_total_time"] == report["repeat_stats"]["save_total_time"]["median"]


def test_lightning_config_on_s3(tmp_path, s3_endpoint):
    """Its S3 job only (the disk path is the DCP test's and the Lightning backend's own tests')."""
    sweep_dir, result = run_theirs(tmp_path, s3_endpoint, "lightning_checkpointing.yaml", 1, "epochs=2",
                                   "+checkpoint.storage=s3")
    assert "note: save_one_in recorded, unused" in result.stderr
    [job] = their_collector(sweep_dir)
    assert job["config"]["checkpoint"]["storage"] == "s3" and job["config"]["epochs"] == 2
    metrics = job["metrics"]
    assert len(metrics["save_times_s"]) == 2 == len(metrics["throughput_mibs"])  # 2 saves in one process
    assert metrics["throughput_mibs"][1] == metrics["model_mib"] / metrics["save_times_s"][1]
    assert metrics["utilization"] == {}
