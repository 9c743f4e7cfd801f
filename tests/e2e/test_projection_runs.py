"""The projection of the whole job end to end (docs/projection.md): a subset of whole hosts, the busiest, runs for
real and measures its client; the report projects the job's save and restart with the engine's global steps
computed at its size; ckpt_report.py projects the same run again with other figures; --plan gives it without
running; the advice takes the job's GPUs and the projected costs."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import ROOT, launch, launch_ok

MOE = ("--workload", ROOT / "ckpt_bench" / "configs" / "tiny_gpt.yaml", "--set", "num_experts=4", "--set",
       "moe_router_topk=2", "--set", "expert_model_parallel_size=2", "--set", "add_bias_linear=false",
       "--job-ranks", "8", "--nproc-per-node", "2", "--engine", "dcp")


def test_a_busiest_host_subset_projects_the_whole_job_and_the_report_projects_it_again(tmp_path):
    report = launch_ok(*MOE, "--subset", "--subset-hosts", "busiest", "--save-calls", "3", "--load-calls", "1",
                       "--time-between-checkpoints", "0", "--storage-write-gbps", "0.5", "--network-gbps", "10",
                       "--gpu-mttf-hours", "50000", "--format", "json", runs_dir=tmp_path / "runs",
                       env={"CKPT_BENCH_HTML": "1"})
    projection = report["projection"]
    job = projection["job"]
    assert job["ranks"] == 8 and job["nodes"] == 4 and job["ranks_per_node"] == 2
    busiest = projection["save_traffic"]["busiest_host"]
    assert job["hosts_that_ran"] == [busiest["host"]]  # the run's one host played the job's busiest
    ran = report["config"]["subset_job_ranks"]
    assert ran == [2 * busiest["host"], 2 * busiest["host"] + 1]
    client = projection["inputs"]["client_write_gbps"]
    assert client["value"] > 0 and client["source"].startswith(f"measured: job host {busiest['host']}")
    assert projection["inputs"]["client_read_gbps"]["value"] > 0
    names = [step["name"] for step in projection["rank_costs"]["steps"]]
    assert names == ["global plan", "finalize", "metadata", "load plan"]  # DCP's, computed at 8 ranks
    save = projection["save"]
    assert save["seconds"] is not None and save["binding"] in ("client", "storage")
    storage = next(t for t in save["terms"] if t["name"] == "storage")
    assert storage["seconds"] == round(projection["save_traffic"]["bytes"] / 0.5e9, 3)
    # The advice: the job's 8 GPUs, not the 2 that ran, and the projected save.
    advice = report["advice"]
    assert "/ 8 GPUs" in advice["mtbf_from"] and advice["checkpoint_cost_s"] == save["seconds"]

    # ckpt_report.py projects the run again with another storage figure: the storage term halves.
    again = subprocess.run([sys.executable, str(ROOT / "ckpt_report.py"), report["run"]["dir"], "--format", "json",
                            "--storage-write-gbps", "1"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert again.returncode == 0, again.stderr
    redone = json.loads(again.stdout)["projection"]
    assert redone["inputs"]["storage_write_gbps"]["value"] == 1.0
    assert next(t for t in redone["save"]["terms"] if t["name"] == "storage")["seconds"] == round(
        storage["seconds"] / 2, 3)
    html = (tmp_path / "runs" / report["run"]["dir"].rsplit("/", 1)[1] / "report.html").read_text()
    assert 'id="projection"' in html and "projection-steps-table" in html


def test_plan_projects_the_job_on_given_figures_and_refuses_a_bad_one(tmp_path):
    result = launch(*MOE, "--nnodes", "4", "--plan", "--format", "json", "--storage-write-gbps", "2",
                    "--client-write-gbps", "0.01", env={"CKPT_BENCH_CACHE": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    projection = json.loads(result.stdout)["projection"]
    assert projection["save"]["binding"] == "client"  # 10 MB/s a host against 2 GB/s in all
    assert projection["inputs"]["client_write_gbps"]["source"] == "--client-write-gbps"
    assert any(tmp_path.rglob("*.json"))  # the global steps' computation, cached
    bad = launch(*MOE, "--nnodes", "4", "--plan", "--storage-write-gbps", "-3")
    assert bad.returncode == 2 and bad.stderr.strip().endswith("--storage-write-gbps -3: must be a positive number")
