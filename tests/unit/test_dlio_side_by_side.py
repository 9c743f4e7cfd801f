"""benchmarks/dlio_side_by_side.py's decision (issue 30, item 6): ours/DLIO paired by round, a verdict only
where its 95 % interval lies inside 0.8-1.25 or entirely outside it, and 'undecided' said plainly when the
rounds run out first. No DLIO needed: the rounds' figures are given."""

from __future__ import annotations

import sys

import pytest
from helpers import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from dlio_side_by_side import Verdict, per_round_ratios, stop_reason  # noqa: E402 - a script, not a package


def test_two_rounds_decide_nothing_whatever_they_say():
    # Today's two rounds (2.61 and 1.36) and two that agree closely: both wait for the minimum of rounds.
    for ratios in ([2.61, 1.36], [1.01, 0.99]):
        verdict = Verdict.of("save", ratios, min_rounds=3)
        assert verdict.verdict == "undecided" and not verdict.decided
        assert verdict.ratio is not None  # the interval is printed all the same
    assert Verdict.of("save", [1.0], min_rounds=3).ratio is None


def test_an_interval_inside_the_band_is_comparable_and_one_outside_is_not():
    comparable = Verdict.of("save", [1.03, 0.97, 1.05, 1.0], min_rounds=3)
    assert comparable.verdict == "comparable"
    assert 0.8 <= comparable.ratio.low <= comparable.ratio.estimate <= comparable.ratio.high <= 1.25
    assert Verdict.of("load", [1.6, 1.5, 1.7], min_rounds=3).verdict == "not comparable"
    assert Verdict.of("load", [0.5, 0.6, 0.55], min_rounds=3).verdict == "not comparable"


def test_an_interval_across_an_edge_is_undecided_and_says_why():
    verdict = Verdict.of("save", [2.61, 1.36, 1.03, 1.2, 0.9], min_rounds=3)
    assert verdict.verdict == "undecided"
    assert verdict.ratio.low < 1.25 < verdict.ratio.high
    line = verdict.line("stopped at the maximum of 5 rounds")
    assert line.endswith("undecided -- the interval crosses an edge of 0.8-1.25; stopped at the maximum of 5 rounds")
    assert "95% CI" in line and "2.610" in line


def test_the_rounds_stop_when_both_decide_or_at_the_limits():
    decided = [Verdict.of("save", [1.0, 1.02, 0.98], 3), Verdict.of("load", [1.5, 1.6, 1.55], 3)]
    assert stop_reason(decided, 3, 60, 20, max_rounds=10, budget_s=600) == "decided"
    open_ = [decided[0], Verdict.of("load", [1.0, 1.5, 1.2], 3)]
    assert stop_reason(open_, 3, 60, 20, max_rounds=10, budget_s=600) is None
    assert "maximum of 3 rounds" in stop_reason(open_, 3, 60, 20, max_rounds=3, budget_s=600)
    assert "600 s budget" in stop_reason(open_, 3, 590, 20, max_rounds=10, budget_s=600)


def test_a_round_without_a_figure_on_one_side_is_left_out_of_that_figure():
    rows = {"dlio": [{"save_GBps": 0.5, "load_GBps": None}, {"save_GBps": 0.4, "load_GBps": 1.0}],
            "ours": [{"save_GBps": 0.6, "load_GBps": 0.9}, {"save_GBps": 0.4, "load_GBps": 1.1}]}
    assert per_round_ratios(rows, "save_GBps") == pytest.approx([1.2, 1.0])
    assert per_round_ratios(rows, "load_GBps") == pytest.approx([1.1])
