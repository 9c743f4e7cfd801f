"""Two torchrun agents on one machine (node ranks 0 and 1, loopback): one run directory, one report."""

import json
import subprocess
import sys

from helpers import ROOT

from ckpt_bench.launcher.torchrun import free_port


def node(rank, runs_dir, port, *extra):
    return subprocess.Popen(
        [sys.executable, str(ROOT / "ckpt_launch.py"), "--backend", "comms", "--nnodes", "2",
         "--nproc-per-node", "1", "--node-rank", str(rank), "--master-addr", "127.0.0.1",
         "--master-port", str(port), "--run-id", "job-1", "--runs-dir", str(runs_dir), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )


def test_two_agents_one_report(tmp_path):
    runs, port = tmp_path / "runs", free_port()
    agents = [node(rank, runs, port, "--comms-max-size", "4KiB", "--preflight") for rank in (1, 0)]
    (out1, err1), (out0, err0) = (agent.communicate(timeout=180) for agent in agents)
    assert agents[1].returncode == 0, err0
    assert agents[0].returncode == 0, err1

    run = runs / "job-1"
    report = json.loads(out0)
    assert report == json.loads((run / "report.json").read_text())
    assert [p.name for p in runs.iterdir()] == ["job-1"]  # node 1 joined node 0's run directory
    assert report["comms"]["world_size"] == 2 and report["comms"]["nnodes"] == 2
    assert report["config"]["world_size"] == 2
    passes = [(p["name"], p["node_rank"], p["ok"]) for p in report["run"]["passes"]]
    assert passes == [("preflight", 0, True), ("preflight", 1, True), ("comms", 0, True), ("comms", 1, True)]
    for name in ("preflight", "comms"):
        for rank in (0, 1):
            assert (run / "logs" / name / f"node-{rank}" / "console.log").is_file()
    assert json.loads(out1)["run"]["node_rank"] == 1  # node 1 reports where the report is


def test_multi_node_needs_a_run_id_and_a_port(tmp_path):
    base = [sys.executable, str(ROOT / "ckpt_launch.py"), "--backend", "comms", "--nnodes", "2",
            "--runs-dir", str(tmp_path)]
    no_id = subprocess.run([*base, "--master-port", "29999"], capture_output=True, text=True, cwd=ROOT)
    no_port = subprocess.run([*base, "--run-id", "x"], capture_output=True, text=True, cwd=ROOT)
    assert no_id.returncode == 2 and "--run-id" in no_id.stderr
    assert no_port.returncode == 2 and "--master-port" in no_port.stderr
    assert not any(tmp_path.iterdir())


def test_two_hosts_measure_the_storage_from_one_then_both_at_once(tmp_path):
    """--storage-baseline in a multi-node run: beside node 0's own baseline, rounds of 1 and 2 hosts writing their
    shares at once (launcher.hosts_baseline); the projection of the job takes the ceiling they found."""
    runs, port = tmp_path / "runs", free_port()
    tiny = ROOT / "tests" / "fixtures" / "workloads" / "dlio_tiny_zero3.yaml"
    agents = [subprocess.Popen(
        [sys.executable, str(ROOT / "ckpt_launch.py"), "--workload", str(tiny), "--nnodes", "2", "--nproc-per-node",
         "1", "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port), "--run-id", "job-2",
         "--runs-dir", str(runs), "--save-calls", "1", "--load-calls", "0", "--time-between-checkpoints", "0",
         "--storage-baseline", "--network-gbps", "1", "--format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT) for rank in (1, 0)]
    (out1, err1), (out0, err0) = (agent.communicate(timeout=300) for agent in agents)
    assert agents[1].returncode == 0, err0[-2000:]
    assert agents[0].returncode == 0, err1[-2000:]
    report = json.loads(out0)
    hosts = report["storage_baseline"]["hosts"]
    assert [r["hosts"] for r in hosts["rounds"]] == [1, 2]
    assert all(r["write_gbps"] > 0 and r["read_gbps"] > 0 for r in hosts["rounds"])
    assert hosts["rounds"][1]["bytes"] > hosts["rounds"][0]["bytes"]  # both hosts' shares
    storage = report["projection"]["inputs"]["storage_write_gbps"]
    assert storage["value"] == hosts["write_ceiling_gbps"] and storage["source"].startswith("measured: the storage")
    assert storage["at_least"] is (not hosts["write_ceiling_reached"])
