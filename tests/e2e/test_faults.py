"""Faults injected for real, mid-run: Ctrl-C and SIGTERM to the launcher (alone, and to its process
group as a terminal sends them), a rank killed with SIGKILL, a full disk, a dead S3 endpoint. Each
checks the exit code, the report, that no process of the run survives and what is left on disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import ROOT
from local_s3 import MOTO_SERVER, moto_server

from ckpt_bench.backends.dcp.launcher import WORKER

# DCP's smallest model, many saves: a run that is certainly mid-save when the signal comes.
LONG_DCP = ["--backend", "dcp", "--model", "tiny", "--dist-backend", "gloo", "--nproc-per-node", "2",
            "--save-calls", "400", "--thread-count", "1"]


class Launch:
    """`ckpt_launch.py` in its own session (so a signal to its group is what a terminal's Ctrl-C is)."""

    def __init__(self, tmp_path: Path, *args, env: dict | None = None, runs: Path | None = None):
        self.runs = runs or tmp_path / "runs"
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "ckpt_launch.py"), "--runs-dir", str(self.runs), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        self.stderr_lines: list[str] = []

    def wait_for(self, needle: str, timeout: float = 120) -> None:
        """Read stderr until a line holds `needle` (the run's progress lines)."""
        deadline = time.monotonic() + timeout
        for line in self.process.stderr:
            self.stderr_lines.append(line)
            if needle in line:
                return
            assert time.monotonic() < deadline, "".join(self.stderr_lines[-20:])
        raise AssertionError(f"{needle!r} never came:\n" + "".join(self.stderr_lines[-20:]))

    def finish(self, timeout: float = 120) -> tuple[int, dict | None, str]:
        stdout, stderr = self.process.communicate(timeout=timeout)
        self.stderr_lines.append(stderr)
        report = json.loads(stdout) if stdout.strip() else None
        return self.process.returncode, report, "".join(self.stderr_lines)

    def run_dir(self) -> Path:
        (run_dir,) = list(self.runs.iterdir())
        return run_dir

    def worker_pids(self) -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["cmdline"]) if WORKER in " ".join(p.info["cmdline"] or [])
                and str(self.runs) in " ".join(p.info["cmdline"] or [])]


def survivors(run_dir: Path) -> list[str]:
    """Processes whose command line names this run (its worker.json): none may outlive the run."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if str(run_dir) in cmdline:
            found.append(f"{process.info['pid']}: {cmdline[:200]}")
    return found


def test_ctrl_c_to_the_launcher_stops_every_process_and_reports(tmp_path):
    run = Launch(tmp_path, *LONG_DCP, "--save-dir", str(tmp_path / "ckpt"))
    run.wait_for("saving checkpoint 3/400")
    run.process.send_signal(signal.SIGINT)  # `kill -INT <launcher>`: the launcher alone
    returncode, report, stderr = run.finish()
    assert returncode == 130, stderr[-3000:]
    run_dir = run.run_dir()
    assert report == json.loads((run_dir / "report.json").read_text())
    assert report["run"]["status"] == "interrupted"
    assert report["run"]["interrupted"]["signal"] == "SIGINT"
    assert 0 < report["num_saved"] < 400  # the saves before the signal are reported
    assert not survivors(run_dir), survivors(run_dir)
    # The usual rule: the folder the run created is removed, and the report says so.
    assert list((tmp_path / "ckpt").iterdir()) == []
    assert any("removed" in note and "interrupted" in note for note in report["notes"]), report["notes"]
    assert "Traceback" not in stderr


def test_ctrl_c_twice_to_the_process_group_kills_at_once(tmp_path):
    run = Launch(tmp_path, *LONG_DCP)
    run.wait_for("saving checkpoint 2/400")
    os.killpg(run.process.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole foreground group
    run.wait_for("stopping the ranks")
    os.killpg(run.process.pid, signal.SIGINT)
    returncode, report, stderr = run.finish()
    assert returncode == 130 and "killing every process of the run now" in stderr, stderr[-3000:]
    assert report["run"]["status"] == "interrupted" and not survivors(run.run_dir())


def test_sigterm_keeps_checkpoints_when_asked_and_says_they_may_be_partial(tmp_path):
    run = Launch(tmp_path, *LONG_DCP, "--save-dir", str(tmp_path / "ckpt"), "--keep-checkpoints")
    run.wait_for("saving checkpoint 2/400")
    run.process.send_signal(signal.SIGTERM)
    returncode, report, stderr = run.finish()
    assert returncode == 143, stderr[-3000:]
    assert report["run"]["interrupted"]["signal"] == "SIGTERM" and not survivors(run.run_dir())
    (folder,) = list((tmp_path / "ckpt").iterdir())
    assert any(f"kept in {folder}" in note and "partial" in note for note in report["notes"]), report["notes"]


def test_a_rank_killed_mid_save_is_named_first(tmp_path):
    run = Launch(tmp_path, *LONG_DCP)
    run.wait_for("saving checkpoint 2/400")
    victim = next(p for p in run.worker_pids() if p.environ().get("RANK") == "1")
    victim.send_signal(signal.SIGKILL)
    returncode, report, stderr = run.finish()
    assert returncode == 1, stderr[-3000:]
    failures = [line for line in stderr.splitlines() if line.startswith("[save] rank ")]
    assert failures[0].startswith("[save] rank 1 failed (first failure; killed by SIGKILL from outside the run "
                                  "(not the kernel's OOM killer"), stderr[-3000:]
    assert all("stopped by torchrun" in line for line in failures[1:]), failures
    (save_pass,) = report["run"]["passes"]
    first = save_pass["failed_ranks"][0]
    assert (first["rank"], first["signal"], first["cause"]) == (1, "SIGKILL", "first failure")
    assert not survivors(run.run_dir())


@pytest.fixture
def small_disk(tmp_path):
    """A 48 MiB tmpfs (root only, as in CI here)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)]).returncode:
        pytest.skip("mounting a tmpfs needs root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_names_the_cause(tmp_path, small_disk):
    # The save (29 MiB) fits the free space checked up front; then something else fills the disk.
    run = Launch(tmp_path, "--backend", "dcp", "--model", "small", "--dist-backend", "gloo", "--nproc-per-node",
                 "2", "--save-calls", "1", "--save-dir", str(small_disk))
    run.wait_for("run directory:")
    (small_disk / "filler").write_bytes(b"\0" * (36 << 20))
    returncode, report, stderr = run.finish(timeout=180)
    assert returncode == 1, stderr[-3000:]
    cause = [line for line in stderr.splitlines() if "No space left on device" in line]
    assert cause and cause[0].startswith("[save] No space left on device"), stderr[-3000:]
    assert any("No space left on device" in note for note in report["notes"]), report["notes"]
    assert any("No space left on device" in (save.get("error") or "") for save in report["saves"]), report["saves"]
    assert not survivors(run.run_dir())
    assert [p.name for p in small_disk.iterdir()] == ["filler"]  # the partial checkpoint folder was ours: removed


@pytest.mark.skipif(not MOTO_SERVER.exists(), reason="moto_server not installed")
def test_dead_s3_endpoint_mid_save_never_crashes_the_launcher(tmp_path):
    with moto_server(tmp_path) as endpoint:
        bucket = endpoint.create_bucket()
        run = Launch(tmp_path, *LONG_DCP, "--save-dir", f"s3://{bucket}/prefix", *endpoint.options(),
                     "--s3-max-attempts", "2")
        run.wait_for("saving checkpoint 3/400")
        endpoint.stop()
        returncode, report, stderr = run.finish(timeout=240)
    assert returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr.split("last lines of its log")[0], stderr[-3000:]
    assert report == json.loads((run.run_dir() / "report.json").read_text())
    assert report["run"]["status"] == "failed"
    assert any("endpoint unreachable" in note for note in report["notes"]), report["notes"]
    assert report["not_cleaned_up"] == [f"s3://{bucket}/prefix/{run.run_dir().name}"]
    assert not survivors(run.run_dir())


def test_interrupted_sweep_job_is_recorded_and_resumed(tmp_path):
    sweep_file = tmp_path / "long.yaml"
    sweep_file.write_text(json.dumps({"name": "long", "backend": "dcp", "model": "tiny", "dist_backend": "gloo",
                                      "nproc_per_node": 1, "save_dir": str(tmp_path / "ckpt"),
                                      "sweep": {"save_calls": [25]}}))
    run = Launch(tmp_path, "--sweep", str(sweep_file))
    while not list(tmp_path.glob("runs/sweeps/long/*/0/*/events/rank-0.jsonl")):
        time.sleep(0.2)
    time.sleep(0.5)
    os.killpg(run.process.pid, signal.SIGINT)
    returncode, summary, stderr = run.finish()
    assert returncode == 130, stderr[-3000:]
    root = Path(summary["dir"])
    job = json.loads((root / "0" / "job.json").read_text())
    assert job["status"] == "interrupted" and job["error"] == "interrupted by SIGINT during the save pass", job
    assert (root / "results.csv").read_text().splitlines()[1].split(",")[1] == "interrupted"
    assert f"resume the sweep with: ckpt_launch.py --resume {root}" in stderr, stderr[-3000:]
    assert list((tmp_path / "ckpt").iterdir()) == []  # the interrupted attempt removed its checkpoints
    (first_run,) = [p for p in (root / "0").iterdir() if (p / "run.json").is_file()]
    resumed = Launch(tmp_path, "--resume", str(root))
    returncode, summary, stderr = resumed.finish(timeout=180)
    assert returncode == 0, stderr[-3000:]
    assert [job["status"] for job in summary["jobs"]] == ["ok"]
    # The interrupted attempt's logs are kept, set aside (README: what --resume removes).
    attempt = root / "0" / "attempts" / "1"
    assert "interrupted" in (attempt / "job.json").read_text() and (attempt / "benchmark.log").is_file()
    assert (attempt / first_run.name / "logs" / "save" / "console.log").is_file()
