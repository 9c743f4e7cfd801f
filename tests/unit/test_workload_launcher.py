"""The workload backend's launcher side: `--plan` at MLPerf's sizes, and every refusal before anything
starts (one line, exit 2). Nothing here allocates a tensor or starts a rank."""

from __future__ import annotations

import json
import time

import pytest
from helpers import ROOT, assert_one_line_error, launch

from ckpt_bench.benchmark import registry
from ckpt_bench.cli.launch import parse_argv
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.launcher import resources
from ckpt_bench.layout.catalog import CATALOG
from ckpt_bench.layout.dlio_layout import layout

TINY = ROOT / "tests" / "fixtures" / "workloads" / "tiny_test.yaml"
GIB = 1 << 30


@pytest.mark.parametrize(("name", "ranks", "gib"), [("llama3-8b", 8, 104.70), ("llama3-70b", 64, 911.21),
                                                     ("llama3-405b", 512, 5292.25), ("llama3-1t", 1024, 15426.59)])
def test_plan_gives_dlio_bytes_for_every_rank_of_the_mlperf_shapes(name, ranks, gib):
    started = time.monotonic()
    result = launch("--workload", name, "--plan", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 10  # a subprocess, imports included: well within "a few seconds"
    plan = json.loads(result.stdout)
    assert plan["world_size"] == ranks and plan["subset"] is None and len(plan["ranks"]) == ranks
    assert round(plan["total_bytes"] / GIB, 2) == gib
    expected = layout(CATALOG[name])
    assert [r["bytes"] for r in plan["ranks"]] == [share.bytes for share in expected.ranks]
    assert plan["ranks"][0]["files"] == [f.name for f in expected.ranks[0].files]
    assert plan["host_memory_needed_bytes"] > 2 * max(r["bytes"] for r in plan["ranks"][:2])


def test_plan_of_a_subset_is_the_first_ranks_of_the_job():
    plan = json.loads(launch("--workload", "llama3-70b", "--subset", "--nproc-per-node", "2", "--plan",
                             "--format", "json").stdout)
    full = layout(CATALOG["llama3-70b"])
    assert plan["subset"] == 2 and plan["world_size"] == 64 and plan["total_bytes"] == full.total_bytes
    assert [r["bytes"] for r in plan["ranks"]] == [s.bytes for s in full.ranks[:2]]
    assert plan["run_bytes"] == sum(s.bytes for s in full.ranks[:2])
    # The spread of the ranks listed beside the job's (issue 38: min/median were the job's alone).
    assert plan["rank_bytes"]["max"] == max(s.bytes for s in full.ranks)
    assert plan["subset_rank_bytes"] == {"min": min(r["bytes"] for r in plan["ranks"]),
                                         "median": min(r["bytes"] for r in plan["ranks"]),
                                         "max": max(r["bytes"] for r in plan["ranks"]), "largest_rank": 0}
    table = launch("--workload", "llama3-70b", "--subset", "--nproc-per-node", "2", "--plan", "--format", "table")
    assert "bytes a rank of the subset" in table.stdout and "per rank that runs (2 of the job's 64)" in table.stdout


def test_busiest_hosts_are_whole_hosts_the_most_bytes_first():
    from ckpt_bench.backends.workload.launcher import busiest_hosts

    # 4 hosts of 2 ranks: host 2 writes 9, host 1 and host 3 write 5 (host 1 first among equals), host 0 writes 1
    assert busiest_hosts([1, 0, 2, 3, 4, 5, 1, 4], 4, 2) == [4, 5, 2, 3]
    with pytest.raises(ConfigError, match="multiples of it"):
        busiest_hosts([1] * 8, 3, 2)


def test_plan_of_a_subset_of_the_busiest_host_runs_that_hosts_ranks():
    plan = json.loads(launch("--workload", "llama3-405b", "--subset", "--subset-hosts", "busiest",
                             "--nproc-per-node", "8", "--plan", "--format", "json").stdout)
    full = layout(CATALOG["llama3-405b"]).job_rank_bytes
    hosts = [sum(full[h * 8:(h + 1) * 8]) for h in range(len(full) // 8)]
    busiest = hosts.index(max(hosts))
    assert [r["rank"] for r in plan["ranks"]] == list(range(busiest * 8, busiest * 8 + 8))
    assert plan["run_bytes"] == max(hosts)


def test_plan_prints_a_table_on_request():
    result = launch("--workload", "llama3-1t", "--plan", "--format", "table")
    assert result.returncode == 0 and "plan (nothing was run)" in result.stdout and "1,024" in result.stdout
    assert "bytes a rank of the job" in result.stdout and "largest rank" in result.stdout  # not only the JSON's


@pytest.mark.parametrize(("args", "needle"), [
    (["--workload", "nope"], "'nope' is neither a workload name"),
    (["--workload", "lama3-8b"], "did you mean llama3-8b"),
    (["--workload", "llama3-8b"], "add --subset to run its first 2"),
    (["--workload", "llama3-8b", "--subset", "--nproc-per-node", "9"], "exceed workload 'llama3-8b'"),
    (["--workload", "llama3-8b", "--subset", "--async-save"], "the torch-save engine has no asynchronous save"),
    (["--workload", "llama3-8b", "--nproc-per-node", "8", "--subset-hosts", "busiest"],
     "--subset-hosts busiest: picks the hosts of a --subset run"),
    (["--workload", "llama3-8b", "--subset", "--subset-hosts", "busiest", "--nproc-per-node", "3"],
     "multiples of it"),
    (["--workload", "llama3-8b", "--subset", "--thread-count", "2"], "--thread-count: the torch-save engine"),
    (["--workload", str(TINY), "--tp", "2"],
     "--tp is not read by the workload backend; here: --set tensor_model_parallel_size=2"),
    (["--workload", str(TINY), "--load-calls", "5"], "only 2 are written"),
    (["--workload", str(TINY), "--engine", "torch_dist", "--save-dir", "s3://bucket/prefix", "--s3-region", "x"],
     "writes to disk only, not s3"),
    (["--workload", str(TINY), "--save-calls", "100000000"], "save fewer or smaller checkpoints"),
    (["--backend", "workload"], "needs --workload NAME|FILE"),
    # A DLIO workload given where an experiment is read points to the option that reads it (issue 38).
    (["--config", str(TINY)], "a DLIO workload YAML (it has workflow: and checkpoint:), not a Primus experiment: run "
                              f"it with --workload {TINY}"),
])
def test_mistakes_are_one_line_before_anything_starts(tmp_path, args, needle):
    result = launch(*args, runs_dir=tmp_path / "runs")
    assert_one_line_error(result, needle)
    assert not (tmp_path / "runs").exists()  # nothing was created


def test_a_dlio_key_we_do_not_read_is_named(tmp_path):
    workload = tmp_path / "w.yaml"
    workload.write_text(TINY.read_text().replace("  num_layers: 2\n", "  num_layers: 2\n  num_layerz: 3\n"))
    assert_one_line_error(launch("--workload", workload, "--plan"), "model.num_layerz")


def test_a_host_without_the_memory_for_its_ranks_is_refused(monkeypatch):
    values, given = parse_argv(["--workload", "llama3-70b", "--subset", "--nproc-per-node", "2"])
    launch_config, _ = registry.build_launch(values, given, {})
    monkeypatch.setattr(resources, "available_memory", lambda: 16 * GIB)
    with pytest.raises(resources.ConfigError, match=r"need 29\.\d GiB on this host but 16\.0 GiB is available"):
        registry.runner_for(launch_config).plan(launch_config)


def test_workload_chooses_its_backend_and_a_megatron_experiment_is_a_workload():
    values, given = parse_argv(["--workload", str(ROOT / "configs" / "llama2_7B.yaml"), "--plan",
                                "--nproc-per-node", "8"])
    launch_config, _ = registry.build_launch(values, given, {})
    assert launch_config.runner == "workload"
    plan = registry.runner_for(launch_config).preview(launch_config)
    # Llama 2 7B at TP 2 (the experiment's) with the distributed optimizer: DLIO's ZeRO-1 on 4 replicas.
    assert plan["world_size"] == 8 and len(plan["ranks"]) == 8
    assert round(plan["total_bytes"] / GIB, 1) == round(6_738_415_616 * (2 + 12) / GIB, 1)


def test_a_sweep_of_engines_shows_the_storage_peak_beside_each_job():
    """Engines side by side (configs/sweeps/workload_engines.yaml): the storage's own peak and how close
    each engine came, in the terminal and in sweep_report.html."""
    from ckpt_bench.present import rows
    from ckpt_bench.present.html import render_sweep
    from ckpt_bench.report.sweep_results import SweepResults

    def job(index, engine, write, fraction):
        report = {"storage_baseline": {"write_bandwidth": write, "read_bandwidth": 900.0},
                  "save_fraction_of_peak": fraction, "load_fraction_of_peak": 0.5, "saves": []}
        return {"index": index, "status": "ok", "params": {"engine": engine}, "report": report}

    def sweep(jobs: list[dict]) -> SweepResults:
        return SweepResults.from_json({"name": "engines", "sweep_file": None, "dir": "/nowhere", "started": "now",
                                       "updated": "now", "sweep": {"sweep": {"engine": ["torch-save", "dcp"]}},
                                       "environment": {}, "summary": {}, "jobs": jobs})

    results = sweep([job(0, "torch-save", 800.0, 0.61), job(1, "dcp", 820.0, 0.4),
                     {"index": 2, "status": "failed", "params": {"engine": "x"}}])
    columns, peak_rows = rows.sweep_peak_table(results)
    assert columns == ["job", "engine", "peak write MiB/s", "steady save of peak", "peak cold read MiB/s",
                       "load of peak"]
    assert peak_rows == [["0", "torch-save", "800.0", "61.0 %", "900.0", "50.0 %"],
                         ["1", "dcp", "820.0", "40.0 %", "900.0", "50.0 %"]]
    assert 'id="peak-table"' in render_sweep(results)
    assert rows.sweep_peak_table(sweep([{"index": 0, "params": {}, "report": {}}])) is None


def test_a_workload_report_shows_mlperf_figures_in_the_summary_and_the_html():
    import io

    from ckpt_bench.present import summary
    from ckpt_bench.present.html import render_report

    report = {"saves": [], "notes": [], "mlperf": {
        "dlio": {"checkpoint_size_GB": 14.24, "save_checkpoint_duration_mean_seconds": 15.3,
                 "save_checkpoint_duration_stdev_seconds": 8.2, "save_checkpoint_io_mean_GB_per_second": 1.3},
        "mlpstorage": {"mean_of_max_save_duration": 15.4, "calculated_mean_save_throughput_from_strict_times": 1.2}}}
    out = io.StringIO()
    summary.print_report(report, out)
    text = " ".join(out.getvalue().split())
    assert "MLPerf Storage's figures" in text
    # In MiB as every other figure of the summary, DLIO's own number (its GB: 2**30 bytes) beside it.
    assert "checkpoint size 14,582 MiB = DLIO's 14.240 GB (DLIO's GB is 2**30 bytes, a GiB)" in text
    assert "save, DLIO (rank 0) 15.300 s mean (population stdev 8.200), 1,331.2 MiB/s = DLIO's 1.300 GB/s" in text
    assert ("save, mlpstorage (slowest rank) 15.400 s mean of max, 1,228.8 MiB/s = DLIO's 1.200 GB/s from strict "
            "times") in text
    assert "load, DLIO" not in text  # no load measured
    assert 'id="mlperf-table"' in render_report(report)


@pytest.mark.parametrize(("argv", "noted"), [(["--workload", "llama3-8b"], True),
                                            (["--workload", "llama3-8b", "--engine", "torch_dist"], False),
                                            (["--workload", str(ROOT / "configs" / "llama2_7B.yaml"),
                                              "--engine", "dcp"], False)])
def test_the_dlio_fsync_note_is_for_dlio_workloads_that_can_write_without_it(argv, noted):
    """DLIO asks for fsync and never calls it: said where --no-sync-files reproduces DLIO, not of an experiment's
    state or an engine that always fsyncs."""
    from ckpt_bench.backends.workload.launcher import _notes, resolve

    values, given = parse_argv([*argv, "--nproc-per-node", "8", "--plan"])
    launch_config, _ = registry.build_launch(values, given, {})
    run = resolve(launch_config.options, launch_config)
    notes = _notes(launch_config.options, run, sync_files=True, storage_kind="disk")
    assert any("DLIO asks for it" in note for note in notes) == noted


def test_an_experiment_that_only_extends_one_is_an_experiment(tmp_path):
    """Primus's LoRA SFT examples are `extends: [the SFT experiment]` plus overrides, no `modules:` of their own:
    Primus reads them as experiments, so do we (they were read as DLIO workloads and refused)."""
    child = tmp_path / "child.yaml"
    child.write_text(f"extends:\n  - {ROOT / 'ckpt_bench' / 'configs' / 'tiny_gpt.yaml'}\nlora:\n  enabled: true\n")
    plan = json.loads(launch("--workload", str(child), "--plan", "--format", "json").stdout)
    parent = json.loads(launch("--workload", str(ROOT / "ckpt_bench" / "configs" / "tiny_gpt.yaml"), "--plan",
                               "--format", "json").stdout)
    assert plan["total_bytes"] == parent["total_bytes"] > 0


def test_a_yaml_that_is_neither_a_workload_nor_an_experiment_says_so(tmp_path):
    """Primus's MI355X/lfm2_8B_A1B-FP8-te-precision.yaml (a Transformer Engine precision recipe) is not a workload."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("configs:\n  bf16: {}\nmatchers: {}\n")
    result = launch("--workload", str(recipe), "--plan")
    assert_one_line_error(result, "neither a DLIO workload (none of its sections: checkpoint, data_reader")
    assert result.stderr.rstrip().endswith("its top-level keys: configs, matchers")
