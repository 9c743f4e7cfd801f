"""One definition of what a save costs training, for sync and async saves alike (issue 30, item 7): the
advice, report.html's "cost of this save" column and `--compare` read the same figure, and say where it
came from. Reports are built here as dicts (Megatron --training-impact's shape): nothing is launched."""

from __future__ import annotations

import re

import pytest

from ckpt_bench.benchmark.registry import FRAMEWORKS
from ckpt_bench.present.compare import Source, compare
from ckpt_bench.present.html import render_report
from ckpt_bench.report.advice import AdviceOptions, add_advice

TYPICAL = 0.25  # the median iteration without saves, seconds


def training_report(async_save: bool, costs: list[float], total_time: float) -> dict:
    """Saves at iterations 2, 4, 6 costing `costs` of training each (the saving iteration beyond a typical
    one; the next iteration typical), each save `total_time` long (an async save's block time a tenth)."""
    block = total_time / 10 if async_save else total_time
    saves = [{"iteration": 2 * i, "complete": True, "block_time": block, "total_time": total_time}
             for i in (1, 2, 3)]
    return {
        "world_size": 2, "async_save": async_save, "save_interval": 2, "saves": saves, "load_time": 1.0, "notes": [],
        "training": {"iterations": 6, "saves": 3, "async_save": async_save, "save_impact_time": sum(costs),
                     "iteration_time_without_saves_median": TYPICAL,
                     "around_saves": [{"iteration": 2 * i, "iteration_time": TYPICAL + cost,
                                       "next_iteration_time": TYPICAL} for i, cost in enumerate(costs, start=1)]},
    }


def advised(report: dict) -> dict:
    return add_advice(report, AdviceOptions(mtbf_hours=12.0))


def test_sync_and_async_saves_cost_training_by_the_same_definition():
    # The runs: the sync report's own per-save cost 0.73/0.60/0.46 s (its saves 0.298 s long), the
    # async one's ~0.55 s. Both costs are the steady median of the per-save training cost.
    sync = advised(training_report(False, [0.73, 0.60, 0.46], total_time=0.298))["advice"]
    asynchronous = advised(training_report(True, [0.70, 0.55, 0.55], total_time=0.9))["advice"]
    assert sync["checkpoint_cost_s"] == pytest.approx(0.53)  # median of 0.60 and 0.46, not the 0.298 s save
    assert asynchronous["checkpoint_cost_s"] == pytest.approx(0.55)
    for advice, kind in ((sync, "synchronous saves"), (asynchronous, "async saves")):
        assert advice["checkpoint_cost_from"].startswith("training.around_saves (median of the saves after the first)")
        assert advice["checkpoint_cost_from"].endswith(f"({kind})")


def test_without_a_training_measurement_each_kind_says_what_training_waits_for():
    sync = advised(training_report(False, [0.5] * 3, 0.3) | {"training": None})["advice"]
    asynchronous = advised(training_report(True, [0.5] * 3, 0.9) | {"training": None})["advice"]
    assert sync["checkpoint_cost_s"] == 0.3 and "training waits for the whole save" in sync["checkpoint_cost_from"]
    assert asynchronous["checkpoint_cost_s"] == pytest.approx(0.09)
    for advice in (sync, asynchronous):
        assert "the training-visible cost was not measured" in advice["checkpoint_cost_from"]


def test_compare_sets_sync_against_async_on_one_definition_and_prints_its_source():
    sync = advised(training_report(False, [0.73, 0.60, 0.46], total_time=0.298))
    asynchronous = advised(training_report(True, [0.70, 0.55, 0.55], total_time=0.9))
    comparison = compare([Source("sync", "a", sync), Source("async", "b", asynchronous)], FRAMEWORKS)
    assert comparison.sources[1].ratio_to_first["checkpoint_cost_s"] == pytest.approx(0.55 / 0.53, abs=1e-3)
    assert comparison.metrics.index("checkpoint_cost_from") == comparison.metrics.index("checkpoint_cost_s") + 1
    sources = [column.metrics["checkpoint_cost_from"] for column in comparison.sources]
    assert all(source.startswith("training.around_saves") for source in sources)


def test_report_htmls_per_save_cost_is_what_the_advice_takes_the_median_of():
    report = advised(training_report(False, [0.73, 0.60, 0.46], total_time=0.298))
    page = render_report(report)
    table = page[page.index('id="training"'):]
    rows = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", table)]
    column = [float(cells[3]) for cells in rows if len(cells) == 5]  # "cost of this save s"
    assert column == [0.73, 0.60, 0.46]
    assert "0.53 s -- training.around_saves" in page  # the advice's C, beside where it came from
