"""--repeat: the spread of each headline figure over repetitions in fresh processes."""

import pytest

from ckpt_bench.report.schema import Report
from ckpt_bench.report.series import REPEATED_METRICS, repeat_stats, spread


def test_spread_is_median_min_max_and_sample_cv():
    stats = spread([1.0, 2.0, 3.0], 4)
    assert stats == {"n": 3, "median": 2.0, "min": 1.0, "max": 3.0, "cv": 0.5}
    assert spread([4.0], 4)["cv"] is None  # one value: no spread to speak of
    assert spread([0.575, 0.6], 4)["median"] == 0.5875  # rounded: never 0.5874999999999999 in the JSON


def test_noisy_figures_are_named_and_missing_ones_are_null():
    reports = [Report(save_block_time=t, load_time=1.0) for t in (1.0, 1.5, 2.0)]
    stats, notes = repeat_stats(reports)
    assert stats["save_block_time"]["cv"] == pytest.approx(0.3333, abs=1e-4)
    assert stats["load_time"]["cv"] == 0.0 and stats["save_bandwidth_in_mbps"] is None
    assert set(stats) == {metric.key for metric in REPEATED_METRICS}
    assert len(notes) == 1 and notes[0].startswith("save_block_time varies by 33% (cv) over 3 repetitions")
