"""Bad input gives a report that says what was wrong, never a traceback or a number that cannot be."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import LOGS, ROOT, assert_one_line_error, ckpt_report

from ckpt_bench.core.errors import ReportError
from ckpt_bench.core.events import CheckpointEvent, EventKind, TimeSource
from ckpt_bench.report.assembly import log_report, to_json
from ckpt_bench.report.engine import build_report
from ckpt_bench.report.parsers import PARSERS
from ckpt_bench.report.parsers.lines import Line, read_lines
from ckpt_bench.report.parsers.megatron import MegatronParser
from ckpt_bench.report.parsers.session import events_of
from ckpt_bench.report.parsers.sources import resolve

SYNC = LOGS / "megatron_current_timestamped_sync.log"  # saves 200 (4.5 s) and 300 (3.5 s), timestamped


def damaged(tmp_path: Path, source: Path, old: str, new: str) -> Path:
    text = source.read_text()
    assert old in text
    path = tmp_path / source.name
    path.write_text(text.replace(old, new, 1))
    return path


def saves(report: dict) -> list[tuple]:
    return [(s["iteration"], s["complete"], s["block_time"], s["total_time"]) for s in report["saves"]]


@pytest.mark.parametrize(
    ("source", "old", "new", "why"),
    [
        (SYNC, "[2025-06-01 10:02:00.000000] saving", "[2025-06-31 10:02:00.000000] saving",
         "day is out of range for month"),
        (LOGS / "primus_console_interleaved_async.log", "20250601 10:00:09", "20251301 10:00:09",
         "month must be in 1..12"),
        (LOGS / "megatron_2024_untimestamped_sync.log", "(2900.00, 3000.00)", "(2900.00, 3000..00)",
         "could not convert string to float: '3000..00'"),
    ],
    ids=["megatron date", "primus month 13", "timer value"],
)
def test_an_unreadable_line_is_skipped_and_noted(tmp_path, source, old, new, why):
    path = damaged(tmp_path, source, old, new)
    report = log_report([path])
    number = next(i for i, line in enumerate(path.read_text().splitlines(), 1) if new in line)
    assert f"1 line of {path} could not be read and was skipped; the first: {path} line {number} ({why})" \
        in report["notes"]


def test_an_unreadable_timer_does_not_go_to_the_next_save(tmp_path):
    path = damaged(tmp_path, LOGS / "megatron_2024_untimestamped_sync.log", "(2900.00, 3000.00)", "(2900.00, 3..0)")
    assert saves(log_report([path])) == [(100, True, None, None), (200, True, 2.0, 2.0)]


def test_an_end_before_its_start_is_no_complete_save(tmp_path):
    path = damaged(tmp_path, SYNC, "[2025-06-01 10:02:00.000000] saving", "[2025-06-01 10:09:00.000000] saving")
    report = log_report([path])
    assert saves(report) == [(200, True, 4.5, 4.5), (300, False, None, None)]
    assert report["stats"]["total_time"]["n"] == 1 and report["num_saved"] == 1
    assert "save at iteration 300 is incomplete: its end is 416.5 s before its start: the source's times are " \
           "inconsistent, so its times are left out" in report["notes"]


def test_a_load_ending_before_its_start_has_no_time():
    start = CheckpointEvent(EventKind.LOAD_START, rank=0, iteration=7, wall_ns=10**10, source=TimeSource.PRIMUS_PREFIX)
    end = CheckpointEvent(EventKind.LOAD_END, rank=0, iteration=7, wall_ns=5 * 10**9, source=TimeSource.PRIMUS_PREFIX)
    report = build_report([start, end])
    assert (report["load"]["complete"], report["load_time"], report["load"]["time_source"]) == (False, None, None)
    assert any(n.startswith("load at iteration 7 is incomplete: its end is 5 s before its start")
               for n in report["notes"])


def test_json_is_strict_non_finite_numbers_become_null_and_a_note(tmp_path):
    report = {"world_size": float("inf"), "config": {"lr": float("nan")}, "saves": [{"bandwidth": 1.5}], "notes": []}
    data = json.loads(to_json(report), parse_constant=pytest.fail)
    assert data == {"world_size": None, "config": {"lr": None}, "saves": [{"bandwidth": 1.5}],
                    "notes": ["not a finite number, written as null: world_size, config.lr"]}
    assert report["world_size"] == float("inf")  # the caller's dict is left as it was
    assert to_json([float("-inf")]) == "[\n  null\n]"  # not a report: nowhere to say it


def test_ckpt_report_writes_strict_json(tmp_path):
    dumped = "world_size ...................................... "
    path = damaged(tmp_path, LOGS / "megatron_2024_untimestamped_sync.log", f"{dumped}8", f"{dumped}inf")
    output = tmp_path / "report.json"
    result = ckpt_report(path, "--output", output)
    assert result.returncode == 0, result.stderr
    for text in (result.stdout, output.read_text()):
        report = json.loads(text, parse_constant=pytest.fail)
        assert report["world_size"] is None
        assert "not a finite number, written as null: world_size" in report["notes"]


class _CsvParser(MegatronParser):
    """A made-up format, `ckpt,<iteration>,<start s>,<end s>`: what a new format has to provide."""

    format = "csv"

    @classmethod
    def sniff(cls, first_lines: list[str]) -> bool:
        return bool(first_lines) and first_lines[0].startswith("ckpt,")

    @classmethod
    def lines(cls, streams: list[list[Path]], notes: list[str]) -> Iterator[Line]:
        (files,) = streams
        return ((files, number, raw.decode()) for number, raw in enumerate(read_lines(files[0], notes), 1))

    def feed(self, line: str, seq: int) -> list[CheckpointEvent]:
        _, iteration, start, end = line.split(",")
        return [CheckpointEvent(kind, rank=0, iteration=int(iteration), wall_ns=int(float(t) * 1e9), seq=seq,
                                source=TimeSource.MEGATRON_TIMESTAMP)
                for kind, t in ((EventKind.SAVE_START, start), (EventKind.SAVE_BLOCK_END, end),
                                (EventKind.SAVE_END, end))]


def test_a_new_format_is_a_parser_class_in_the_list(tmp_path, monkeypatch):
    monkeypatch.setattr("ckpt_bench.report.parsers.sources.PARSERS", (_CsvParser, *PARSERS))
    path = tmp_path / "saves.csv"
    path.write_text("ckpt,10,0,2.5\nckpt,20,10,11\nckpt,30,20,x\n")
    assert resolve(path).parser_class is _CsvParser
    report = log_report([path])
    assert saves(report) == [(10, True, 2.5, 2.5), (20, True, 1.0, 1.0)]
    assert report["notes"][0] == f"parsed csv log {path}"
    assert any(n.startswith(f"1 line of {path} could not be read") for n in report["notes"])
    assert resolve(SYNC).parser_class is MegatronParser  # the others are sniffed as before


def test_events_of_logs_in_order():
    events = list(events_of([LOGS / "megatron_2024_untimestamped_sync.log", SYNC]))
    starts = [e.iteration for e in events if e.kind == EventKind.SAVE_START]
    assert starts == [100, 200, 200, 300]
    assert [e.seq for e in events] == sorted(e.seq for e in events)


def test_events_of_refuses_a_run_directory(tmp_path):
    (tmp_path / "run.json").write_text("{}")
    with pytest.raises(ReportError, match="is a run directory"):
        list(events_of([tmp_path]))


def test_a_damaged_run_directory_is_one_line(tmp_path):
    (tmp_path / "run.json").write_text("{not json")
    result = ckpt_report(tmp_path)
    assert result.returncode == 2 and result.stderr.startswith(f"error: cannot read {tmp_path / 'run.json'}")
    assert len(result.stderr.splitlines()) == 1


def test_a_rotated_gz_cut_short_loses_only_its_own_end(tmp_path):
    shutil.copytree(LOGS / "primus_run", tmp_path / "primus_run")
    rank0 = tmp_path / "primus_run" / "logs" / "pre_trainer" / "rank-0"
    packed = gzip.compress((rank0 / "debug.log.1").read_bytes())
    (rank0 / "debug.log.1").unlink()
    (rank0 / "debug.log.1.gz").write_bytes(packed[:-20])  # the end-of-stream marker and the last lines
    report = log_report([tmp_path / "primus_run"])
    assert [s["iteration"] for s in report["saves"]] == [200, 300, 400]  # debug.log, after the cut, is read
    assert any(n.startswith(f"{rank0 / 'debug.log.1.gz'} is cut short (truncated .gz): read up to line ")
               for n in report["notes"])


# -- inputs that must not cost the machine (issue 22) -------------------------------------------------------


# Prints the process's own high-water mark as it exits. Not wait4's ru_maxrss: that keeps the RSS of the
# forked copy of the test process from before exec (hundreds of MiB once a test worker has imported torch).
_REPORT_PEAK = ("import atexit, runpy, sys; atexit.register(lambda: sys.stderr.write(next(line for line in "
                "open('/proc/self/status') if line.startswith('VmHWM')))); sys.argv = sys.argv[1:]; "
                "runpy.run_path(sys.argv[0], run_name='__main__')")


def _peak_rss_mib(*args) -> tuple[subprocess.CompletedProcess, float]:
    """`ckpt_report.py ARGS` run to its end, and its own peak RSS (MiB, the kernel's VmHWM at exit)."""
    result = subprocess.run([sys.executable, "-c", _REPORT_PEAK, str(ROOT / "ckpt_report.py"), *map(str, args)],
                            stdin=subprocess.DEVNULL, capture_output=True, text=True)
    *rest, peak = result.stderr.splitlines()
    result.stderr = "\n".join(rest)
    return result, int(peak.split()[1]) / 1024


def test_a_file_without_newlines_costs_the_buffer_not_its_size(tmp_path):
    path = tmp_path / "one-line.log"
    with open(path, "wb") as file:  # 96 MiB, one line: the old reading held it whole, three times over
        file.write(b"saving checkpoint at iteration 5 to /c ")
        for _ in range(96):
            file.write(b"x" * (1 << 20))
        file.write(b"\n  successfully saved checkpoint from iteration 5 to /c\n")
    result, peak = _peak_rss_mib(path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [(s["iteration"], s["complete"]) for s in report["saves"]] == [(5, True)]
    assert f"{path}: 1 line longer than 64 KiB was read up to 64 KiB, the rest skipped" in report["notes"]
    assert peak < 96, peak  # the interpreter, the 8 MiB buffer and the 64 KiB a parser reads


def test_a_long_line_is_cut_and_counted_in_gzip_too(tmp_path):
    text = (b"saving checkpoint at iteration 5 to /c " + b"x" * (9 << 20) + b"\n"
            b"  successfully saved checkpoint from iteration 5 to /c\n" + b"y" * (70 << 10) + b" checkpoint\n")
    path = tmp_path / "stdout.log.gz"
    path.write_bytes(gzip.compress(text))
    report = log_report([path])
    assert saves(report) == [(5, True, None, None)]
    assert f"{path}: 2 lines longer than 64 KiB were read up to 64 KiB, the rest skipped" in report["notes"]
    assert len(report["save"]) < 64 << 10


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_devices_and_fifos_are_refused_without_waiting(tmp_path, kind):
    if kind == "device":
        path = Path("/dev/zero")
    else:
        path = tmp_path / "pipe"
        os.mkfifo(path)  # nobody writes it: opening it would wait forever
    result = ckpt_report(path, timeout=30)
    assert_one_line_error(result, f"{path} is not a regular file (a device, a FIFO or a socket)")


def test_a_fifo_in_a_folder_of_logs_is_left_out(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    shutil.copy(SYNC, tmp_path / "stdout.log")
    report = log_report([tmp_path])
    assert saves(report) == [(200, True, 4.5, 4.5), (300, True, 3.5, 3.5)]
    assert f"{tmp_path}: not read: {tmp_path / 'pipe'} (not a regular file)" in report["notes"]
