"""`ckpt_report.py` run as a user runs it: a subprocess, its stdout, stderr and exit code."""

from __future__ import annotations

import json

import pytest
from helpers import LOGS, ckpt_report
from helpers import REAL_LOGS as REAL

from ckpt_bench.core.events import CheckpointEvent, EventKind


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
    # The same summary as ckpt_launch.py prints: a row per save, then the headline.
    rows = [line.split() for line in result.stdout.splitlines() if line.split()[:1] in (["1"], ["2"])]
    assert rows == [["1", "21.027", "21.027", "-", "-", "0", "yes"], ["2", "-", "-", "-", "-", "-", "no"]]
    assert "saves complete    1 of 2" in result.stdout
    assert "time source       megatron-timer (resolution 1e-05 s)" in result.stdout


def test_primus_tool_options(tmp_path):
    (tmp_path / "iter_0000200").mkdir()
    (tmp_path / "iter_0000200" / "shard.distcp").write_bytes(b"\0" * (1 << 20))
    result = ckpt_report("--primus-log-dir", LOGS / "primus_run" / "logs" / "pre_trainer", "--ckpt-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    first = json.loads(result.stdout)["saves"][0]
    assert (first["iteration"], first["bytes"], first["bandwidth"]) == (200, 1 << 20, round(1 / 3.9125, 2))


def test_no_checkpoint_event_is_one_line_and_exit_1():
    path = REAL / "05_primus_console_rank0_lines_2026.log"
    if not path.exists():
        pytest.skip("real fixtures not checked out beside the repo")
    result = ckpt_report(path)
    assert result.returncode == 1
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
