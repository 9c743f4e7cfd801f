"""benchmarks/harness_overhead.py's verdict (issue 22): ours / bare paired by round, with a bootstrap
interval over rounds, and a verdict only where the interval decides."""

from __future__ import annotations

import sys

import pytest
from helpers import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from harness_overhead import PairedRatio  # noqa: E402 - the benchmark is a script, not a package


def _rounds(ratios: list[float]) -> tuple[list[list[float]], list[list[float]]]:
    """Rounds whose steady saves (after a slow first one) are `ratio` times the bare ones."""
    bare = [[5.0, 1.0 + 0.1 * i, 1.0 + 0.1 * i] for i in range(len(ratios))]
    ours = [[5.0, *(ratio * value for value in b[1:])] for ratio, b in zip(ratios, bare, strict=True)]
    return ours, bare


def test_paired_by_round_a_drifting_disk_cancels_out():
    ours, bare = _rounds([1.01, 1.02, 1.00, 1.01, 1.02, 1.01])  # the disk gets slower each round
    ratio = PairedRatio.of(ours, bare)
    assert ratio.estimate == pytest.approx(1.0117, abs=1e-3)
    assert 1.0 <= ratio.low <= ratio.estimate <= ratio.high <= 1.02
    assert ratio.verdict == "within 5%"


def test_the_verdict_waits_for_an_interval_that_decides():
    assert PairedRatio.of(*_rounds([1.10, 1.12, 1.09, 1.11])).verdict == "over 5%"
    assert PairedRatio.of(*_rounds([0.95, 1.15, 1.0])).verdict == "undecided"


def test_the_median_of_the_rounds_is_not_moved_by_a_few_rounds_on_a_slower_disk():
    """Rounds whose whole process met a slower disk (either side) widen the mean's interval; the median's
    decides (issue 39: 5 of 16 rounds on this VM's disk)."""
    ratios = [1.0, 0.99, 1.01, 1.4, 0.98, 1.0, 0.72, 1.02, 1.0, 1.38, 0.99, 1.01, 0.75, 1.0, 0.99, 1.01]
    ratio = PairedRatio.of(*_rounds(ratios))
    assert ratio.verdict == "undecided" and ratio.high > 1.05
    assert ratio.median == pytest.approx(1.0, abs=0.01) and ratio.median_verdict == "within 5%"
