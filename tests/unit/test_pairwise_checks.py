"""torch's global-plan validation with its pairwise overlap checks counted (`rank_costs.pairwise_checks`): the count
is torch's own, the counted sweep finds what torch's finds, and a step's checks are priced and fitted to the job's
depth as docs/projection.md says."""

from __future__ import annotations

import importlib
import math
import random

import pytest
import torch
from test_projection_fit import _job
from torch.distributed.checkpoint import default_planner
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import SavePlan

from ckpt_bench.projection.inputs import Figure
from ckpt_bench.projection.model import _step_term
from ckpt_bench.projection.rank_costs import RankCosts, Step, pairwise_checks
from ckpt_bench.projection.rank_costs.base import Budget
from ckpt_bench.projection.rank_costs.dcp_steps import DcpSteps, Item

sampled = importlib.import_module("ckpt_bench.projection.rank_costs.sampled")


def _metadata(rng: random.Random, keys: int = 6) -> Metadata:
    """Tensors of 1-3 dimensions cut into random chunks: on a grid, spanning a dimension, empty (an FSDP2 rank past
    the rows), the same start twice, now and then out of bounds, overlapping or of a negative size."""
    tensors = {}
    for key in range(keys):
        size = [rng.choice([1, 3, 8, 40]) for _ in range(rng.randint(1, 3))]
        chunks = []
        for _ in range(rng.randint(1, 40)):
            offsets = [rng.randrange(0, extent + 1) for extent in size]
            sizes = [rng.randint(0, max(0, extent - offset) + (rng.random() < 0.05)) for offset, extent
                     in zip(offsets, size, strict=True)]
            if rng.random() < 0.03:  # a negative size, which torch's bounds check refuses
                sizes[rng.randrange(len(size))] = -rng.randint(1, 3)
            if rng.random() < 0.2:  # spans its largest dimension
                largest = max(range(len(size)), key=lambda d: size[d])
                offsets[largest], sizes[largest] = 0, size[largest]
            chunks.append(ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes)))
        tensors[f"key{key}"] = TensorStorageMetadata(TensorProperties(dtype=torch.float32), torch.Size(size), chunks)
    return Metadata(tensors)


def _torch_checks(metadata: Metadata, monkeypatch) -> tuple[int, list[str]]:
    """The `_check_box_overlap` calls torch's own validation makes, and its errors."""
    calls, check = [0], default_planner._check_box_overlap

    def counted(box0, box1):
        calls[0] += 1
        return check(box0, box1)

    monkeypatch.setattr(default_planner, "_check_box_overlap", counted)
    errors = default_planner._validate_global_plan([SavePlan([]), SavePlan([])], metadata)
    monkeypatch.undo()
    return calls[0], errors


def test_the_count_is_the_number_of_checks_torchs_sweep_makes(monkeypatch):
    rng = random.Random(20261130)
    for _ in range(200):
        metadata = _metadata(rng)
        made, _ = _torch_checks(metadata, monkeypatch)
        total, most = pairwise_checks.checks(metadata)
        assert total == made
        assert most <= max(len(value.chunks) for value in metadata.state_dict_metadata.values())


def test_the_counted_sweep_finds_what_torchs_finds_and_times_whole_chunks_checks(monkeypatch):
    """With every chunk's checks timed (a stride of 1) the counted validation is torch's: the same errors (bounds,
    overlaps, fill) and every check run; with a longer stride it still finds the bounds and fill errors, counts
    every check and runs a part of them, each chunk's whole."""
    rng = random.Random(7)
    plans = [SavePlan([]), SavePlan([])]
    for _ in range(100):
        metadata = _metadata(rng)
        made, expected = _torch_checks(metadata, monkeypatch)
        errors, sweep = pairwise_checks._counted(plans, metadata, 1)
        assert sweep.made == sweep.timed == made and sorted(errors) == sorted(expected)
        assert sweep.estimated_s == pytest.approx(sweep.timed_s)  # each chunk timed: its own CPU
        errors, sweep = pairwise_checks._counted(plans, metadata, 50)
        assert sweep.made == made and sweep.timed <= made
        assert sorted(e for e in errors if "overlapping" not in e) == sorted(
            e for e in expected if "overlapping" not in e)
        assert {e for e in errors if "overlapping" in e} <= set(expected)


def test_a_plan_with_many_checks_is_counted_and_priced_at_the_sampled_time_a_check(monkeypatch):
    """Above `COUNTED_FROM` the validation stands in for torch's and the step's seconds are its CPU plus the checks
    not run; below it torch's own runs, all its checks."""
    metadata = _metadata(random.Random(3), keys=12)
    total, _ = pairwise_checks.checks(metadata)
    plans = [SavePlan([]), SavePlan([])]
    monkeypatch.setattr(pairwise_checks, "COUNTED_FROM", total + 1)
    with pairwise_checks.counted_validation() as validation:
        default_planner._validate_global_plan(plans, metadata)
    assert validation.pairwise == pairwise_checks.Pairwise(total, total)
    assert validation.counted_s() == -validation.counting_s
    assert default_planner._validate_global_plan is pairwise_checks._ORIGINAL
    monkeypatch.setattr(pairwise_checks, "COUNTED_FROM", 1)
    monkeypatch.setattr(pairwise_checks, "SAMPLE", 10)
    with pairwise_checks.counted_validation() as validation:
        default_planner._validate_global_plan(plans, metadata)
    pairwise = validation.pairwise
    assert pairwise.checks == total and 0 < pairwise.timed < total and pairwise.check_s > 0
    assert validation.counted_s() == pytest.approx(total * pairwise.check_s - validation.left_out_s
                                                   - validation.counting_s)


# Llama 3.1 70B under FSDP2 at 1,024 ranks, counted (`checks`) over its copies' global plans: 8,404,992 and
# 33,669,120 are torch's own calls at 2 and 4 layers
LLAMA_CHECKS = {2: 8_404_992, 4: 33_669_120, 8: 134_774_784, 16: 539_295_744}


def test_a_counted_global_plan_is_fitted_as_its_rest_and_its_checks_on_the_quadratic_through_the_copies():
    """Llama 3.1 70B under FSDP2 at 1,024 ranks: the checks its copies counted lie on a quadratic in layers (each
    layer's chunks against every other layer's), which gives the 16-layer count exactly; the step's seconds at the
    job's depth are the rest's fit plus those checks at the least of the copies' times a check."""
    assert sampled._quadratic([(d, LLAMA_CHECKS[d]) for d in (2, 4, 8)], 16) == LLAMA_CHECKS[16]

    def copy(depth: int, rest_s: float, check_s: float) -> RankCosts:
        checks = LLAMA_CHECKS[depth]
        return RankCosts("torch_dist", 1024, [
            Step("global plan", "save", "plan", cpu_s=rest_s + checks * check_s, units=30_720 * depth,
                 pairwise={"checks": checks, "timed": 100_000, "check_s": check_s})])

    computed = {2: copy(2, 3.0, 8.0e-7), 4: copy(4, 6.0, 5.0e-7), 8: copy(8, 12.0, 5.5e-7)}
    shards = {2: 400, 4: 700, 8: 1300, 80: 12100}
    plan = sampled._fitted(_job(1024), computed, shards, 80, RankCosts("torch_dist", 1024, [])).steps[0]
    checks = sampled._quadratic([(d, LLAMA_CHECKS[d]) for d in (2, 4, 8)], 80)
    assert plan.pairwise == {"checks": round(checks), "timed": 0, "check_s": 5.0e-7}
    rest = sampled.fit_axis([(30_720 * d, r) for d, r in ((2, 3.0), (4, 6.0), (8, 12.0))], plan.units)
    assert plan.cpu_s == round(rest + checks * 5.0e-7, 4)
    # the rest on a line: its fit's error the band of its copies' timing spread; the checks' at the least of the
    # copies' times a check, their error what torch's own validation moves between processes (the power law through
    # the counts lands on the quadratic), however far apart the copies' times a check lie
    rest_error = sampled.fit_error([(30_720 * d, r) for d, r in ((2, 3.0), (4, 6.0), (8, 12.0))], plan.units)
    assert plan.extrapolated["error"] == pytest.approx(
        (rest * rest_error + checks * 5.0e-7 * sampled.CHECK_SPREAD) / plan.cpu_s, abs=1e-3)
    term = _step_term("global plan", plan, Figure(None, "not given"))
    assert "pairwise overlap checks counted, those of the copies sampled at 0.50 us a check" in term.what
    assert math.isclose(term.high, plan.cpu_s * (1 + plan.extrapolated["error"]), rel_tol=1e-9)


def test_a_global_plan_step_of_many_checks_says_what_it_counted_and_prices_them(monkeypatch):
    """`DcpSteps.global_plan` over 64 ranks' FSDP2 chunks of two stacked layers' weights spanning their columns:
    every chunk against every other, 128 x 127 / 2 a key; counted (the threshold lowered), the step says so and its
    seconds hold every check at the sampled time a check."""
    monkeypatch.setattr(pairwise_checks, "COUNTED_FROM", 1)
    monkeypatch.setattr(pairwise_checks, "SAMPLE", 2_000)

    def plans(rank: int) -> list[Item]:
        return [Item(f"layers.fc{key}.weight", (layer, rank, 0), (1, 1, 512), (2, 64, 512), "bf16", 1024)
                for key in (1, 2) for layer in range(2)]

    steps = DcpSteps(64, 2, Budget(60), plans, plans)
    step = steps.global_plan(DefaultSavePlanner(), decentralized=False)
    assert step.complete and step.pairwise["checks"] == 2 * 128 * 127 // 2
    assert 0 < step.pairwise["timed"] < step.pairwise["checks"] and step.pairwise["check_s"] > 0
    assert step.cpu_s >= step.pairwise["checks"] * step.pairwise["check_s"] * 0.5
    assert steps.metadata is not None and default_planner._validate_global_plan is pairwise_checks._ORIGINAL
