"""Nothing of ours outlives the launcher, and the launcher never crashes on its own writes (issue 22),
for real: a launcher killed with SIGKILL (mid-save, during rank start-up, on one node of two), a
checkpoint corrupted between the save and load passes, a runs folder that fills up or is read-only."""

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
from helpers import ROOT, assert_one_line_error, ckpt_report, launch
from test_faults import LONG_DCP, Launch, survivors

from ckpt_bench.launcher.torchrun import free_port

SHORT_DCP = ["--backend", "dcp", "--model", "tiny", "--dist-backend", "gloo", "--save-calls", "1",
             "--thread-count", "1"]


def wait_for_no_survivors(run_dir: Path, seconds: float = 5.0) -> list[str]:
    """Processes of the run still alive after `seconds` (none may be: the kernel tells the guard)."""
    deadline = time.monotonic() + seconds
    while survivors(run_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    return survivors(run_dir)


def _kill_them(found: list[str]) -> None:
    for line in found:  # leave the machine clean for the next test even when this one fails
        try:
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.parametrize("moment", ["saving checkpoint 3/400", "run directory:"])
def test_sigkill_of_the_launcher_leaves_no_process(tmp_path, moment):
    run = Launch(tmp_path, *LONG_DCP)
    run.wait_for(moment)  # mid-save, or while the ranks start (importing torch)
    while not run.worker_pids():
        time.sleep(0.05)
    run.process.send_signal(signal.SIGKILL)
    run.process.wait()
    left = wait_for_no_survivors(run.run_dir())
    _kill_them(left)
    assert not left, left
    if moment.startswith("saving"):  # what the report says of a run whose launcher died
        result = ckpt_report("--format", "json", str(run.run_dir()))
        report = json.loads(result.stdout)
        assert report["run"]["status"] == "incomplete", report["run"]
        assert any("did not finish this run" in note for note in report["notes"]), report["notes"]
        assert report["num_saved"] >= 2  # the saves it made are still counted


def _node(rank: int, runs: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "ckpt_launch.py"), *LONG_DCP[:-6], "--nproc-per-node", "1", "--save-calls", "400",
         "--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port),
         "--run-id", "job-1", "--runs-dir", str(runs)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)


def test_sigkill_of_each_node_launcher_leaves_no_process(tmp_path):
    runs, port = tmp_path / "runs", free_port()
    nodes = [_node(rank, runs, port) for rank in (0, 1)]
    for line in nodes[0].stderr:
        if "saving checkpoint 3/400" in line:
            break
    node1 = [p for p in psutil.process_iter(["cmdline"]) if "--node-rank" in (p.info["cmdline"] or [])
             and "1" == p.info["cmdline"][p.info["cmdline"].index("--node-rank") + 1]
             and str(runs) in " ".join(p.info["cmdline"])]
    nodes[1].send_signal(signal.SIGKILL)  # node 1's launcher: its torchrun and rank go with it
    nodes[1].wait()
    deadline = time.monotonic() + 5
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in node1) and time.monotonic() < deadline:
        time.sleep(0.2)
    nodes[0].send_signal(signal.SIGKILL)  # then node 0's
    nodes[0].wait()
    left = wait_for_no_survivors(runs / "job-1")
    _kill_them(left)
    assert not left, left


def _corrupt_between_passes(tmp_path: Path, corrupt, ranks: int = 2) -> tuple[int, dict, str]:
    """A run of `ranks` ranks whose checkpoint is changed after its save pass, before its load pass starts."""
    run = Launch(tmp_path, *SHORT_DCP, "--nproc-per-node", str(ranks), "--save-dir", str(tmp_path / "ckpt"),
                 "--keep-checkpoints")
    run.wait_for("saved checkpoint 1/1")
    while not (run.run_dir() / "logs" / "load").exists():
        time.sleep(0.05)  # the save pass ended: torchrun is starting the load pass's ranks (seconds)
    (folder,) = (tmp_path / "ckpt").iterdir()
    corrupt(folder / "iter_0000001")
    return run.finish()


def test_a_corrupted_checkpoint_exits_3(tmp_path):
    def flip(iteration: Path) -> None:
        path = max(iteration.glob("*.distcp"), key=lambda p: p.stat().st_size)
        with open(path, "r+b") as handle:
            handle.seek(path.stat().st_size // 2)
            data = handle.read(64)
            handle.seek(path.stat().st_size // 2)
            handle.write(bytes(b ^ 0xFF for b in data))

    returncode, report, stderr = _corrupt_between_passes(tmp_path, flip, ranks=1)  # one rank reads it: its verdict
    assert returncode == 3, stderr[-3000:]
    assert report["run"]["status"] == "verification-failed" and report["verification"]["mismatched"] > 0


def test_a_clobbered_metadata_is_one_line_in_the_report(tmp_path):
    returncode, report, stderr = _corrupt_between_passes(
        tmp_path, lambda iteration: (iteration / ".metadata").write_bytes(b"garbage" * 10))
    assert returncode == 1, stderr[-3000:]
    errors = [report["load"]["error"], *report["notes"]]
    assert all("\n" not in text and "Traceback" not in text for text in errors), errors
    assert report["load"]["error"].startswith("CheckpointException on ranks [0, 1]: rank 0:")


@pytest.fixture
def mount(tmp_path):
    """A tmpfs of the given size and options (root only, as in CI here); unmounted after the test."""
    mounted = []

    def make(name: str, options: str) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        command = ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)]
        if os.geteuid() != 0 or subprocess.run(command).returncode:
            pytest.skip("mounting a tmpfs needs root")
        mounted.append(folder)
        return folder

    yield make
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_read_only_runs_dir_is_one_line(tmp_path, mount):
    read_only = mount("ro", "size=1m,ro")
    for runs in (read_only, read_only / "runs"):
        result = launch(*SHORT_DCP, "--nproc-per-node", "2", runs_dir=runs)
        assert_one_line_error(result, "cannot create a run directory there (Read-only file system)")


def _readable(path: Path) -> bool:
    try:
        json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return True


def test_a_runs_dir_that_fills_after_the_load_never_crashes_the_launcher(tmp_path, mount):
    runs = mount("small", "size=2m")
    run = Launch(tmp_path, *SHORT_DCP, "--nproc-per-node", "2", "--save-dir", str(tmp_path / "ckpt"),
                 runs=runs / "runs")
    run.wait_for("loaded checkpoint 1/1")
    # The ranks write their verdicts right after that line; the disk fills once they have, as the pass ends.
    verdicts = run.run_dir() / "integrity"
    deadline = time.monotonic() + 60
    while sum(_readable(path) for path in verdicts.glob("load-rank-*.json")) < 2:
        assert time.monotonic() < deadline, "the ranks never wrote their load verdicts"
        time.sleep(0.05)
    filler = runs / "filler"
    with open(filler, "wb") as handle:  # the disk fills up as the load pass ends
        try:
            while True:
                handle.write(b"\0" * 65536)
        except OSError:
            pass
    returncode, report, stderr = run.finish()
    assert "Traceback" not in stderr, stderr[-3000:]
    assert returncode == 0 and report["run"]["status"] == "ok", stderr[-3000:]  # the report is on stdout
    assert "could not write" in stderr
    assert any("could not write" in note for note in report["notes"]), report["notes"]
    empty = [p for p in run.run_dir().rglob("*") if p.is_file() and p.stat().st_size == 0 and p.suffix != ".log"]
    assert not empty, empty  # never a 0-byte or half-written file of ours
    assert list((tmp_path / "ckpt").iterdir()) == []  # the checkpoints are still removed
