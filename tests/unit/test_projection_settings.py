"""The projection follows the experiment's own checkpoint settings (docs/projection.md): each read with its
source, the global steps each save and restart runs at them, what the hosts can hold, the storage the retention
keeps, and what to change. Arithmetic and plans only; the real runs that check the steps are
benchmarks/projection_fidelity.py's."""

from __future__ import annotations

import json

import pytest
from helpers import ROOT, launch

from ckpt_bench.layout.megatron_shapes import layout
from ckpt_bench.layout.sources import resolve_workload
from ckpt_bench.model.checkpointing import CheckpointSettings
from ckpt_bench.present.projection import projection_rows
from ckpt_bench.projection import JobCheckpoint
from ckpt_bench.projection.changes import what_to_change
from ckpt_bench.projection.feasibility import Limits
from ckpt_bench.projection.inputs import Figure
from ckpt_bench.projection.model import Inputs, project
from ckpt_bench.projection.rank_costs import RankCosts, Step
from ckpt_bench.projection.schedule import HELD_LOAD_PLAN, load_steps, save_steps
from ckpt_bench.report.schema import Projection

GB = 10**9
TINY = str(ROOT / "ckpt_bench" / "configs" / "tiny_gpt.yaml")


def test_settings_are_megatrons_defaults_unless_a_file_sets_them_and_each_names_its_source():
    origin = {"ckpt_fully_parallel_load": "exp.yaml", "async_save": "exp.yaml"}.get
    settings = CheckpointSettings.from_megatron_args(
        {"ckpt_fully_parallel_load": True, "async_save": True, "save_interval": 100, "train_iters": 450,
         "save_retain_interval": 200}, origin)
    assert settings.ckpt_fully_parallel_save and settings.ckpt_fully_parallel_load
    assert not settings.ckpt_assume_constant_structure
    assert settings.sources["ckpt_fully_parallel_load"] == "exp.yaml"
    assert settings.sources["ckpt_assume_constant_structure"] == "Megatron-LM's default"
    # Megatron-LM runs no async save without the persistent worker (arguments.py 1139-1143)
    assert not settings.async_save and "turned off" in settings.sources["async_save"]
    # 450 iterations, a save every 100 and one at the end: 5; kept: 200, 400 and the latest (450)
    assert settings.saves_per_run() == 5 and settings.kept(5) == 3
    with pytest.raises(ValueError, match="save_interval 0"):
        CheckpointSettings(save_interval=0)


def test_an_experiment_file_its_presets_and_set_are_each_named():
    workload = resolve_workload(TINY, {"ckpt_assume_constant_structure": True})
    sources = workload.megatron["checkpointing"]["sources"]
    assert sources["ckpt_assume_constant_structure"] == "--set ckpt_assume_constant_structure"
    assert sources["save_interval"] == "tiny_gpt.yaml"
    assert sources["ckpt_fully_parallel_load"].startswith("module preset")


def test_a_restart_without_the_fully_parallel_load_reads_every_shard_a_rank_holds():
    default = layout(resolve_workload(TINY, {"use_distributed_optimizer": True}), 8)
    parallel = layout(resolve_workload(TINY, {"use_distributed_optimizer": True, "ckpt_fully_parallel_load": True}),
                      8)
    assert [r.load_bytes for r in default.ranks] == [r.resident_bytes for r in default.ranks]
    assert [r.load_bytes for r in parallel.ranks] == [r.bytes for r in parallel.ranks]
    # the replicated model (a third of the state beside Adam's fp32 shards) is read by each of the 8 ranks
    assert sum(r.load_bytes for r in default.ranks) > 2.5 * sum(r.load_bytes for r in parallel.ranks)
    # without the fully parallel save, data-parallel rank 0 writes every replicated shard
    main = layout(resolve_workload(TINY, {"use_distributed_optimizer": True, "ckpt_fully_parallel_save": False}), 8)
    assert main.total_bytes == default.total_bytes and main.ranks[0].bytes == main.ranks[0].resident_bytes
    assert all(r.bytes < r.resident_bytes / 2 for r in main.ranks[1:])  # the others: their optimizer shards


def _costs() -> RankCosts:
    steps = [Step("sharding validation", "save", "v", cpu_s=3.0), Step("fully parallel distribution", "save", "d",
             cpu_s=2.0), Step("global plan", "save", "p", cpu_s=1.0), Step("finalize", "save", "f", cpu_s=0.5),
             Step("sharding validation", "load", "v", cpu_s=3.0), Step("metadata", "load", "m", cpu_s=0.25),
             Step("fully parallel distribution", "load", "d", cpu_s=2.0), Step("load plan", "load", "l", cpu_s=0.1),
             Step(HELD_LOAD_PLAN, "load", "l", cpu_s=0.4), Step("exchange of loaded shards", "load", "x")]
    return RankCosts("torch_dist", 4, steps, metadata_file_bytes=GB // 100, every_rank_reads_metadata=True)


@pytest.mark.parametrize(("settings", "firsts", "seconds", "steadies"), [
    ({}, 3 + 2 + 3 + 1 + 0.5, 9.5, 9.5),  # every save validates twice, distributes and plans
    ({"ckpt_assume_constant_structure": True}, 9.5, 1.5, 0.5),  # later: the plan until it is cached (third)
    ({"ckpt_fully_parallel_save": False}, 3 + 1 + 0.5, 4.5, 4.5),
])
def test_each_save_of_a_process_runs_the_steps_megatron_core_runs_at_the_settings(settings, firsts, seconds,
                                                                                 steadies):
    chosen = CheckpointSettings(**settings)
    assert [sum(step.cpu_s for _, step in save_steps(_costs(), chosen, nth)) for nth in (1, 2, 3)] == [
        pytest.approx(firsts), pytest.approx(seconds), pytest.approx(steadies)]


def test_a_restart_runs_the_fully_parallel_loads_steps_only_with_it():
    plain = [label for label, _ in load_steps(_costs(), CheckpointSettings())]
    assert plain == ["sharding validation", "metadata", "load plan"]
    assert load_steps(_costs(), CheckpointSettings())[-1][1].name == HELD_LOAD_PLAN
    parallel = [label for label, _ in load_steps(_costs(), CheckpointSettings(ckpt_fully_parallel_load=True))]
    assert parallel == ["sharding validation", "metadata", "fully parallel distribution",
                        "metadata, again (the tensors' load)", "load plan", "exchange of loaded shards"]


def _inputs(rate: float) -> Inputs:
    figure = Figure(rate, "given")
    return Inputs(client_write=figure, client_read=figure, storage_write=figure, storage_read=figure,
                  network=Figure(10.0, "given"), write_requests=Figure(None, "n"), read_requests=Figure(None, "n"))


def _job(**changes) -> JobCheckpoint:
    values = dict(engine="torch_dist", world_size=4, ranks_per_node=2, write_bytes=(GB,) * 4, write_files=(2,) * 4,
                  read_bytes=(4 * GB,) * 4, read_files=(2,) * 4, storage="disk", thread_count=2, async_save=False,
                  workload={}, state="megatron", settings=CheckpointSettings().as_dict(),
                  fully_parallel_bytes=(GB,) * 4, held_bytes=(4 * GB,) * 4)
    return JobCheckpoint(**{**values, **changes})


def test_what_to_change_projects_the_fully_parallel_load_from_the_same_steps():
    job, costs, inputs = _job(), _costs(), _inputs(1.0)
    section = project(job, costs, inputs, None, Limits())
    changes = what_to_change(job, costs, inputs, None, Limits(), section)
    restart = next(c for c in changes if c["change"] == "ckpt_fully_parallel_load: true")
    effect = restart["effects"][0]
    assert effect["figure"] == "restart"
    # 16 GB read at 1 GB/s in all against 4 GB (and .metadata twice): the bytes bound both
    assert effect["before"]["range_s"][0] == pytest.approx(3 + 0.25 + 0.4 + 16.04, abs=0.01)
    assert effect["after"]["range_s"][0] < effect["before"]["range_s"][0] / 2
    assert {c["change"] for c in changes} >= {"ckpt_assume_constant_structure: true"}


def test_a_restart_reading_replicas_from_a_file_system_is_a_range_down_to_each_hosts_reads_once():
    """A host's page cache serves the replicas its ranks share once: a torch_dist restart without the fully
    parallel load from a file system moves, per host, between its held shards once and every rank's own reads.
    Said, and priced, where it applies, and only there."""
    # 2 hosts of 2 ranks, each rank holding 4 GB of which the host's two ranks share 3 GB: 5 GB a host once
    cached = _job(host_held_bytes=(5 * GB, 5 * GB))
    section = project(cached, _costs(), _inputs(1.0), None, Limits())
    steps = 3 + 0.25 + 0.4  # validation, .metadata, the load plan of every held shard
    metadata = GB // 100
    assert section["load"]["range_s"][0] == pytest.approx(steps + (10 * GB + 2 * metadata) / GB, abs=0.01)
    assert section["load"]["range_s"][1] == pytest.approx(steps + (16 * GB + 4 * metadata) / GB, abs=0.01)
    storage = next(t for t in section["load"]["terms"] if t["name"] == "storage")
    assert storage["seconds"] is None and "page cache" in storage["what"]
    # beside what a restart reads without it (the traffic, .metadata aside)
    assert section["load_traffic"]["page_cached"] == {"bytes": 10 * GB, "busiest_host_bytes": 5 * GB}
    assert section["load_traffic"]["bytes"] == 16 * GB
    reads = dict(projection_rows(Projection.from_json(section)))["a restart reads"]
    assert "16 GB" in reads and "(10 GB, the busiest host 5 GB, with each host's page cache" in reads
    assert any("page cache" in note and "range" in note for note in section["notes"])
    fully_parallel = CheckpointSettings(ckpt_fully_parallel_load=True).as_dict()
    for changes in ({"storage": "s3"}, {"settings": fully_parallel}, {"host_held_bytes": (8 * GB, 8 * GB)},
                    {"host_held_bytes": None}, {"engine": "dcp"}):
        other = project(_job(**{"host_held_bytes": (5 * GB, 5 * GB), **changes}), _costs(), _inputs(1.0), None,
                        Limits())
        assert "page_cached" not in other["load_traffic"], changes
        assert not any("page cache" in note for note in other["notes"]), changes


def test_a_save_no_host_can_hold_has_no_time_and_says_so():
    legacy = _job(engine="torch", write_bytes=(3000 * GB, 0, 0, 0), read_bytes=(3000 * GB, 10 * GB, 10 * GB, 10 * GB),
                  settings=None)
    section = project(legacy, RankCosts("torch", 4, []), _inputs(10.0), None, Limits(Figure(2048.0, "given")))
    save = section["save"]
    assert save["feasible"] is False and save["range_s"] == [None, None]
    assert save["range_if_it_ran_s"] == [300.0, 300.0]
    assert save["cannot_run"].startswith("cannot run on hosts of 2,048 GB (given): host 0 holds at least 3,000 GB")
    assert section["feasibility"]["load"]["fits"] is False  # torch.load of its whole files
    unknown = project(legacy, RankCosts("torch", 4, []), _inputs(10.0), None, Limits())
    assert unknown["save"]["feasible"] is None and unknown["save"]["seconds"] == 300.0


def test_capacity_follows_the_retention():
    settings = CheckpointSettings(save_interval=100, train_iters=1000, save_retain_interval=500)
    section = project(_job(settings=settings.as_dict()), _costs(), _inputs(1.0), None, Limits())
    capacity = section["capacity"]
    size = 4 * GB + GB // 100
    assert capacity["saves_per_run"] == 10 and capacity["checkpoints_kept"] == 2  # 500 and 1000
    assert capacity["footprint_bytes"] == 2 * size and capacity["peak_bytes"] == 3 * size
    every = project(_job(settings=CheckpointSettings(save_interval=100, train_iters=1000).as_dict()), _costs(),
                    _inputs(1.0), None, Limits())["capacity"]
    assert every["checkpoints_kept"] == 10 and "every checkpoint is kept" in every["retention"]


def test_files_are_checked_against_a_limit():
    settings = CheckpointSettings(save_interval=100, train_iters=1000)
    section = project(_job(settings=settings.as_dict()), _costs(), _inputs(1.0), None,
                      Limits(files_limit=50))
    files = section["feasibility"]["files"]
    assert files["files_a_checkpoint"] == 9 and files["fits"] is False  # 8 shard files and .metadata, 10 kept


def test_the_primus_legacy_experiment_cannot_save_on_2_tb_hosts_and_torch_dist_is_what_to_change(
        upstream_primus, tmp_path):
    experiment = upstream_primus / "examples/megatron/configs/MI300X/deepseek_v3-BF16-pretrain.yaml"
    result = launch("--workload", str(experiment), "--nnodes", "128", "--nproc-per-node", "8", "--plan",
                    "--storage-write-gbps", "100", "--client-write-gbps", "25", "--network-gbps", "25",
                    "--host-memory-gb", "2048", "--format", "json", cwd=upstream_primus,
                    env={"CKPT_BENCH_CACHE": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    projection = json.loads(result.stdout)["projection"]
    assert projection["job"]["engine"] == "torch" and projection["save"]["feasible"] is False
    assert projection["feasibility"]["save"]["bytes_needed"] > 8 * 10**12  # the fp32 gather onto host 0
    settings = {entry["name"]: entry for entry in projection["settings"]}
    assert settings["ckpt_fully_parallel_load"] == {"name": "ckpt_fully_parallel_load", "value": False,
                                                    "source": "module preset pre_trainer.yaml"}
    change = projection["what_to_change"][0]
    assert change["change"] == "ckpt_format: torch_dist"
    assert change["effects"][0]["after"]["feasible"] is True and not change["steps_computed"]


def test_a_step_whose_inputs_outrun_the_budget_is_a_floor_at_its_own_work_over_those_built():
    import pickle

    from ckpt_bench.projection.rank_costs.base import Budget, built_or_floor, unpickled

    payload = pickle.dumps([list(range(200)) for _ in range(200)])
    budget = Budget(0.02)

    def build(kept: list) -> None:
        while True:  # outruns any budget
            budget.check()
            kept.append(payload)
            pickle.dumps(pickle.loads(payload))

    step = Step("sharding validation", "save", "v")
    assert built_or_floor(step, budget, build, unpickled) is None
    assert not step.complete and step.cpu_s > 0 and "built" in step.why
    assert built_or_floor(Step("s", "save", "v"), Budget(60.0), lambda kept: kept.append(payload),
                          unpickled) == [payload]


@pytest.mark.parametrize("detect", [False, True])
def test_a_legacy_restart_from_a_file_system_reads_each_model_file_once_a_host(tmp_path, detect):
    """Megatron's legacy format: a model-parallel folder's data-parallel replicas all torch.load its model file; a
    host's page cache serves it once. `--plan` at 2 hosts of 4 (TP 2: two folders, each read by two ranks a host),
    against the file names megatron_torch gives each rank, host by host; auto-detect's read of rank 0's model file
    (every rank's first) is one more file only where the host reads no such file anyway."""
    from ckpt_bench.layout.megatron_shapes import MegatronGPT
    from ckpt_bench.layout.megatron_torch import MODEL_FILE, folder, rank_files

    overrides = {"tensor_model_parallel_size": 2, "use_distributed_optimizer": True,
                 "auto_detect_ckpt_format": detect}
    sets = [arg for key, value in overrides.items() for arg in ("--set", f"{key}={str(value).lower()}")]
    result = launch("--workload", TINY, *sets, "--nnodes", "2", "--nproc-per-node", "4", "--plan",
                    "--engine", "torch", "--storage-read-gbps", "1", "--client-read-gbps", "1", "--format", "json",
                    env={"CKPT_BENCH_CACHE": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    projection = json.loads(result.stdout)["projection"]
    gpt = MegatronGPT(resolve_workload(TINY, overrides), 8)
    files = [rank_files(gpt, gpt.coordinates(rank)) for rank in range(8)]
    sizes = {f.name: f.nbytes for rank in files for f in rank}
    first = f"{folder(gpt, gpt.coordinates(0))}/{MODEL_FILE}"
    once, counted = [], []
    for ranks in (range(0, 4), range(4, 8)):
        read = [f"{folder(gpt, gpt.coordinates(rank))}/{MODEL_FILE}" for rank in ranks]
        read += [f.name for rank in ranks for f in files[rank] if f.kind == "optimizer"]
        read += [first] * (4 if detect else 0)
        once.append(sum(sizes[name] for name in set(read)))
        counted.append(sum(sizes[name] for name in read))
    assert projection["load_traffic"]["bytes"] == sum(counted)
    assert projection["load_traffic"]["page_cached"] == {"bytes": sum(once), "busiest_host_bytes": max(once)}
    assert sum(counted) - sum(once) >= 2 * sizes[first]  # two ranks a folder on each host
    assert any("model-parallel folder's model file" in note for note in projection["notes"])
