"""The comms sweep: nccl-tests' bandwidth definitions, and `--backend comms` end to end (gloo, 2 ranks)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

from ckpt_bench.backends.comms.launcher import parse_size
from ckpt_bench.backends.comms.measure import bus_factor, format_table, message_sizes
from ckpt_bench.core.errors import ConfigError


def test_bus_factors_are_nccl_tests():
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("all_gather", 8) == bus_factor("reduce_scatter", 8) == pytest.approx(7 / 8)
    assert bus_factor("broadcast", 8) == 1.0


def test_sizes_and_size_option():
    assert message_sizes() == [1 << k for k in range(10, 29, 2)]  # 1 KiB ... 256 MiB, x4
    assert parse_size("64KiB") == parse_size("64K") == 65536 and parse_size("256M") == 256 << 20
    with pytest.raises(ConfigError, match="--comms-max-size"):
        parse_size("lots")


def test_comms_backend_reports_every_collective(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "ckpt_launch.py"), "--backend", "comms", "--nproc-per-node", "2",
         "--comms-max-size", "16KiB", "--runs-dir", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    comms = report["comms"]
    assert report["run"]["status"] == "ok" and comms["world_size"] == 2 and comms["dist_backend"] == "gloo"
    rows = {(r["collective"], r["size"]): r for r in comms["results"]}
    assert set(rows) == {(c, s) for c in ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
                         for s in (1024, 4096, 16384)}
    for (collective, size), row in rows.items():
        assert row["algbw_gbps"] == pytest.approx(size / (row["time_us"] * 1e-6) / 1e9, rel=0.02, abs=1e-4)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * bus_factor(collective, 2), abs=1e-4)
    assert "busbw (GB/s)" in result.stderr  # the table, as it was measured
    assert "all_reduce" in format_table(comms)
    assert not (Path(report["run"]["dir"]) / "checkpoints").exists()  # no checkpoint, no folder
