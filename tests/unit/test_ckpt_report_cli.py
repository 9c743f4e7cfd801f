"""`ckpt_report.py` run as a user runs it: a subprocess, its stdout, stderr and exit code."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import LOGS, ROOT, ckpt_report
from helpers import REAL_LOGS as REAL

from ckpt_bench.core.events import CheckpointEvent, EventKind
from ckpt_bench.report.assembly import log_report
from ckpt_bench.report.engine import ReportBuilder
from ckpt_bench.report.parsers.session import LogSession
from ckpt_bench.report.parsers.sources import log_sources


def test_json_report_of_a_megatron_log(tmp_path):
    output = tmp_path / "report.json"
    result = ckpt_report(LOGS / "megatron_2024_untimestamped_sync.log", "--output", output)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert json.loads(output.read_text()) == report
    assert [s["total_time"] for s in report["saves"]] == [3.0, 2.0]
    assert report["save_total_time"] == 2.0 and report["ckpt_format"] == "torch_dist"


def test_real_legacy_log_as_a_table():
    path = REAL / "01_megatron_stdout_legacy_torch_save_2024.log"
    if not path.exists():
        pytest.skip("real fixtures not checked out beside the repo")
    result = ckpt_report(path, "--format", "table")
    assert result.returncode == 0, result.stderr
    # The same summary as ckpt_launch.py prints: a row per save, then the headline (no slowest rank: the
    # log's timer names none).
    rows = [line.split() for line in result.stdout.splitlines() if line.split()[:1] in (["1"], ["2"])]
    assert rows == [["1", "21.027", "21.027", "-", "-", "-", "yes"], ["2", "-", "-", "-", "-", "-", "no"]]
    assert "saves complete   1 of 2" in result.stdout
    assert "time source      megatron-timer (resolution 1e-05 s)" in result.stdout


def test_primus_tool_options(tmp_path):
    (tmp_path / "iter_0000200").mkdir()
    (tmp_path / "iter_0000200" / "shard.distcp").write_bytes(b"\0" * (1 << 20))
    result = ckpt_report("--primus-log-dir", LOGS / "primus_run" / "logs" / "pre_trainer", "--ckpt-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    first = json.loads(result.stdout)["saves"][0]
    assert (first["iteration"], first["bytes"], first["bandwidth"]) == (200, 1 << 20, round(1 / 3.9125, 2))


def test_no_checkpoint_event_is_one_line_and_exit_2():
    path = REAL / "05_primus_console_rank0_lines_2026.log"
    if not path.exists():
        pytest.skip("real fixtures not checked out beside the repo")
    result = ckpt_report(path)
    assert result.returncode == 2
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("error: no checkpoint save or load found")


@pytest.mark.parametrize(
    "args", [["/no/such/file.log"], [], ["--bogus"], ["--format", "xml", "x.log"]],
    ids=["missing path", "no path", "unknown option", "bad choice"],
)
def test_usage_errors_are_one_line_and_exit_2(args):
    result = ckpt_report(*args)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: ")
    assert "Traceback" not in result.stderr


def test_our_run_directory(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"run_info": {"world_size": 1, "ckpt_format": "torch_dist"},
                                                   "folder_sizes": {"10": 1 << 20}}))
    events = tmp_path / "events"
    events.mkdir()
    lines = [CheckpointEvent(kind, rank=0, iteration=10, mono_ns=t, wall_ns=t, seq=i).to_json()
             for i, (kind, t) in enumerate([(EventKind.SAVE_START, 0), (EventKind.SAVE_BLOCK_END, 10**9),
                                            (EventKind.SAVE_END, 2 * 10**9)], 1)]
    (events / "rank-0.jsonl").write_text("\n".join(lines) + "\n")
    result = ckpt_report(tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["save_block_time"], report["save_total_time"], report["save_bandwidth_in_mbps"]) == (1.0, 2.0, 0.5)
    assert report["ckpt_format"] == "torch_dist" and report["time_source"] == "recorded"


# -- what it prints, where, and logs of several runs (issue 20, item 8) -------------------------------------

SYNC = LOGS / "megatron_current_timestamped_sync.log"  # world size 8, torch_dist, saves 200 and 300, a load


def on_a_terminal(*args) -> str:
    """What `ckpt_report.py ARGS` prints with a terminal as its stdout."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, str(ROOT / "ckpt_report.py"), *map(str, args)], stdout=terminal,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 1 << 16)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    assert process.wait(timeout=60) == 0, process.stderr.read()
    return b"".join(chunks).decode()


def test_a_terminal_gets_the_summary_a_pipe_json():
    printed = on_a_terminal(SYNC)
    assert "Saves and load" in printed and "steady save" in printed and not printed.lstrip().startswith("{")
    piped = ckpt_report(SYNC)
    assert piped.returncode == 0 and json.loads(piped.stdout)["num_saved"] == 2


def shifted(tmp_path: Path, name: str, days: int = 1, **replace: str) -> Path:
    """A copy of SYNC `days` later (its times no longer overlap SYNC's), with other text replaced."""
    text = SYNC.read_text().replace("[2025-06-01 ", f"[2025-06-{1 + days:02d} ")
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    (tmp_path / name).write_text(text)
    return tmp_path / name


@pytest.mark.parametrize(("other", "why"), [
    ({"days": 0}, "their times overlap"),
    ({"world_size ...................................... 8": "world_size ...................................... 16"},
     "world_size 16 vs 8"),
    ({"ckpt_format ..................................... torch_dist":
      "ckpt_format ..................................... torch"}, "ckpt_format torch vs torch_dist"),
], ids=["clocks overlap", "world sizes differ", "arguments differ"])
def test_logs_of_different_jobs_are_runs_apart(tmp_path, other, why):
    days = other.pop("days", 1)
    second = shifted(tmp_path, "second.log", days, **other)
    report = log_report([SYNC, second])
    assert [run["sources"] for run in report["runs"]] == [[str(SYNC)], [str(second)]]
    assert [run["num_saved"] for run in report["runs"]] == [2, 2]
    assert report["notes"][0] == "these logs are 2 runs, reported apart"
    assert report["notes"][1] == f"{second} is not a log of run 1 ({why})"


def test_a_job_and_its_restart_in_two_files_are_one_report(tmp_path):
    lines = (LOGS / "megatron_killed_mid_save_restart.log").read_text().splitlines(keepends=True)
    restart = next(i for i, line in enumerate(lines) if i and "--- arguments ---" in line)
    (tmp_path / "a.log").write_text("".join(lines[:restart]))
    (tmp_path / "b.log").write_text("".join(lines[restart:]))
    paths = [tmp_path / "a.log", tmp_path / "b.log"]
    report = log_report(paths)
    # As the two were always read: one stream of events, one session (each log's parser ends with its log).
    session = LogSession()
    one_stream = ReportBuilder().add_all(session.events(log_sources(paths))).build(run_info=session.run_info)
    assert "runs" not in report
    beside = ("notes", "training")  # what assembly adds beside the engine's report
    assert {k: v for k, v in report.items() if k not in beside} == {k: v for k, v in one_stream.items()
                                                                     if k not in beside}
    assert report["notes"][:len(session.notes)] == session.notes
    assert report.get("training") == session.iteration_times.training()


def test_a_folder_of_logs_is_read_below_by_content(tmp_path):
    (tmp_path / "job" / "slurm").mkdir(parents=True)
    shutil.copy(SYNC, tmp_path / "job" / "slurm" / "stdout.txt")  # any name: the content says it is a log
    (tmp_path / "job" / "README.md").write_text("# notes on the run\n")
    (tmp_path / "job" / "model.pt").write_bytes(b"PK\x03\x04\x00\x00 checkpoint")
    (tmp_path / "job" / ".hidden.log").write_text(SYNC.read_text())
    report = log_report([tmp_path])
    assert "runs" not in report and report["num_saved"] == 2
    assert f"{tmp_path}: not read: {tmp_path / 'job' / 'model.pt'} (not text)" in report["notes"]
    assert f"no checkpoint save or load in {tmp_path / 'job' / 'README.md'}" in report["notes"]


def test_runs_in_the_summary_each_with_its_sources(tmp_path):
    second = shifted(tmp_path, "second.log", **{"world_size ...................................... 8":
                                                "world_size ...................................... 16"})
    result = ckpt_report(SYNC, second, "--format", "table")
    assert result.returncode == 0, result.stderr
    assert f"Run 1 of 2: {SYNC}" in result.stdout and f"Run 2 of 2: {second}" in result.stdout
    assert result.stdout.count("Saves and load") == 2
    assert f"{second} is not a log of run 1 (world_size 16 vs 8)" in result.stdout
    html = ckpt_report(SYNC, second, "--html", tmp_path / "r.html")
    assert html.returncode == 2 and "--html draws one run; these logs are 2 runs" in html.stderr
