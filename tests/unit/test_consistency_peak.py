"""The storage baseline bounds what it is compared with (issue 30, item 3): its peak is the fastest of its
rounds (more rounds while they still improve), a --repeat series' peak the fastest of every repetition's,
and a save or load above its peak gets no fraction but says that it was above, by how much and why. The
issue's case: a DCP save at ~950 MiB/s against a baseline of 707 MiB/s was shown as "134 % of peak"."""

from __future__ import annotations

import pytest

from ckpt_bench.present.rows import headline_rows
from ckpt_bench.report.engine import fractions_of_peak
from ckpt_bench.report.schema import Report
from ckpt_bench.report.series import best_baseline
from ckpt_bench.storage.baseline import IOShape, measure_rounds

SHAPE = IOShape.of([100] * 4, concurrency=4, fsync=True)


class Scripted:
    """A Baseline whose rounds give the bandwidths it is handed, one round each."""

    def __init__(self, writes: list[float], reads: list[float] | None = None):
        self.rounds = list(zip(writes, reads or writes, strict=True))

    def measure(self, shape: IOShape) -> dict:
        write, read = self.rounds.pop(0)
        return {"tool": "built-in (os.write/os.read)", "write_bandwidth": write, "read_bandwidth": read,
                "write_time": 1 / write, "read_time": 1 / read, "files": 4, "concurrency": 4, "fsync": True}


def test_the_peak_is_the_fastest_round_not_the_median():
    result = measure_rounds(Scripted([707.0, 2440.0, 1200.0], [900.0, 800.0, 850.0]), SHAPE)
    assert (result["write_bandwidth"], result["read_bandwidth"]) == (2440.0, 900.0)
    assert result["write_time"] == pytest.approx(1 / 2440.0)
    assert [r["write_bandwidth"] for r in result["rounds"]] == [707.0, 2440.0, 1200.0]


def test_rounds_go_on_while_the_last_one_still_beat_the_best():
    assert len(measure_rounds(Scripted([100.0, 101.0, 102.0]), SHAPE)["rounds"]) == 3  # within 5 %: done
    growing = measure_rounds(Scripted([100.0 * n for n in range(1, 9)]), SHAPE)
    assert len(growing["rounds"]) == 6 and growing["write_bandwidth"] == 600.0  # at most 6


def steady_report(save_bandwidth: float, loads: list[dict] | None = None) -> dict:
    return {"stats": {"bandwidth": {"n": 3, "median": save_bandwidth},
                      "excluding_first": {"bandwidth": {"n": 2, "median": save_bandwidth}}},
            "loads": loads or [{"bandwidth": 500.0, "cache": "cold"}]}


def baseline(writes: list[float], read: float = 1000.0) -> dict:
    return {"tool": "built-in (os.write/os.read)", "write_bandwidth": max(writes), "read_bandwidth": read,
            "files": 4, "concurrency": 4, "fsync": True,
            "rounds": [{"write_bandwidth": w, "read_bandwidth": read} for w in writes]}


def test_a_save_above_the_peak_gets_no_fraction_but_the_reason():
    figures = fractions_of_peak(steady_report(950.0), baseline([700.0, 707.0, 690.0]))
    assert figures["save_fraction_of_peak"] is None and figures["load_fraction_of_peak"] == 0.5
    above = figures["save_above_peak"]
    assert (above["measured"], above["peak"], above["ratio"]) == (950.0, 707.0, 1.344)
    assert "outran built-in (os.write/os.read)'s plain writes of the same shape (4 files, 4 at once, fsynced)" \
        in above["reason"]
    assert "load_above_peak" not in figures


def test_the_reason_names_a_storage_whose_own_speed_varied():
    figures = fractions_of_peak(steady_report(950.0), baseline([310.0, 707.0, 420.0]))
    assert "varied 2.3x over the baseline's 3 rounds" in figures["save_above_peak"]["reason"]


def test_warm_loads_above_the_cold_peak_say_so():
    figures = fractions_of_peak(steady_report(100.0, [{"bandwidth": 3000.0, "cache": "warm"}]), baseline([800.0]))
    assert figures["load_fraction_of_peak"] is None
    assert "page cache (--warm-load)" in figures["load_above_peak"]["reason"]


def test_a_series_is_bounded_by_the_fastest_round_of_all_its_repetitions():
    # The two runs: baselines of 707 and 2,440 MiB/s an hour apart, saves at ~950.
    combined = best_baseline([baseline([707.0, 650.0]), None, baseline([2440.0, 2300.0])])
    assert combined["write_bandwidth"] == 2440.0 and len(combined["rounds"]) == 4
    assert "4 rounds of 2 repetitions" in combined["peak"]
    assert fractions_of_peak(steady_report(950.0), combined)["save_fraction_of_peak"] == 0.389
    assert best_baseline([None]) is None


def test_the_summary_says_above_the_baseline_never_a_percentage_over_100():
    report = {**steady_report(950.0), "saves": [], "notes": [], "storage_baseline": baseline([707.0])}
    report.update(fractions_of_peak(report, report["storage_baseline"]))
    rows = dict(headline_rows(Report.from_json(report)))
    assert rows["save fraction of peak (steady)"].startswith("above the baseline (1.34x its fastest round): no "
                                                             "fraction -- the saves outran")
    assert "134" not in " ".join(rows.values())


def test_the_summary_says_how_far_the_storages_own_rounds_were_apart():
    report = {**steady_report(300.0), "saves": [], "notes": [], "storage_baseline": baseline([161.0, 1536.0, 458.0])}
    rows = dict(headline_rows(Report.from_json(report)))
    assert rows["storage baseline"].endswith("; the fastest of 3 rounds; the storage's own speed varied: writes "
                                             "161-1,536 MiB/s")
