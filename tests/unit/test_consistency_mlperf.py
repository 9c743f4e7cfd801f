"""MLPerf Storage where a workload run is read: whether it could stand beside published results
(`mlperf.comparable`, from mlcommons/storage's Rules.md section 4), report.html's title and navigation.
Reports are built here as dicts: nothing is launched."""

from __future__ import annotations

import re

import pytest

from ckpt_bench.present.html import render_report
from ckpt_bench.present.rows import mlperf_rows
from ckpt_bench.report.mlperf import comparability
from ckpt_bench.report.schema import Report

GIB = 1 << 30


def workload_report(workload: str = "llama3-8b", world: int = 8, job_world: int = 8, per_host: int = 8,
                    saves: int = 10, loads: int = 10, fsync: bool | None = True, cache: str = "cold",
                    engine: str = "torch-save", subset: int | None = None, per_save: int = 112 * GIB,
                    memory: int = 512 * GIB) -> dict:
    """A workload run's report as assembly writes it, with only what the verdict and the title read."""
    return {
        "world_size": world, "ckpt_format": engine, "async_save": False, "iter_folder_size": per_save,
        "saves": [{"iteration": i, "complete": True} for i in range(1, saves + 1)],
        "loads": [{"iteration": i, "complete": True, "cache": cache} for i in range(1, loads + 1)],
        "environment": {"memory_bytes": memory},
        "measurement": {"fsync": fsync, "load_cache": cache},
        "config": {"workload": workload, "engine": engine, "subset": subset, "job_world_size": job_world,
                   "nnodes": world // per_host, "nproc_per_node": per_host, "fsync": fsync},
        "run": {"dir": "/runs/x", "backend": "workload", "status": "ok"},
        "mlperf": {"dlio": {"checkpoint_size_GB": 104.7}, "mlpstorage": {}},
        "notes": [],
    }


def verdict(**changes) -> dict:
    return comparability(workload_report(**changes))


def test_mlperfs_own_8b_run_is_closed():
    result = verdict()
    assert result["verdict"] == "CLOSED" and result["reasons"] == []


def test_a_subset_is_valid_for_8b_on_8_processes_only():
    assert verdict(subset=8)["verdict"] == "CLOSED"
    for changes in ({"workload": "llama3-70b", "world": 8, "job_world": 64},
                    {"workload": "llama3-8b", "world": 4, "per_host": 4}):
        result = verdict(subset=changes["world"], **changes)
        assert result["verdict"] == "not comparable"
        assert any("#841" in reason for reason in result["reasons"]), result["reasons"]


@pytest.mark.parametrize(("changes", "expected", "said"), [
    ({"saves": 3, "loads": 3}, "OPEN", "3 saves and 3 loads"),
    ({"engine": "dcp"}, "OPEN", "engine dcp"),
    ({"fsync": False}, "not comparable", "not fsynced"),
    ({"fsync": None}, "OPEN", "object storage"),
    ({"workload": "tiny_zero3"}, "not comparable", "not one of MLPerf's four models"),
    ({"world": 2, "job_world": 2, "per_host": 2}, "not comparable", "2 processes per host"),
    # Warm loads are MLPerf's only when a host wrote more than 3x its memory (4.3.1): 10 x 112 GiB vs 512 GiB.
    ({"cache": "warm"}, "not comparable", "warm loads"),
    ({"cache": "warm", "memory": 256 * GIB}, "CLOSED", "above 3x"),
])
def test_each_rule_moves_the_verdict_and_says_why(changes, expected, said):
    result = verdict(**changes)
    assert result["verdict"] == expected
    assert any(said in check["detail"] for check in result["checks"]), result["checks"]
    if expected != "CLOSED":
        assert any(said in reason for reason in result["reasons"])


def test_the_cache_check_weighs_the_bytes_written_per_host_against_its_memory():
    cache = next(check for check in verdict()["checks"] if "checkpointDataSizeRatio" in check["rule"])
    assert "1,120.0 GiB written per host against 512.0 GiB of memory (2.19x)" in cache["detail"]


def with_verdict(**changes) -> dict:
    report = workload_report(**changes)
    report["mlperf"]["comparable"] = comparability(report)
    return report


def test_the_summary_rows_carry_the_verdict_with_its_reasons():
    rows = dict(mlperf_rows(Report.from_json(with_verdict(engine="dcp")).mlperf))
    assert rows["comparable with published results"].startswith("with OPEN results only")
    assert "engine dcp" in rows["comparable with published results"]


def test_report_html_names_the_workload_and_subset_and_has_mlperf_in_its_navigation():
    page = render_report(with_verdict(workload="llama3-70b", world=2, job_world=64, per_host=2, subset=2))
    heading = re.search(r"<h1>(.*?)</h1>", page).group(1)
    assert heading == "Checkpoint benchmark: llama3-70b through torch-save on 2 of its 64 ranks"
    assert "llama3-70b through torch-save on 2 of its 64 ranks" in re.search(r"<title>(.*?)</title>", page).group(1)
    nav = re.search(r"<nav>(.*?)</nav>", page).group(1)
    assert '<a href="#mlperf">MLPerf Storage</a>' in nav
    configuration = page[page.index('id="configuration"'):]
    assert 'id="mlperf-table"' not in configuration and 'id="comparable-table"' in page
