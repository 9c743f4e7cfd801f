"""The Lightning backend end to end: real torchrun, 2 ranks on gloo, a tiny demo Transformer.

Each run is one `ckpt_launch.py --backend lightning` (save pass + load pass); mistakes are checked
in-process with click's runner (they are refused before anything is launched).
"""

import importlib.util
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import DATAFLUX_VARIABLES, launch

from ckpt_bench.cli.launch import launch as launch_command
from ckpt_bench.core.events import EventKind, event_files, read_event_files

# ~34k parameters: the runs measure the plumbing, not the disk.
TINY = ["--num-layers", "1", "--set", "vocab_size=256", "--set", "ninp=32", "--set", "nhid=32",
        "--set", "block_size=8", "--set", "train_steps=1"]


def run_lightning(tmp_path, *args, env=None) -> dict:
    result = launch("--backend", "lightning", *args, runs_dir=tmp_path / "runs", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def rank_events(report: dict) -> list:
    return list(read_event_files(event_files(Path(report["run"]["dir"]) / "events")))


def check_common(report: dict, saves: int, loads: int) -> None:
    assert report["run"]["status"] == "ok"
    assert report["verified"] is True and report["verification"]["ranks_checked"] == 2
    assert report["num_saved"] == saves and [s["iteration"] for s in report["saves"]] == list(range(1, saves + 1))
    assert report["world_size"] == 2 and report["config"]["backend"] == "lightning"
    assert report["iter_folder_size"] > 0 and report["saves"][-1]["bytes_source"] == "disk"
    assert report["load"]["iteration"] == saves  # every load call reads the last checkpoint
    assert len(report["loads"] or [report["load"]]) == loads


def test_fsdp2_sync_local_is_sharded(tmp_path):
    save_dir = tmp_path / "ckpts"
    report = run_lightning(tmp_path, "--strategy", "fsdp", "--save-calls", "2", "--load-calls", "1",
                           "--save-dir", str(save_dir), "--keep-checkpoints", *TINY)
    check_common(report, saves=2, loads=1)
    assert report["ckpt_format"] == "lightning_dcp"
    assert report["config"]["strategy_class"].startswith("ModelParallelStrategy")
    (run_ckpts,) = save_dir.iterdir()
    shards = sorted(p.name for p in (run_ckpts / "iter_0000002").glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"]  # each rank wrote its own shard


def test_env_var_mode_ddp_async_through_fsspec(tmp_path):
    """dataflux's variables stand in for flags, as its README sets them; a flag given wins over its variable.
    Its folder is a file:// URL, which takes the path of gs:// and other fsspec URLs: Lightning's
    TorchCheckpointIO writes through fsspec, ckpt_bench.storage.FsspecStorage creates, measures and removes it."""
    save_dir = tmp_path / "from-env"
    save_dir.mkdir()
    url = f"file://{save_dir}"
    env = {"CKPT_DIR_PATH": url, "CKPT_RESTORE_PATH": f"{url}/checkpoints", "NUM_LAYERS": "1",
           "NUM_SAVE_CALLS": "5", "NUM_LOAD_CALLS": "1", "NUM_DEVICES": "2", "NUM_NODES": "1", "ACCELERATOR": "cpu",
           "PROJECT": "my-gcp-project", "MIN_EPOCHS": "", "MAX_EPOCHS": "", "MAX_STEPS": "", "USE_ASYNC": "",
           "SAVE_ONLY_LATEST": ""}
    report = run_lightning(tmp_path, "--async-save", "--save-calls", "2", "--load-calls", "2", *TINY[2:], env=env)
    check_common(report, saves=2, loads=2)  # --save-calls 2 beat NUM_SAVE_CALLS=5, --load-calls 2 NUM_LOAD_CALLS=1
    assert report["config"]["env_options"] == {"CKPT_DIR_PATH": url, "NUM_LAYERS": 1,
                                               "NUM_DEVICES": 2, "NUM_NODES": 1,
                                               "ACCELERATOR": "cpu", "CKPT_RESTORE_PATH": f"{url}/checkpoints",
                                               "PROJECT": "my-gcp-project"}
    assert report["ckpt_format"] == "lightning" and report["config"]["strategy_class"] == "DDPStrategy"
    assert report["config"]["storage"] == "fsspec" and report["config"]["fsspec_protocol"] == "file"
    # dataflux saves to ${CKPT_DIR_PATH}/checkpoints and restores from there: so did this run.
    assert report["save"].startswith(f"{url}/checkpoints/")
    assert not any((save_dir / "checkpoints").iterdir())  # created there, removed
    assert any(note.startswith("PROJECT=my-gcp-project is recorded but has no meaning") for note in report["notes"])
    # dataflux's closing lines, in the notes the summary prints.
    lines = [note for note in report["notes"] if note.startswith(("Average time to", "All save times: ["))]
    assert [line.split(":")[0] for line in lines] == ["Average time to save one checkpoint",
                                                      "Average time to load one checkpoint", "All save times"]
    assert report["async_save"] is True and report["accurate"] is True
    # Honest async: rank 0's SAVE_END comes from the writer thread, when the file was written.
    writer_ends = [e for e in rank_events(report) if e.kind == EventKind.SAVE_END and e.rank == 0]
    assert [e.extra.get("thread") for e in writer_ends] == ["writer", "writer"]
    for save in report["saves"]:
        assert save["total_time"] >= save["total_time_per_rank"]["min"] and save["block_time"] > 0


def test_s3_async_during_fit(tmp_path, s3_endpoint):
    """Async saves to S3 every 2 steps during fit: training time with and without the saves. (Synchronous
    Lightning saves to S3 run in tests/e2e/test_peers_e2e.py, s3torchbenchmarking's Lightning config.)"""
    bucket = s3_endpoint.create_bucket()
    s3 = ["--save-dir", f"s3://{bucket}/bench", *s3_endpoint.options()]
    report = run_lightning(tmp_path, "--async-save", "--steps-per-save", "2", "--save-calls", "2",
                           "--load-calls", "1", *s3, *TINY)
    check_common(report, saves=2, loads=1)
    assert report["config"]["storage"] == "s3" and report["save"].startswith(f"s3://{bucket}/bench/")
    training = report["training"]
    assert training["train_steps"] == 4 and training["saves"] == 2 and training["async_save"] is True
    assert training["save_impact_time"] == pytest.approx(
        training["fit_time_with_saves"] - training["fit_time_without_saves"], abs=0.002)
    assert any(note.startswith("training-time impact of 2 async save(s)") for note in report["notes"])
    assert s3_endpoint.object_keys(bucket) == []  # the run removed what it wrote


@pytest.mark.parametrize(
    "args,env,needle",
    [
        (["--strategy", "deepspeed"], {}, "--strategy 'deepspeed' is not supported: use one of ddp, fsdp"),
        (["--strategy", "fsdp", "--async-save"], {}, "never calls the CheckpointIO"),
        (["--strategy", "fsdp", "--save-dir", "s3://b/p", "--s3-region", "us-east-1"], {}, "local path only"),
        ([], {"NUM_SAVE_CALLS": "0", "NUM_LOAD_CALLS": "2"}, "the 2 load call(s) would have nothing to load"),
        ([], {"NUM_LAYERS": "many"}, "NUM_LAYERS='many': expected an integer"),
        (["--save-dir", "/tmp/a"], {"CKPT_RESTORE_PATH": "/tmp/b"}, "CKPT_RESTORE_PATH=/tmp/b differs"),
        (["--accelerator", "tpu"], {}, "accelerator 'tpu' is not supported"),
        (["--set", "hidden=3"], {}, "--set hidden: not a Lightning setting"),
    ],
)
def test_mistakes_are_one_line_exit_2(tmp_path, args, env, needle):
    runs = tmp_path / "runs"
    clean = {name: None for name in DATAFLUX_VARIABLES}
    result = CliRunner().invoke(launch_command, ["--backend", "lightning", "--runs-dir", str(runs), *args],
                                env={**clean, **env})
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.output
    assert not runs.exists()


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="gcsfs is installed here")
def test_fsspec_url_without_its_package_names_it(tmp_path):
    result = CliRunner().invoke(launch_command, ["--backend", "lightning", "--runs-dir", str(tmp_path / "runs"),
                                                 "--save-dir", "gs://bucket/prefix"])
    assert result.exit_code == 2 and "gcsfs" in result.output and "gs://" in result.output, result.output


def test_dataflux_variables_fill_only_what_no_flag_set():
    from ckpt_bench.backends.lightning.launcher import options_from_env

    env = {"NUM_LAYERS": "8", "NUM_SAVE_CALLS": "4", "STEPS_PER_SAVE": "10", "CKPT_RESTORE_PATH": "s3://b/ckpt/",
           "ACCELERATOR": "cpu", "NUM_LOAD_CALLS": "0"}
    options = options_from_env({"num_layers": 2, "save_calls": None, "save_dir": "s3://b/ckpt"}, env)
    assert options["num_layers"] == 2 and options["save_calls"] == 4 and options["steps_per_save"] == 10
    assert options["load_calls"] == 0 and options["accelerator"] == "cpu" and options["save_dir"] == "s3://b/ckpt"
    assert "NUM_LAYERS" not in options["env_options"] and options["env_options"]["CKPT_RESTORE_PATH"] == "s3://b/ckpt/"
    # Alone, the restore path is where the run saves (and loads back from).
    assert options_from_env({"save_dir": None}, {"CKPT_RESTORE_PATH": "/data/ckpt"})["save_dir"] == "/data/ckpt"
