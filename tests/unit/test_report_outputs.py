"""What a person reads: the terminal summary, report.html and sweep_report.html (parsed, not eyeballed),
and `ckpt_report.py --compare`."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from helpers import LOGS, assert_one_line_error, ckpt_report
from html_page import Page

from ckpt_bench.benchmark.registry import FRAMEWORKS
from ckpt_bench.cli.common import wants_table
from ckpt_bench.cli.launch import print_report
from ckpt_bench.core.events import CheckpointEvent, EventKind
from ckpt_bench.core.units import MIB
from ckpt_bench.present import summary
from ckpt_bench.present.compare import compare, load_sources
from ckpt_bench.present.html import render_report, render_sweep, run_timeline, write_run_html
from ckpt_bench.report.advice import AdviceOptions, add_advice
from ckpt_bench.report.assembly import run_report, to_json

S = 10**9


def make_run_dir(path: Path) -> Path:
    """A run directory of 2 ranks: two async saves (blocking 1 s, complete after 3 s) and a load."""
    path.mkdir(parents=True, exist_ok=True)
    facts = {"backend": "megatron", "run_info": {"world_size": 2, "ckpt_format": "torch_dist", "async_save": True,
                                                 "save_interval": 10},
             "folder_sizes": {"10": 64 * MIB, "20": 64 * MIB},
             "passes": [{"name": "save", "exit_code": 0, "ok": True, "cause": None, "failed_ranks": [],
                         "log_dir": "logs/save"}],
             "environment": {"python": "3.11", "host": "test"}}
    (path / "run.json").write_text(json.dumps(facts))
    (path / "events").mkdir(exist_ok=True)
    for rank in (0, 1):
        moments = []
        for iteration, start in ((10, 0), (20, 10)):
            moments += [(EventKind.SAVE_START, iteration, start), (EventKind.SAVE_BLOCK_END, iteration, start + 1),
                        (EventKind.SAVE_END, iteration, start + 3 + rank)]
        moments += [(EventKind.LOAD_START, 20, 30), (EventKind.LOAD_END, 20, 32)]
        lines = [CheckpointEvent(kind, rank=rank, iteration=it, mono_ns=t * S, wall_ns=(1000 + t) * S, seq=i).to_json()
                 for i, (kind, it, t) in enumerate(moments, 1)]
        (path / "events" / f"rank-{rank}.jsonl").write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return make_run_dir(tmp_path_factory.mktemp("run") / "20260101-000000-tiny")


@pytest.fixture(scope="module")
def report(run_dir) -> dict:
    report = run_report(run_dir)
    report["storage_baseline"] = {"tool": "fio", "write_bandwidth": 100.0, "read_bandwidth": 150.0}
    report["save_fraction_of_peak"], report["load_fraction_of_peak"] = 0.213, 0.21
    report["saves"][0]["peak_rss_bytes"] = 900 * MIB
    report["saves"][1]["peak_rss_bytes"] = 950 * MIB
    report["preflight"] = {"dist_backend": "gloo", "world_size": 2, "nnodes": 1, "results": [
        {"collective": "all_reduce", "size": size, "count": size // 4, "iters": 5, "time_us": 10.0 * i,
         "algbw_gbps": 1.0, "busbw_gbps": 1.0 + i} for i, size in enumerate((65536, 262144, 1048576))]}
    return add_advice(report, AdviceOptions(gpu_mttf_hours=40000.0, gpus=16))


def test_report_html_has_every_part_and_fetches_nothing(run_dir, report):
    operations = run_timeline(run_dir)
    assert {(op.rank, op.kind, op.iteration) for op in operations} == {
        (r, "save", 10) for r in (0, 1)} | {(r, "save", 20) for r in (0, 1)} | {(r, "load", 20) for r in (0, 1)}
    saved = next(op for op in operations if op.rank == 1 and op.iteration == 20 and op.kind == "save")
    assert (saved.start_s, saved.block_s, saved.total_s) == (10.0, 1.0, 4.0)
    text = render_report(json.loads(to_json(report)), operations)
    page = Page(text)
    assert page.external == []
    sections = page.sections
    assert list(sections)[:3] == ["summary", "advice", "timeline"]
    assert sections["timeline"]["svg"] == 2  # the run on one axis, and each save and load on its own
    for name in ("bandwidth", "spread", "memory", "preflight"):
        assert sections[name]["svg"] == 1, name
    assert page.tables["saves-table"] == 1 + 2 + 1  # header, two saves, the load
    assert page.tables["what-if-table"] == 1 + 4  # 16 GPUs and the three larger jobs
    assert {"summary-table", "advice-table", "config-table", "environment-table", "preflight-table"} <= set(page.tables)
    assert "storage baseline, write: 100.0 MiB/s" in text  # the baseline line in the bandwidth plot's legend
    assert "21.3 %" in text  # save fraction of peak
    assert text.count("<svg") == 6 and "<script" not in text


def test_report_html_from_logs_without_clocks_and_without_sizes():
    log = LOGS / "megatron_2024_untimestamped_sync.log"
    from ckpt_bench.report.assembly import log_report

    page = Page(render_report(log_report([log]), []))
    assert page.sections["timeline"]["svg"] == 1  # each save's block and total, slowest rank
    assert page.sections["bandwidth"]["svg"] == 0 and "memory" not in page.sections and "advice" not in page.sections


def test_every_run_directory_gets_report_html(run_dir, report, monkeypatch):
    monkeypatch.setenv("CKPT_BENCH_HTML", "0")  # the suite's setting: no drawing
    assert write_run_html(run_dir, report) is None
    monkeypatch.setenv("CKPT_BENCH_HTML", "1")
    path = write_run_html(run_dir, report)
    assert path == run_dir / "report.html" and Page(path.read_text()).sections["summary"]


def sweep_results(tmp_path: Path, report: dict) -> dict:
    jobs = []
    for index, (threads, model) in enumerate([(1, "tiny"), (2, "tiny"), (1, "small"), (2, "small")]):
        job_report = {**report, "save_total_time": 1.0 + index, "save_bandwidth_in_mbps": 100.0 * (index + 1)}
        jobs.append({"index": index, "params": {"thread_count": threads, "model": model}, "status": "ok",
                     "error": None, "report": job_report, "run_dir": report["run"]["dir"]})
    jobs.append({"index": 4, "params": {"thread_count": 4, "model": "tiny"}, "status": "failed",
                 "error": "save pass failed", "report": None})
    results = {"name": "demo", "sweep_file": None, "dir": str(tmp_path), "started": "now", "updated": "now",
               "sweep": {"name": "demo", "backend": "dcp",
                         "sweep": {"thread_count": [1, 2, 4], "model": ["tiny", "small"]}},
               "environment": {"host": "test"}, "summary": {"failed": 1, "ok": 4}, "jobs": jobs}
    (tmp_path / "run_results.json").write_text(to_json(results))
    for job in jobs:
        if job["report"]:
            (tmp_path / str(job["index"])).mkdir()
            (tmp_path / str(job["index"]) / "report.json").write_text(to_json(job["report"]))
    return results


def test_sweep_report_html_plots_each_metric_against_each_parameter(tmp_path, report, run_dir, monkeypatch):
    monkeypatch.setenv("CKPT_BENCH_HTML", "1")
    write_run_html(run_dir, report)
    text = render_sweep(sweep_results(tmp_path, report))
    page = Page(text)
    assert page.external == []
    assert page.sections["by-thread-count"]["svg"] == 1 and page.sections["by-model"]["svg"] == 1
    assert page.tables["jobs-table"] == 1 + 5
    assert text.count('report.html</a>') == 4  # each job with a report links its run's report.html


def test_terminal_summary(report, run_dir):
    (run_dir / "report.json").write_text(to_json(report))
    buffer = io.StringIO()
    summary.print_report({**report, "run": {**report["run"], "dir": str(run_dir)}}, buffer)
    text = buffer.getvalue()
    for needle in ("iteration", "slowest rank", "peak RSS MiB", "verified", "storage baseline", "write 100.0 MiB/s",
                   "save fraction of peak", "21.3 %", "Daly interval", "goodput", "32,768", "report.json"):
        assert needle in text, needle
    rows = [line.split() for line in text.splitlines() if line.strip().startswith(("10 ", "20 "))]
    assert [row[:3] for row in rows] == [["10", "1.000", "4.000"], ["20", "1.000", "4.000"]]


def test_print_report_table_or_json(tmp_path, report, capsys):
    assert not wants_table(None)  # stdout is not a terminal here: scripts keep getting JSON
    output = tmp_path / "report.json"
    print_report(report, str(output), "table")
    assert "Checkpoint interval advice" in capsys.readouterr().out
    assert json.loads(output.read_text())["advice"]["mtbf_s"] == report["advice"]["mtbf_s"]
    print_report(report, None, None)
    assert json.loads(capsys.readouterr().out)["save_total_time"] == report["save_total_time"]


def test_compare_sources_and_ratios(tmp_path, report):
    first = tmp_path / "a" / "report.json"
    first.parent.mkdir()
    first.write_text(to_json(report))
    slower = tmp_path / "b.json"
    slower.write_text(to_json({**report, "save_total_time": report["save_total_time"] * 2, "load_time": None}))
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    sweep_results(sweep, report)
    sources = [s for path in (first.parent, slower, sweep) for s in load_sources(path)]
    assert [s.label for s in sources][:2] == ["a", "b"] and len(sources) == 6
    table = compare(sources, FRAMEWORKS)
    assert table.sources[1].ratio_to_first["save_total_time"] == 2.0
    assert table.sources[1].ratio_to_first["load_time"] is None
    assert "goodput_at_optimum" in table.metrics and "training_save_impact_time" not in table.metrics


def test_compare_cli_json_and_table(tmp_path, run_dir, report):
    other = make_run_dir(tmp_path / "other")  # no report.json yet: rebuilt from the run directory
    result = ckpt_report("--compare", run_dir, other, "--format", "json", "--mtbf-hours", "5")
    assert result.returncode == 0, result.stderr
    table = json.loads(result.stdout)
    assert [s["ratio_to_first"]["save_total_time"] for s in table["sources"]] == [1.0, 1.0]
    assert table["sources"][0]["metrics"]["daly_interval_s"] is not None
    result = ckpt_report("--compare", run_dir, other, "--format", "table")
    assert result.returncode == 0 and "save_total_time" in result.stdout and "x1.00" in result.stdout


def test_ckpt_report_html_of_a_run_directory_and_of_a_sweep(tmp_path, run_dir, report):
    html = tmp_path / "out.html"
    result = ckpt_report(run_dir, "--html", html, "--mtbf-hours", "2")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["advice"]["mtbf_s"] == 7200.0
    page = Page(html.read_text())
    assert page.sections["timeline"]["svg"] == 2 and "advice" in page.sections
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    sweep_results(sweep, report)
    result = ckpt_report(sweep, "--html", tmp_path / "sweep.html", "--format", "table")
    assert result.returncode == 0, result.stderr
    assert "Sweep demo" in result.stdout and Page((tmp_path / "sweep.html").read_text()).tables["jobs-table"] == 6


@pytest.mark.parametrize("make_args,needle", [
    (lambda tmp: ["--compare", tmp], "--compare needs at least two reports"),
    (lambda tmp: ["--compare", tmp, LOGS / "megatron_2024_untimestamped_sync.log"], "holds no report"),
    (lambda tmp: ["--compare", tmp / "nowhere", tmp], "no such file or folder"),
])
def test_compare_bad_input_is_one_line(tmp_path, make_args, needle):
    assert_one_line_error(ckpt_report(*make_args(tmp_path)), needle)


@pytest.mark.parametrize("log", ["torchtitan_2026_async_two_ranks.log",
                                 "megatron_current_timestamped_async_overlap.log",
                                 "megatron_killed_mid_save_restart.log", "nemo2_async_topk_last.log"])
def test_one_log_gives_the_same_times_in_the_json_and_the_html(log):
    """One pairing: the k-th save of an iteration in report.json has the slowest rank's block and total
    time of the k-th save of that iteration in the HTML timeline of the same log."""
    from collections import defaultdict

    from ckpt_bench.present.html import timeline
    from ckpt_bench.report.assembly import log_report_and_operations

    report, operations = log_report_and_operations([LOGS / log])
    timed = [op for op in operations if op.start is not None and op.start.wall_ns is not None]
    rows = timeline(operations)
    assert rows and len(rows) == len(timed)
    by_save: dict[tuple, list] = defaultdict(list)
    seen: dict[tuple, int] = defaultdict(int)
    for row in rows:
        if row.kind == "save":
            key = (row.rank, row.iteration)
            by_save[(row.iteration, seen[key])].append(row)
            seen[key] += 1
    occurrence: dict[int, int] = defaultdict(int)
    checked = 0
    for save in report["saves"]:
        mine = by_save[(save["iteration"], occurrence[save["iteration"]])]
        occurrence[save["iteration"]] += 1
        for field, figure in (("block_s", "block_time"), ("total_s", "total_time")):
            times = [getattr(row, field) for row in mine if getattr(row, field) is not None]
            if save[figure] is not None and times and len(mine) == save["ranks"]:
                assert save[figure] == pytest.approx(max(times), abs=1e-3), (save["iteration"], figure)
                checked += 1
    assert checked
