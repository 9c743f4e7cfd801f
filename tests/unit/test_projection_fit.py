"""The rank-count costs fitted from copies of the job with fewer layers (projection.rank_costs.sampled): the fits'
arithmetic, the copies' layer patterns, and one real fitted computation against the exact one."""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
import threading
import time
import types

import pytest
from helpers import ROOT

from ckpt_bench.layout.sources import resolve_workload
from ckpt_bench.projection import JobCheckpoint
from ckpt_bench.projection.inputs import Figure
from ckpt_bench.projection.model import _step_term
from ckpt_bench.projection.rank_costs import RankCosts, Step, rank_costs
from ckpt_bench.projection.rank_costs.base import RankSample
from ckpt_bench.projection.schedule import HELD_LOAD_PLAN

# the package's `rank_costs` name is its function: the module by its path
sampled = importlib.import_module("ckpt_bench.projection.rank_costs.sampled")
TINY = str(ROOT / "ckpt_bench" / "configs" / "tiny_gpt.yaml")


def test_a_power_law_is_recovered_through_the_three_deepest_points():
    points = [(x, 3 * x**1.5) for x in (2, 4, 8)]
    assert math.isclose(sampled.fit_axis(points, 64), 3 * 64**1.5, rel_tol=1e-9)
    assert math.isclose(sampled.fit_axis([(1, 100.0), *points], 64), 3 * 64**1.5, rel_tol=1e-9)  # the deepest three
    assert sampled.fit_axis(points, 4) == 24.0  # a sampled point is itself
    bent = [(2, 1.0), (4, 2.0), (8, 8.0)]  # least squares through all three: exponent 1.5, not the last span's 2
    assert math.isclose(sampled.fit_axis(bent, 16), 2 ** (13 / 3), rel_tol=1e-9)  # log2: 4/3 + 1.5 x (4 - 2)


def test_a_cpu_fits_error_is_where_its_copies_lie_not_their_noise():
    """The band the timing spread gives a power law at the target: the same for copies timed again (each within the
    spread), wider the further the target lies beyond them; where the deepest copy misses the line through the two
    before by more than that spread explains, at least that miss carried to the target."""
    xs, target = (207, 569, 1290), 14000  # DeepSeek-V3's rank-0 shards at 2, 4, 8 layers; about 61 layers'
    runs = [[(x, 0.01 * x**1.1 * wobble) for x, wobble in zip(xs, factors, strict=True)]
            for factors in ((1.0, 1.0, 1.0), (1.1, 0.92, 1.05), (0.9, 1.08, 0.95))]
    errors = {round(sampled.fit_error(points, target), 9) for points in runs}
    assert len(errors) == 1  # the same copies' error, run after run
    band = errors.pop()
    ln = [math.log(x) for x in xs]
    mean = sum(ln) / 3
    spread = math.sqrt(1 / 3 + (math.log(target) - mean) ** 2 / sum((x - mean) ** 2 for x in ln))
    assert math.isclose(band, math.exp(2 * sampled.TIMING_SPREAD * spread) - 1)
    assert sampled.fit_error(runs[0], 2 * target) > band > sampled.fit_error(runs[0], 2000) >= sampled.NOISE
    bent = [(207, 1.0), (569, 2.75), (1290, 20.0)]  # the deepest 3.2x above the line through the two before
    missed = math.log(20.0) - math.log(2.75) * (1 + (ln[2] - ln[1]) / (ln[1] - ln[0]))
    spans = (math.log(target) - ln[2]) / (ln[2] - ln[1])
    assert math.isclose(sampled.fit_error(bent, target), math.exp(missed * spans) - 1) and spans > 2
    assert sampled.fit_error(runs[0], 569) == 0.0 and sampled.fit_error(runs[0][1:], target) is None
    twice = [(207, 1.0), (569, 2.0), (569, 9.0)]  # two copies at one place: the band alone, no miss to measure
    assert sampled.fit_error(twice, target) >= sampled.NOISE
    assert sampled.fit_error([(569, 1.0), (569, 2.0), (569, 3.0)], target) is None
    # a band or a miss past any float (copies close together, a target far beyond): unknown, not an overflow
    assert sampled.fit_error([(4000, 1.0), (4001, 0.01), (4003, 40.0)], 90000) is None
    assert sampled.fit_error([(100, 1.0), (200, 200.0), (400, 1e-6)], 1e15) is None  # its band 7.2: the miss


def test_a_count_follows_the_line_through_the_deepest_two_and_its_error_widens_with_the_reach():
    value, error = sampled._line([(10, 105), (20, 205), (40, 405)], 80)
    assert value == 805 and error == 0
    value, error = sampled._line([(10, 100), (20, 200), (40, 500)], 80)
    assert value == 1100 and math.isclose(error, 0.2)  # 100 + 10 x 30 = 400 against 500
    # one span beyond the deepest sample keeps the error; two spans double it; never below the noise
    assert sampled._reach(0.2, [20, 40], 80) == 0.2 and math.isclose(sampled._reach(0.2, [20, 40], 160), 0.4)
    assert sampled._reach(0.01, [20, 40], 80) == sampled.NOISE


def test_a_step_whose_own_units_barely_grow_is_fitted_along_rank_0s_shards():
    """Mixtral 8x7B's global plan at 1,024 ranks as measured here (2, 4, 8 layers; rank 0's shards 37, 61, 112; the
    job's 415): its items grew 3 % from the first copy to the second while its CPU grew 35 %, which a power law along
    the items took for an 11th power (a fit's error of 25,400 %). Along rank 0's shards its error is the copies'."""
    def copy(items: int, cpu: float, validated: int, validation_cpu: float) -> RankCosts:
        return RankCosts("torch_dist", 1024, [
            Step("sharding validation", "save", "validate", cpu_s=validation_cpu, units=validated),
            Step("global plan", "save", "plan", cpu_s=cpu, units=items)])

    computed = {2: copy(6343, 0.1339, 37972, 0.1722), 4: copy(6515, 0.1804, 62626, 0.4304),
                8: copy(10027, 0.2233, 115102, 0.9351)}
    shards = {2: 37, 4: 61, 8: 112, 32: 415}
    fitted = {step.name: step for step in sampled._fitted(_job(1024), computed, shards, 32,
                                                          RankCosts("torch_dist", 1024, [])).steps}
    plan = fitted["global plan"]
    along_shards = sampled.fit_axis([(37, 0.1339), (61, 0.1804), (112, 0.2233)], 415)
    assert plan.cpu_s == round(along_shards, 4)
    assert plan.extrapolated["error"] == round(sampled.fit_error([(37, 0.1339), (61, 0.1804), (112, 0.2233)], 415), 3)
    assert plan.extrapolated["error"] < 1  # a factor under 2 either way (along its items: 25,400 %)
    # the sharding validation's items grow with the copies (1.6x, 1.8x): fitted along them
    validation = fitted["sharding validation"]
    along_items = sampled.fit_axis([(37972, 0.1722), (62626, 0.4304), (115102, 0.9351)], validation.units)
    assert validation.cpu_s == round(along_items, 4)
    assert not sampled._spread([6343, 6515, 10027]) and sampled._spread([37972, 62626, 115102])


def _job(world: int = 64, **settings) -> JobCheckpoint:
    workload = resolve_workload(TINY, {"num_layers": 32, **settings})
    ranks = tuple([1] * world)
    return JobCheckpoint(engine="torch_dist", world_size=world, ranks_per_node=8, write_bytes=ranks,
                         write_files=ranks, read_bytes=ranks, read_files=ranks, storage="fs", thread_count=2,
                         async_save=False, workload=dataclasses.asdict(workload), state="megatron")


def test_the_depths_sampled_double_from_two_layers_a_stage_and_a_moe_keeps_its_pattern():
    job = _job()
    layers = job.workload["megatron"]["architecture"]["num_layers"]
    sizes = sampled.depth_sizes(job)
    assert sizes == [2, 4, 8, 16, 32] and layers == 32
    staged = _job(pipeline_model_parallel_size=2)
    assert sampled.depth_sizes(staged) == [4, 8, 16, 32]
    # under FSDP2 too: each layer's parameters are chunked on their own (the next test)
    assert sampled.depth_sizes(dataclasses.replace(job, state="megatron_fsdp2")) == [2, 4, 8, 16, 32]
    moe = dataclasses.replace(job, workload={**job.workload, "megatron": {
        **job.workload["megatron"], "architecture": {**job.workload["megatron"]["architecture"], "num_layers": 8,
                                                     "moe": {"layers": [False, False] + [True] * 6}}}})
    assert sampled.at_depth(moe, 4).workload["megatron"]["architecture"]["moe"]["layers"] == [False, True, True, True]


def test_an_fsdp2_copy_with_fewer_layers_holds_each_of_its_layers_as_the_whole_model_does():
    """What makes an FSDP2 job's depth sampleable: a rank's chunks of a layer are the same whatever the depth."""
    from ckpt_bench.layout.megatron_fsdp2 import rank_state
    from ckpt_bench.layout.megatron_shapes import MegatronGPT
    from ckpt_bench.layout.workload import Workload

    def layers(depth: int) -> dict:
        job = sampled.at_depth(_job(48, use_torch_fsdp2=True, use_distributed_optimizer=False), depth)
        gpt = MegatronGPT(Workload(**job.workload), 48)
        held = rank_state(gpt, gpt.coordinates(47))  # the last rank: the uneven and the empty chunks
        return {(s.key, s.global_offset[0]): (s.global_offset[1:], s.local_shape) for s in held
                if s.key.startswith("decoder.layers.") and s.prepend_axis_num}

    shallow, deep = layers(2), layers(32)
    assert shallow and all(deep[key] == chunk for key, chunk in shallow.items() if key[1] == 0)
    assert {key[0] for key in shallow} == {key[0] for key in deep}


def test_an_extrapolated_step_is_a_range_of_its_fits_error_and_open_where_the_error_is_unknown():
    network = Figure(None, "not given")
    fitted = Step("global plan", "save", "plan", cpu_s=10.0, extrapolated={"samples": [[8, 2]], "error": 0.25})
    term = _step_term("global plan", fitted, network)
    assert (term.low, term.high) == (8.0, 12.5) and "fit error -20%/+25%" in term.what
    wide = dataclasses.replace(fitted, extrapolated={"samples": [[8, 2]], "error": 1.5})  # a factor either way
    term = _step_term("global plan", wide, network)
    assert (term.low, term.high) == (4.0, 25.0) and "fit error -60%/+150%" in term.what
    unknown = dataclasses.replace(fitted, extrapolated={"samples": [[8, 2]], "error": None})
    assert _step_term("global plan", unknown, network).high is None
    sampled_sum = Step(HELD_LOAD_PLAN, "load", "plans", cpu_s=100.0,
                       rank_sample={"ranks": 16, "of": 1024, "error": 0.15})
    term = _step_term("load plan", sampled_sum, network)
    assert (term.low, term.high) == pytest.approx((85.0, 115.0))
    assert "over 16 of its 1,024 ranks' plans and scaled, +-15%" in term.what


def test_the_fitted_steps_count_what_the_exact_computation_counts_at_the_jobs_depth(tmp_path, monkeypatch):
    """Real computations (megatron-core's own steps in worker processes): a dense model's shards grow by the same
    count each layer, so the fitted units are the exact ones; the CPU is marked with its fit's error. The load plan
    of every held shard, a sum over the ranks, is computed at the job's own depth over a sample of its ranks: its
    items within the sample's error of the exact count."""
    job = _job(24)
    fitted = sampled.sampled_rank_costs(job, time_s=0.01, step_budget_s=60)  # the first three alone
    monkeypatch.setenv("CKPT_BENCH_CACHE", str(tmp_path))
    exact = rank_costs(job, 60, exact=True)
    assert exact.method == "computed"
    assert fitted.method == "extrapolated" and len(fitted.samples) >= 3
    assert all(depth < job.workload["megatron"]["architecture"]["num_layers"] for _, depth in fitted.samples)
    for got, want in zip(fitted.steps, exact.steps, strict=True):
        assert (got.name, got.operation) == (want.name, want.operation)
        if want.units is not None and got.name == "sharding validation":
            assert got.units == want.units
        if got.name == HELD_LOAD_PLAN:
            assert got.extrapolated is None and got.rank_sample == {"ranks": 16, "of": 24, "error": 0.15}
            assert got.units == pytest.approx(want.units, rel=got.rank_sample["error"]) and got.cpu_s > 0
        elif want.cpu_s is not None:
            assert got.extrapolated["error"] is not None and got.cpu_s > 0
    # .metadata's bytes, a power law through 2, 4, 8 layers taken to 32: within 30 % here (23 % measured)
    assert fitted.metadata_file_bytes == pytest.approx(exact.metadata_file_bytes, rel=0.3)


def test_the_copies_run_at_once_one_process_a_core_and_a_failed_one_stops_the_others(monkeypatch):
    """The first three copies and the sums over a sample of the ranks: one worker process a core (the cgroup's quota
    counted), at most four. A computation that fails ends the others at once, the deepest copy's too (minutes at
    1,024 ranks), with its own error; no worker is left running."""
    depths = sampled.depth_sizes(_job())
    monkeypatch.setattr(sampled, "usable_cores", lambda: 16)
    assert sampled.workers_for(depths) == 4 and sampled.workers_for(depths[-1:]) == 2
    monkeypatch.setattr(sampled, "usable_cores", lambda: 1)
    assert sampled.workers_for(depths) == 1
    monkeypatch.setattr(sampled, "usable_cores", lambda: 2)

    class Worker:
        """A worker whose copies run until it is killed, and whose sums fail at once."""

        started: list = []

        def __init__(self):
            self.killed, self.closed = threading.Event(), False
            self.process = types.SimpleNamespace(kill=self.killed.set)
            Worker.started.append(self)

        def ask(self, request: dict) -> dict:
            if request.get("count_only"):
                return {"rank0_units": 10}
            if request["sums"]["steps"] == "sums":
                raise RuntimeError("computing the rank-count costs failed: the sums broke")
            self.killed.wait(60)
            raise RuntimeError("computing the rank-count costs failed: killed")

        def close(self) -> None:
            self.closed = True

    monkeypatch.setattr(sampled, "_Worker", Worker)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="the sums broke"):
        sampled.sampled_rank_costs(_job(24), time_s=0.01, step_budget_s=60)
    assert time.monotonic() - started < 10  # not the 60 s the deepest copy would have taken
    assert len(Worker.started) == 2 and all(worker.killed.is_set() and worker.closed for worker in Worker.started)


def test_a_worker_that_failed_names_its_failure_to_every_request_and_closes():
    """A real worker process: a request it cannot compute ends it; that request and any later one raise with its
    last line, and closing it raises nothing (its pipe is broken)."""
    job = _job(24)
    broken = dataclasses.replace(job, workload={**job.workload, "megatron": {
        **job.workload["megatron"], "architecture": {**job.workload["megatron"]["architecture"], "hidden_size": "x"}}})
    worker = sampled._Worker()
    try:
        with pytest.raises(RuntimeError, match="computing the rank-count costs failed: .*Error") as first:
            worker.ask({"job": broken.as_dict(), "budget": 60, "sums": {"steps": "others"}})
        with pytest.raises(RuntimeError) as again:
            worker.ask({"job": job.as_dict(), "count_only": True})
        assert str(again.value) == str(first.value)
    finally:
        worker.close()
    assert worker.process.poll() is not None


def test_the_usable_cores_are_the_affinity_or_the_cgroups_quota_where_lower(tmp_path, monkeypatch):
    from ckpt_bench.core.environment import usable_cores

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert usable_cores(tmp_path) == 16  # no cgroup files: the affinity
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cores(tmp_path) == 16
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # a pod's limit of 1.5 CPUs: two cores, partly
    assert usable_cores(tmp_path) == 2
    (tmp_path / "cpu.max").write_text("6400000 100000\n")  # a quota above the affinity
    assert usable_cores(tmp_path) == 16
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("400000\n")  # cgroup v1
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cores(tmp_path) == 4
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert usable_cores(tmp_path) == 16


def test_a_sum_over_the_ranks_is_scaled_from_each_class_and_its_error_is_the_widest_class_spread():
    sample = RankSample((((0, 31), 32), ((1, 32, 63), 32)))
    assert sample.ranks == [0, 31, 1, 32, 63]
    total, error = sample.scaled({0: 100, 31: 100, 1: 200, 32: 220, 63: 180})
    assert total == pytest.approx(100 * 32 + 200 * 32) and error == pytest.approx(40 / 200)
    # classes of ranks holding the same items: the timing's noise alone
    assert sample.scaled({0: 5, 31: 5, 1: 7, 32: 7, 63: 7}) == (5 * 32 + 7 * 32, pytest.approx(0.15))


def test_a_rank_sample_takes_each_class_of_ranks_evenly_from_its_first_to_its_last_data_parallel_rank():
    """Primus's DeepSeek-V3 layout at 1,024 ranks (EP 8): eight classes of 128 ranks, two of each for a sample of
    16, its first and last data-parallel rank; a dense job's one class, 16 of its ranks from first to last."""
    from ckpt_bench.layout.workload import Workload
    from ckpt_bench.projection.rank_costs.megatron_state import MegatronState

    moe = resolve_workload(TINY, {"num_layers": 4, "num_experts": 8, "expert_model_parallel_size": 8,
                                  "moe_router_topk": 2})
    state = MegatronState(moe, 1024)
    sample = state.rank_sample(16)
    assert len(sample.classes) == 8 and all(count == 128 for _, count in sample.classes)
    assert sorted(sample.ranks) == sorted([*range(8), *range(1016, 1024)])
    dense = MegatronState(Workload(**_job(64).workload), 64)
    sample = dense.rank_sample(16)
    assert len(sample.classes) == 1 and sample.ranks[0] == 0 and sample.ranks[-1] == 63 and len(sample.ranks) == 16
    assert dense.rank_sample(64) is None  # every rank: no sample


def test_the_save_and_load_distributions_share_one_timed_unpickling_of_the_same_payloads(monkeypatch):
    """torch_dist's fully parallel save and load gather the same ShardedTensors: each group's payloads are unpickled
    once a timing round, and megatron-core's distribution runs for the save and for the load (ignore_groups) over
    those same lists; both steps hold that unpickling's time. Where the budget runs out, both are lower bounds."""
    from ckpt_bench.projection.rank_costs import torch_dist
    from ckpt_bench.projection.rank_costs.base import Budget

    unpickled_into, distributed = [], []
    unpickle, distribute = torch_dist._unpickle_into, torch_dist._distribute
    monkeypatch.setattr(torch_dist, "_unpickle_into",
                        lambda gathered, *args: (unpickled_into.append(gathered), unpickle(gathered, *args)))
    monkeypatch.setattr(torch_dist, "_distribute", lambda gathered, ignore_groups, assignment: (
        distributed.append((gathered, ignore_groups)), distribute(gathered, ignore_groups, assignment)))
    save, load = torch_dist.TorchDistCosts(_job(16), Budget(60.0)).distributions()
    assert (save.operation, load.operation) == ("save", "load") and save.complete and load.complete
    assert "ignore_groups=True" in load.what and "ignore_groups" not in save.what
    assert save.cpu_s > 0 and load.cpu_s > 0 and save.host_bytes == load.host_bytes > 0
    rounds = len(unpickled_into)
    assert 1 <= rounds <= 3 and len(distributed) == 2 * rounds  # one unpickling, two distributions, a round
    for index, gathered in enumerate(unpickled_into):
        assert [(id(got), load) for got, load in distributed[2 * index:2 * index + 2]] == [(id(gathered), False),
                                                                                          (id(gathered), True)]
    save, load = torch_dist.TorchDistCosts(_job(16), Budget(1e-6)).distributions()
    assert not save.complete and not load.complete and "lower bound" in save.why and "lower bound" in load.why
