"""s3torchbenchmarking's configs as sweeps (translation, validation, their result files) and dataflux's
environment variables, without launching anything. The configs are tests/fixtures/peers/ (their shapes)."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import ROOT

from ckpt_bench.backends.lightning.launcher import dataflux_lines, env_notes, options_from_env
from ckpt_bench.cli.launch import launch as launch_command
from ckpt_bench.cli.launch import parse_argv
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.events import EventKind, EventRecorder
from ckpt_bench.report.schema import Report
from ckpt_bench.report.sweep_results import JobRecord
from ckpt_bench.sweep.peers import s3torchbenchmarking as s3tb
from ckpt_bench.sweep.run import load_sweep

PEERS = ROOT / "tests" / "fixtures" / "peers"
# What their run scripts pass (+path=./nvme/), the bucket, and a sweep dir of our choosing.
THEIR_ARGS = ("+path=/tmp/nvme/", "s3.region=us-east-1", "s3.uri=s3://bucket/ckpt/", "hydra.sweep.dir=/tmp/multirun/x")


def sweep_of(name: str, *overrides: str, options: dict | None = None):
    return load_sweep(PEERS / name, parse_argv, options or {}, (*THEIR_ARGS, *overrides))


def test_current_dcp_config_runs_unchanged_as_hydra_would_sweep_it():
    sweep = sweep_of("dcp_ddp_save.yaml")
    assert sweep.name == "dcp_ddp_save" and sweep.root == Path("/tmp/multirun/x")
    assert sweep.lists == {"model": ["vit-base", "T0_3B"], "backend": ["nccl"], "world_size": [8],
                           "thread_count": [8], "checkpoint.storage": ["disk", "s3"]}
    # Hydra's order: the first key varies slowest.
    assert [(j.params["model"], j.params["checkpoint.storage"]) for j in sweep.jobs] == [
        ("vit-base", "disk"), ("vit-base", "s3"), ("T0_3B", "disk"), ("T0_3B", "s3")]
    disk, s3 = sweep.jobs[0].options, sweep.jobs[1].options
    # Their vit-base is ViTModel with its pooler; epochs are fresh processes, one save each; no fsync.
    assert disk["model"] == "vit-base-in21k" and disk["dist_backend"] == "nccl" and disk["nproc_per_node"] == 8
    assert disk["repeat"] == 4 and disk["save_calls"] == 1 and disk["thread_count"] == 8
    assert disk["save_dir"] == "/tmp/nvme/" and disk["sync_files"] is False
    assert s3["save_dir"] == "s3://bucket/ckpt/" and s3["s3_region"] == "us-east-1"
    assert sweep.jobs[0].report_name == "results_vit-base_nccl_8_8_disk.json"
    assert any("aws/dynamodb ignored" in note for note in sweep.notes)


def test_jan_2025_dcp_config_and_command_line_overrides_win():
    sweep = sweep_of("dcp.yaml", "+model=tiny", "+backend=gloo", "epochs=2", "+checkpoint.sync_files=true")
    assert [j.options["nproc_per_node"] for j in sweep.jobs] == [4, 4]  # its world size then
    assert sweep.lists["model"] == ["tiny"] and sweep.jobs[0].options["repeat"] == 2
    assert sweep.jobs[0].options["sync_files"] is True and "sync_files" not in sweep.jobs[1].given
    assert any("ckpt-bench's own model" in note for note in sweep.notes)


@pytest.mark.parametrize("name,models", [("lightning_checkpointing.yaml", ["clip-vit", "T0_3B", "T0pp"]),
                                         ("pytorch_checkpointing.yaml", ["vit-base-in21k", "whisper", "clip-vit",
                                                                         "T0_3B", "T0pp"])])
def test_lightning_and_pytorch_checkpointing_configs(name, models):
    sweep = sweep_of(name)
    options = [job.options for job in sweep.jobs]
    assert [o["model"] for o in options[::2]] == models
    assert {(o["backend"], o["nproc_per_node"], o["save_calls"], o["load_calls"]) for o in options} == {
        ("lightning", 1, 5, 0)}
    assert options[0]["set"] == ("train_steps=0",) and options[0]["repeat"] == 1
    assert any("save_one_in" in note for note in sweep.notes)


@pytest.mark.parametrize(
    "overrides,options,needle",
    [
        (("+model=nope",), {}, "+model='nope' is not an s3torchbenchmarking model: use one of vit-base"),
        (("+colour=red",), {}, "'colour' is not a key of s3torchbenchmarking's dcp config"),
        (("s3.bucket=b",), {}, "s3.'bucket' is not a key"),
        (("+checkpoint.storage=tape",), {}, "checkpoint.storage='tape': use one of disk, s3"),
        (("+world_size=0",), {}, "world_size=0: must be a positive integer"),
        (("+model=[a",), {}, "no viable alternative"),
        (("+backend=mpi",), {}, "backend='mpi': use one of nccl, gloo"),
        ((), {"model": "tiny"}, "--model: set by"),
    ],
)
def test_mistakes_are_one_line(overrides, options, needle):
    with pytest.raises(ConfigError) as error:
        sweep_of("dcp_ddp_save.yaml", *overrides, options=options)
    assert needle in str(error.value) and "\n" not in str(error.value)


def test_unset_values_are_named_with_the_override_that_sets_them():
    with pytest.raises(ConfigError, match=r"job 1 \(.*checkpoint.storage=s3\): s3.uri is not set .* s3.uri=VALUE"):
        load_sweep(PEERS / "dcp.yaml", parse_argv, {}, ("+path=/tmp/nvme/",))


def test_every_job_is_checked_before_any_runs_our_files_too(tmp_path):
    sweep_file = tmp_path / "ours.yaml"
    sweep_file.write_text("backend: dcp\nsweep:\n  model: [tiny, nope]\n")
    with pytest.raises(ConfigError, match=r"job 1 \(model=nope\): --model 'nope' is not known"):
        load_sweep(sweep_file, parse_argv)
    with pytest.raises(ConfigError, match="KEY=VALUE overrides apply to s3torchbenchmarking configs"):
        load_sweep(ROOT / "configs" / "sweeps" / "dcp.yaml", parse_argv, {}, ("+model=tiny",))


def test_positional_overrides_without_a_sweep_file_are_refused(tmp_path):
    result = CliRunner().invoke(launch_command, ["--backend", "dcp", "--runs-dir", str(tmp_path), "+model=tiny"])
    assert result.exit_code == 2 and "'+model=tiny'" in result.output and len(result.output.splitlines()) == 1


def _recorded_run(run_dir: Path, seconds: dict[int, list[float]], bandwidth: float) -> None:
    """A run directory with events where rank R's saves took `seconds[R]` (clocks written directly)."""
    (run_dir / "events").mkdir(parents=True)
    for rank, durations in seconds.items():
        with open(run_dir / "events" / f"rank-{rank}.jsonl", "w") as handle:
            for iteration, duration in enumerate(durations, 1):
                for kind, at in ((EventKind.SAVE_START, 0), (EventKind.SAVE_END, int(duration * 1e9))):
                    handle.write(json.dumps({"kind": kind.value, "rank": rank, "iteration": iteration,
                                             "mono_ns": 10**12 * iteration + at}) + "\n")
    (run_dir / "report.json").write_text(json.dumps({"saves": [{"bandwidth": bandwidth}]}))


def test_their_metrics_keep_their_meaning(tmp_path):
    """throughput_mibs = model MiB / each rank's save duration, per rank per epoch (fresh runs)."""
    reps = [tmp_path / "rep-1", tmp_path / "rep-2"]
    _recorded_run(reps[0], {0: [0.5], 1: [0.25]}, 300.0)
    _recorded_run(reps[1], {0: [1.0], 1: [0.5]}, 200.0)
    report = {"config": {"model_state_bytes": 100 * 2**20}, "run": {"repetitions": [str(r) for r in reps]}}
    metrics = s3tb.job_metrics(Report.from_json(report), s3tb.DCP)
    assert metrics["corrected_save_durations_s"] == [0.5, 0.25, 1.0, 0.5]
    assert metrics["throughput_mibs"] == [200.0, 400.0, 100.0, 200.0]
    assert metrics["processing_durations_s"] == [0.5, 1.0]
    assert metrics["model_mib"] == 100 and metrics["written_bytes_bandwidth_mibs"] == [300.0, 200.0]
    lightning = s3tb.job_metrics(Report.from_json({**report, "run": {"dir": str(reps[1])}}), s3tb.LIGHTNING)
    assert lightning["save_times_s"] == [1.0] and lightning["throughput_mibs"] == [100.0]


def test_result_files_are_in_their_layout(tmp_path):
    sweep = sweep_of("dcp_ddp_save.yaml", "+model=tiny", "+backend=gloo", "+world_size=1",
                     f"hydra.sweep.dir={tmp_path}")
    run_dir = tmp_path / "0" / "run"
    _recorded_run(run_dir, {0: [0.5]}, 10.0)
    report = {"config": {"model_state_bytes": 2**20}, "run": {"dir": str(run_dir)}}
    sweep.outputs.job_done(tmp_path / "0", JobRecord(0, sweep.jobs[0].params, report_json=report))
    sweep.outputs.sweep_done(tmp_path)
    job = json.loads((tmp_path / "0" / "job_results.json").read_text())
    assert set(job) == {"config", "metrics"} and job["config"]["checkpoint"] == {"storage": "disk"}
    assert job["config"]["model"] == "tiny" and job["metrics"]["throughput_mibs"] == [2.0]
    run = json.loads((tmp_path / "run_results.json").read_text())
    assert {"s3torchconnector_version", "timestamp_utc", "scenario", "disambiguator", "run_elapsed_time_s",
            "versions", "ec2_metadata", "job_results"} == set(run)
    assert run["scenario"] == "dcp_ddp_save" and run["job_results"] == [job]
    assert set(run["versions"]) == {"python", "pytorch", "hydra"} and (tmp_path / "multirun.yaml").is_file()


def test_dataflux_variables_as_documented():
    env = {"CKPT_DIR_PATH": "/data/ckpt", "CKPT_RESTORE_PATH": "/data/ckpt/checkpoints", "NUM_DEVICES": "auto",
           "ACCELERATOR": "cpu", "USE_ASYNC": "1", "MAX_STEPS": "3", "MIN_EPOCHS": "4", "MAX_EPOCHS": "5",
           "SAVE_ONLY_LATEST": "1", "PROJECT": "my-project"}
    options = options_from_env({"save_dir": None, "set": ()}, env)
    # dataflux saves to ${CKPT_DIR_PATH}/checkpoints and restores from there: so does the run.
    assert options["save_dir"] == "/data/ckpt/checkpoints"
    assert options["nproc_per_node"] == 1 and options["env_options"]["NUM_DEVICES"] == "auto"  # CPU: one process
    assert options["async_save"] is True and options["set"] == ("train_steps=3",)
    notes = env_notes(options["env_options"])
    assert [note.split("=")[0] for note in notes] == ["PROJECT", "MIN_EPOCHS", "MAX_EPOCHS", "SAVE_ONLY_LATEST"]
    assert all("has no meaning here" in note for note in notes)
    # A --set train_steps on the command line wins over MAX_STEPS.
    assert options_from_env({"set": ("train_steps=1",)}, {"MAX_STEPS": "9"}, {"set"})["set"] == ("train_steps=1",)


def test_dataflux_summary_lines(tmp_path):
    class Run:
        events_dir = tmp_path / "events"

    with EventRecorder(Run.events_dir, 0) as recorder:
        for iteration in (1, 2):
            recorder.record(EventKind.SAVE_START, iteration)
            recorder.record(EventKind.SAVE_BLOCK_END, iteration)
        recorder.record(EventKind.LOAD_START, 2)
        recorder.record(EventKind.LOAD_END, 2)
    lines = dataflux_lines(Run)
    assert lines[0].startswith("Average time to save one checkpoint: ") and lines[0].endswith(" seconds")
    assert lines[1].startswith("Average time to load one checkpoint: ") and lines[2].startswith("All save times: [")
