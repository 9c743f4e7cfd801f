"""The projection's arithmetic: what a job's hosts move, each term and its range, the binding limit, the inputs'
sources; and the advice at the job's size (docs/projection.md). No rank starts here."""

from __future__ import annotations

import math

import pytest

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.model.checkpointing import CheckpointSettings
from ckpt_bench.projection import JobCheckpoint, ProjectionOptions
from ckpt_bench.projection.inputs import Figure, measured_clients
from ckpt_bench.projection.model import Inputs, project
from ckpt_bench.projection.rank_costs import RankCosts, Step
from ckpt_bench.projection.schedule import HELD_LOAD_PLAN
from ckpt_bench.report.advice import (
    AdviceOptions,
    advise,
    bandwidth_needed,
    daly_interval,
    largest_cost,
    lost_share,
)

GB = 10**9


def job(write=(4 * GB, 4 * GB, 1 * GB, 1 * GB), per_node=2, **changes) -> JobCheckpoint:
    values = dict(engine="torch-save", world_size=len(write), ranks_per_node=per_node, write_bytes=tuple(write),
                  write_files=tuple(1 for _ in write), read_bytes=tuple(write), read_files=tuple(1 for _ in write),
                  storage="disk", thread_count=1, async_save=False, workload={}, state="dlio")
    return JobCheckpoint(**{**values, **changes})


def inputs(client=None, storage=None, network=None, storage_at_least=False) -> Inputs:
    unknown = Figure(None, "not given")
    return Inputs(client_write=Figure(client, "given") if client else unknown,
                  client_read=Figure(client, "given") if client else unknown,
                  storage_write=Figure(storage, "given", at_least=storage_at_least) if storage else unknown,
                  storage_read=Figure(storage, "given", at_least=storage_at_least) if storage else unknown,
                  network=Figure(network, "given") if network else unknown, write_requests=unknown,
                  read_requests=unknown)


NO_STEPS = RankCosts("torch-save", 4, [])


def test_hosts_sum_their_ranks_and_the_busiest_is_named():
    traffic = job().save
    assert [host.bytes for host in traffic.hosts()] == [8 * GB, 2 * GB]
    assert traffic.busiest().host == 0 and traffic.active_hosts == 2 and traffic.total_bytes == 10 * GB
    assert traffic.as_dict()["busiest_host"] == {"host": 0, "bytes": 8 * GB, "files": 2, "ranks_moving_bytes": 2}


def test_the_client_binds_when_one_host_carries_most_of_the_bytes():
    result = project(job(), NO_STEPS, inputs(client=2.0, storage=10.0), None)
    save = result["save"]
    assert save["binding"] == "client" and save["seconds"] == 4.0  # 8 GB at 2 GB/s, against 10 GB at 10 GB/s
    assert save["could_also_bind"] == []
    terms = {t["name"]: t for t in save["terms"]}
    assert terms["storage"]["seconds"] == 1.0 and terms["requests"]["range_s"] == [None, None]  # not projected


def test_the_storage_binds_when_every_host_writes_at_once():
    many = job(write=(GB,) * 64, per_node=8)  # 8 hosts of 8 GB
    save = project(many, NO_STEPS, inputs(client=4.0, storage=16.0), None)["save"]
    assert save["binding"] == "storage" and save["seconds"] == 4.0  # 64 GB at 16 GB/s; a host's 8 GB take 2 s


def test_a_ceiling_not_reached_makes_the_storage_term_a_bound_and_the_total_a_range():
    many = job(write=(GB,) * 64, per_node=8)
    save = project(many, NO_STEPS, inputs(client=4.0, storage=16.0, storage_at_least=True), None)["save"]
    assert save["seconds"] is None and save["range_s"] == [2.0, 4.0]
    assert save["binding"] == "client" and save["could_also_bind"] == ["storage"]


def test_unknown_figures_leave_a_lower_bound():
    save = project(job(), NO_STEPS, inputs(storage=10.0), None)["save"]
    assert save["range_s"] == [1.0, None] and save["binding"] == "storage" and "client" in save["could_also_bind"]


def test_global_steps_add_their_cpu_and_their_network_bytes_and_later_saves_skip_what_they_can():
    steps = [Step("sharding validation", "save", "v", cached_away=True, cpu_s=3.0, host_bytes=2 * GB),
             Step("finalize", "save", "f", cpu_s=0.5, host_bytes=0),
             Step(HELD_LOAD_PLAN, "load", "l", cpu_s=0.25)]
    costs = RankCosts("torch_dist", 4, steps, metadata_file_bytes=GB // 2, every_rank_reads_metadata=True)
    result = project(job(engine="torch_dist"), costs, inputs(client=2.0, storage=10.0, network=1.0), None)
    # Megatron-LM's defaults: the fully parallel save validates twice, every save (fully_parallel.py 128-130):
    # 2 x (3 + 2 (2 GB at 1 GB/s)) + 0.5 + 4 (client) + 0.25 (the .metadata on rank 0's host)
    assert result["save"]["seconds"] == pytest.approx(14.75)
    assert result["steady_save"]["seconds"] == pytest.approx(14.75)
    # under ckpt_assume_constant_structure only a process's first save validates
    constant = job(engine="torch_dist", settings=CheckpointSettings(ckpt_assume_constant_structure=True).as_dict())
    result = project(constant, costs, inputs(client=2.0, storage=10.0, network=1.0), None)
    assert result["save"]["seconds"] == pytest.approx(14.75)
    assert result["second_save"]["seconds"] == result["steady_save"]["seconds"] == pytest.approx(4.75)
    # a restart: every rank also reads the 0.5 GB .metadata: host 0 reads 9 GB at 2 GB/s
    assert result["load"]["seconds"] == pytest.approx(0.25 + 4.5)


def test_a_step_cut_short_by_its_budget_is_a_lower_bound_at_the_cpu_it_spent():
    steps = [Step("sharding validation", "save", "v", cpu_s=30.0, complete=False, why="budget")]
    save = project(job(engine="torch_dist"), RankCosts("torch_dist", 4, steps), inputs(client=2.0, storage=10.0),
                   None)["save"]
    assert save["range_s"] == [64.0, None]  # validated twice (the fully parallel save's own), 4 s of client
    assert save["binding"] == "rank-count steps"


def test_an_async_save_blocks_for_its_global_steps_and_its_finalize():
    steps = [Step("global plan", "save", "p", cpu_s=1.0), Step("finalize", "save", "f", cpu_s=0.5)]
    save = project(job(async_save=True), RankCosts("dcp", 4, steps), inputs(client=2.0, storage=10.0), None)["save"]
    assert save["block_range_s"] == [1.5, None] and save["seconds"] == 5.5


def test_a_measured_client_is_the_busiest_host_that_ran_over_its_ranks_io_phases():
    two_hosts = job(hosts_that_ran=(1,))  # the run's one host played job host 1 (ranks 2 and 3: 1 GB each)

    def save(write_end: float) -> dict:
        phases = [{"phase": "plan", "seconds": 0.5, "start": 0.0}, {"phase": "write", "seconds": write_end - 0.5,
                                                                    "start": 0.5}]
        return {"complete": True, "total_time": write_end + 1,
                "phases_per_rank": [{"rank": 0, "phases": phases}, {"rank": 1, "phases": phases}]}

    report = {"saves": [save(9.5), save(1.5), save(2.5)], "loads": []}
    write, read, why = measured_clients(report, two_hosts)
    assert why is None and read is None
    # 2 GB over the write windows of the saves after the first (1 s and 2 s): the median of 2 and 1 GB/s
    assert write.value == pytest.approx(1.5)
    assert "job host 1" in write.source and "a local folder: this host's own disk" in write.source
    assert measured_clients(report, job())[2].startswith("this run is not a subset of whole hosts")


def test_options_refuse_what_is_not_a_rate():
    with pytest.raises(Exception, match="--storage-write-gbps -1: must be a positive number"):
        ProjectionOptions(storage_write_gbps=-1)
    assert ProjectionOptions(network_gbps=25).given == {"network_gbps"}
    assert ProjectionOptions(storage_write_gbps=123.4567891).storage_write_gbps == 123.4567891  # every digit kept


def _report(**projection) -> dict:
    return {"world_size": 2, "config": {"job_world_size": 256}, "saves": [
        {"complete": True, "total_time": 4.2, "block_time": 4.2, "bytes": 10 * GB}] * 3, "load_time": 1.0,
        "projection": projection or None}


def test_the_advice_takes_the_jobs_gpus_not_the_subsets():
    advice = advise(_report(), AdviceOptions(gpu_mttf_hours=50000))
    assert advice["mtbf_s"] == round(50000 * 3600 / 256, 1) and "job_world_size" in advice["mtbf_from"]
    assert advice["checkpoint_cost_s"] == 4.2  # no projection: this run's


def test_the_advice_takes_the_projected_cost_and_restart():
    report = _report(job={"ranks": 256, "async_save": False}, save={"range_s": [40.0, 40.0], "binding": "storage"},
                     load={"range_s": [100.0, 100.0]})
    advice = advise(report, AdviceOptions(gpu_mttf_hours=50000))
    assert advice["checkpoint_cost_s"] == 40.0 and "projected for the whole job of 256 ranks" in advice[
        "checkpoint_cost_from"]
    assert advice["restart_cost_s"] == 400.0  # the projected load + the default 300 s overhead
    what_if = {row["gpus"]: row for row in advice["what_if"]}
    assert what_if[256]["daly_interval_s"] == advice["daly_interval_s"]


def test_a_checkpoint_budget_gives_the_bandwidth_that_meets_it():
    mtbf, restart = 3600.0 * 2, 600.0
    allowed = largest_cost(0.05, restart, mtbf)
    assert lost_share(allowed, restart, mtbf) == pytest.approx(0.05, abs=1e-6)
    report = {"projection": {"job": {"async_save": False}, "save_traffic": {"bytes": 1000 * GB,
                                                                          "busiest_host": {"bytes": 10 * GB}},
                             "save": {"terms": [{"kind": "step", "range_s": [5.0, 5.0]},
                                                {"kind": "transfer", "range_s": [99.0, 99.0]}]}}}
    section = bandwidth_needed(report, 0.05, None, restart, mtbf)
    assert section["feasible"] and section["fixed_cost_s"] == 5.0
    assert section["storage_write_gbps_needed"] == pytest.approx(1000 / (allowed - 5), rel=1e-3)
    assert section["client_write_gbps_needed"] == pytest.approx(10 / (allowed - 5), rel=1e-3)
    heavy = {"projection": {**report["projection"], "save": {"terms": [{"kind": "step", "range_s": [1e6, 1e6]}]}}}
    refused = bandwidth_needed(heavy, 0.05, None, restart, mtbf)
    assert refused["feasible"] is False and "no bandwidth meets it" in refused["why"]
    assert math.isfinite(allowed) and allowed > 0


def test_a_plan_shows_its_hosts_and_advises_at_the_jobs_size_from_its_projection():
    import json

    from helpers import ROOT, launch

    result = launch("--workload", ROOT / "ckpt_bench" / "configs" / "tiny_gpt.yaml", "--set", "ckpt_format=torch",
                    "--set", "use_distributed_optimizer=true", "--nnodes", "4", "--nproc-per-node", "2", "--plan",
                    "--format", "json", "--storage-write-gbps", "1", "--client-write-gbps", "0.5", "--network-gbps",
                    "1", "--gpu-mttf-hours", "50000", "--checkpoint-budget", "5")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    # Megatron's legacy format with the distributed optimizer: the data-parallel rank 0s write, on one host
    assert plan["hosts"]["save"]["hosts_moving_bytes"] == 1 and plan["hosts"]["load"]["hosts_moving_bytes"] == 4
    save = plan["projection"]["save"]
    assert [t["name"] for t in save["terms"]][0] == "optimizer gather" and save["binding"] == "client"
    advice = plan["advice"]
    assert advice["checkpoint_cost_s"] == save["seconds"] and "/ 8 GPUs" in advice["mtbf_from"]
    assert advice["checkpoint_budget"]["feasible"] is True


def test_a_budget_decided_by_a_bound_is_unknown_and_its_bandwidth_at_least():
    mtbf, restart = 3600.0 * 2, 600.0
    allowed = largest_cost(0.05, restart, mtbf)
    report = {"projection": {"job": {"async_save": False}, "save_traffic": {"bytes": 1000 * GB,
                                                                          "busiest_host": {"bytes": 10 * GB}},
                             "steady_save": {"terms": [{"kind": "step", "range_s": [5.0, 2 * allowed]}]}}}
    section = bandwidth_needed(report, 0.05, None, restart, mtbf)
    assert section["feasible"] == "unknown" and section["needed_is"] == "at least"
    assert section["storage_write_gbps_needed_range"] == [pytest.approx(1000 / (allowed - 5), rel=1e-3), None]
    assert "counts" not in section["why"] and "redone after each failure" in section["share_counts"]


def test_an_async_budget_uses_the_async_saves_own_interval():
    mtbf, restart = 3600.0 * 24, 600.0
    report = {"projection": {"job": {"async_save": True}, "save_traffic": {"bytes": 1000 * GB,
                                                                         "busiest_host": {"bytes": 10 * GB}},
                             "steady_save": {"terms": []}}}
    section = bandwidth_needed(report, 0.05, 12.85, restart, mtbf)
    own = daly_interval(12.85, mtbf)
    assert section["daly_interval_s"] == pytest.approx(own, rel=1e-3)
    assert own < daly_interval(section["max_checkpoint_cost_s"], mtbf)  # not the budget's synchronous C
    assert section["storage_write_gbps_needed"] == pytest.approx(1000 / own, rel=1e-3)


def test_the_advice_gives_c_r_the_interval_and_goodput_as_ranges_where_the_projection_does():
    report = {"world_size": 8, "projection": {
        "job": {"ranks": 8, "async_save": False},
        "steady_save": {"range_s": [100.0, 150.0], "binding": "rank-count steps"},
        "load": {"range_s": [200.0, None], "binding": "storage"}}}
    advice = advise(report, AdviceOptions(gpu_mttf_hours=50000))
    assert advice["checkpoint_cost_is"] == "range" and advice["checkpoint_cost_range_s"] == [100.0, 150.0]
    assert advice["restart_cost_is"] == "at least" and advice["restart_cost_range_s"][1] is None
    low, high = advice["daly_interval_range_s"]
    assert low == advice["daly_interval_s"] < high
    assert advice["goodput_at_optimum_range"][0] is None  # R is open above: no worst case
    assert any("a range" in note for note in advice["notes"])
    from ckpt_bench.present.rows import advice_rows
    from ckpt_bench.report.schema import Advice

    rows = dict(advice_rows(Advice.from_json(advice)))
    assert rows["checkpoint cost C"].startswith("100.0 s (1.67 min)-150.0 s")
    assert rows["restart cost R"].startswith("at least")
    assert rows["goodput at Daly's interval"].startswith("at most")


def _finite_or_none(value, where: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _finite_or_none(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _finite_or_none(item, f"{where}[{index}]")
    elif isinstance(value, float):
        assert math.isfinite(value), where


def test_every_advice_figure_is_finite_or_null_over_the_extremes_the_options_accept():
    """A sweep over the corners the options accept (an MTTF of a fraction of a second to a billion hours, a write
    of 1e-12 to 1e9 GB/s, restarts from nothing to 30,000 years, budgets from 1e-6 to 99.99 %, one GPU to 32,768):
    no traceback, every figure finite or null, and the summary's rows of it made."""
    from ckpt_bench.present.rows import advice_rows, purchase_advice_rows, what_if_rows
    from ckpt_bench.report.schema import Advice

    for mttf in (1e-9, 1e-3, 1.0, 5e4, 1e9):
        for write in (1e-12, 1e-6, 1.0, 1e3, 1e9):
            for load in (0.0, 1e-3, 1e6, 1e12):
                for budget in (1e-6, 5.0, 99.99):
                    for gpus in (1, 32768):
                        save = 10**15 / 1e9 / write
                        report = {"world_size": gpus, "projection": {
                            "job": {"ranks": gpus, "async_save": False},
                            "save_traffic": {"bytes": 10**15, "busiest_host": {"bytes": 10**13}},
                            "steady_save": {"range_s": [save, save * 2], "terms": [
                                {"kind": "step", "range_s": [save / 10, None]}]},
                            "load": {"range_s": [load, load]},
                            "purchase": [{"storage_write_gbps": write, "steady_save": {"range_s": [save, None]},
                                          "load": {"range_s": [load, load]}}]}}
                        advice = advise(report, AdviceOptions(gpu_mttf_hours=mttf, checkpoint_budget=budget))
                        _finite_or_none(advice, f"mttf {mttf} write {write} load {load} budget {budget} gpus {gpus}")
                        typed = Advice.from_json(advice)  # and shown: the summary's rows of it
                        assert advice_rows(typed) and purchase_advice_rows(typed) and what_if_rows(typed)


def test_several_storage_ceilings_price_one_computation_of_the_steps_row_by_row():
    from ckpt_bench.projection import purchase
    from ckpt_bench.projection.feasibility import Limits

    options = ProjectionOptions(storage_write_gbps="100,200", storage_read_gbps="50")
    assert options.storage_write_gbps == 100.0 and options.storage_ceilings == ((100.0, 50.0), (200.0, 50.0))
    many = job(write=(100 * GB,) * 64, per_node=8)
    rows = purchase(many, NO_STEPS, inputs(client=1000.0, storage=1.0), None, Limits(), options.storage_ceilings)
    assert [row["save"]["seconds"] for row in rows] == [64.0, 32.0]  # 6,400 GB at 100 and 200 GB/s
    assert [row["load"]["seconds"] for row in rows] == [128.0, 128.0]  # read at 50 GB/s in both
    with pytest.raises(ConfigError, match="'x' is not a number"):
        ProjectionOptions(storage_write_gbps="100,x")
    with pytest.raises(ConfigError, match="3 ceilings for 2 write ceilings"):
        ProjectionOptions(storage_write_gbps="1,2", storage_read_gbps="1,2,3")


def test_a_subsets_projection_never_falls_below_what_its_hosts_measured():
    from ckpt_bench.projection import projection

    ran = job(hosts_that_ran=(0,))
    saves = [{"complete": True, "total_time": t, "repetition": 0} for t in (5.0, 8.0, 9.0)]
    options = ProjectionOptions(storage_write_gbps=100.0, client_write_gbps=100.0, host_memory_gb=1000.0)
    section = projection(ran, options, {"saves": saves})
    for key in ("save", "second_save", "steady_save"):
        assert section[key]["range_s"][0] == 8.5 and section[key]["binding"] == "the hosts' measured save"
        assert "measured 8.5 s a steady save" in section[key]["floor"]["what"]
    assert section["steady_save"]["could_also_bind"] == ["storage"]  # the limit the model found binding
    # hosts that are not whole hosts of the job measured no floor
    assert projection(job(), options, {"saves": saves})["save"]["range_s"][0] < 1


def test_the_stage_a_host_pays_around_its_writes_is_a_measured_term_of_each_save():
    from ckpt_bench.projection import projection

    def save(stage: float, write: float) -> dict:
        phases = [{"phase": "stage", "seconds": stage, "start": 0.0},
                  {"phase": "write", "seconds": write, "start": stage}]
        return {"complete": True, "total_time": stage + write, "repetition": 0, "bytes": 8 * GB,
                "phases_per_rank": [{"rank": 0, "phases": phases}, {"rank": 1, "phases": phases[1:]}]}

    report = {"saves": [save(5.0, 4.0), save(1.0, 4.0), save(2.0, 4.0), save(1.5, 4.0)]}
    options = ProjectionOptions(storage_write_gbps=100.0, client_write_gbps=100.0, host_memory_gb=1000.0)
    section = projection(job(hosts_that_ran=(0,)), options, report)
    staged = next(term for term in section["steady_save"]["terms"] if term["name"] == "stage (measured)")
    assert staged["range_s"] == [1.5, 1.5]  # the slowest rank's, the median of the saves after the first
    assert section["inputs"]["host_phases"][0]["phase"] == "stage"
    assert not [t for t in projection(job(), options, report)["save"]["terms"] if t["name"].startswith("stage")]
