"""`ckpt_launch.py` end to end, as a user runs it: real torchrun, real megatron-core checkpoints."""

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from helpers import launch as launch_cli

from ckpt_bench.core import megatron_release
from ckpt_bench.core.events import EventKind, event_files, read_event_files
from ckpt_bench.core.experiment import DEFAULT_EXPERIMENT
from ckpt_bench.model.checkpointing import TORCH_DIST_COORDINATOR_FILES

PRIMUS_KEYS = {
    "world_size": int, "data_parallel_size": int, "ckpt_format": str, "ckpt_fully_parallel_save": bool,
    "ckpt_fully_parallel_load": bool, "async_save": bool, "save": str, "save_interval": int,
    "optimizer": str, "use_distributed_optimizer": bool, "params_dtype": str, "main_params_dtype": str,
    "exp_avg_dtype": str, "exp_avg_sq_dtype": str, "save_block_time": float, "save_total_time": float,
    "accurate": bool, "num_saved": int, "load_time": float, "iter_folder_size": int,
    "save_bandwidth_in_mbps": float, "load_bandwidth_in_mbps": float,
}


def launch(tmp_path, *args, timeout=420, env=None):
    runs = tmp_path / "runs"
    result = launch_cli(*args, runs_dir=runs, timeout=timeout, cwd=tmp_path, env=env)
    run_dirs = sorted(runs.iterdir()) if runs.is_dir() else []
    return result, run_dirs


@pytest.fixture
def scratch():
    """A temporary folder for a run's processes (their TMPDIR), to see what they leave in it: a short path under the
    system's, as a multiprocessing socket's path must fit in 108 bytes (a pytest folder's does not)."""
    folder = Path(tempfile.mkdtemp(prefix="ckpt-bench-tmp-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _left_in(scratch: Path) -> list[str]:
    """What the run's processes left in their temporary folder, but torch's own cache (torchinductor_USER), which
    is meant to outlive a run."""
    return sorted(path.name for path in scratch.iterdir() if not path.name.startswith("torchinductor_"))


def test_default_job(tmp_path, scratch):
    """The embedded default: tiny GPT, 2 ranks, torch_dist saves at 2/4/6, a cold verified load; nothing of the
    run's left in the temporary folder (megatron-core's multiprocessing Manager left a /tmp/pymp-* folder a rank)."""
    output = tmp_path / "report.json"
    result, run_dirs = launch(tmp_path, "--output", str(output), env={"TMPDIR": str(scratch)})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert json.loads(output.read_text()) == report
    for key, kind in PRIMUS_KEYS.items():
        assert isinstance(report[key], kind), (key, report[key])
    assert report["world_size"] == 2 and report["data_parallel_size"] == 2
    assert report["ckpt_format"] == "torch_dist" and report["async_save"] is False
    assert [s["iteration"] for s in report["saves"]] == [2, 4, 6]
    assert report["num_saved"] == 3 and report["accurate"] is True
    assert all(s["complete"] and s["ranks"] == 2 and s["bytes_source"] == "disk" for s in report["saves"])
    assert report["iter_folder_size"] > 10 * 2**20
    assert report["save_block_time"] > 0 and report["save_total_time"] >= report["save_block_time"]
    assert report["load"]["iteration"] == 6 and report["load"]["cache"] == "cold"
    assert report["verified"] is True and report["verification"]["ranks_checked"] == 2
    assert report["stats"]["first_save"]["iteration"] == 2
    assert report["stats"]["excluding_first"]["total_time"]["n"] == 2
    assert report["time_source"] == "recorded" and report["units"]["bandwidth"].startswith("MiB/s")
    assert report["environment"]["torch"] and report["environment"]["megatron-core"]
    assert report["run"]["status"] == "ok"
    # The run directory holds everything; the checkpoints it created are gone.
    (run_dir,) = run_dirs
    for name in ("resolved.yaml", "commands.sh", "worker.json", "run.json", "report.json"):
        assert (run_dir / name).is_file(), name
    assert sorted(p.name for p in (run_dir / "events").iterdir()) == ["rank-0.jsonl", "rank-1.jsonl"]
    assert not (run_dir / "checkpoints").exists()
    assert "torch.distributed.run" in (run_dir / "commands.sh").read_text()
    assert "[save]" in result.stderr and "[load]" in result.stderr  # progress was shown
    assert _left_in(scratch) == []


def test_async_persistent_distributed_optimizer_kept_in_save_dir(tmp_path, scratch):
    """Async saves through megatron-core's persistent writer with the DistributedOptimizer, loaded fully parallel,
    kept in a --save-dir that holds someone else's file, with --training-impact; nothing of the run's left in the
    temporary folder."""
    save_dir = tmp_path / "fast-storage"
    save_dir.mkdir()
    (save_dir / "someone-elses-file").write_text("never touched")
    result, (run_dir,) = launch(
        tmp_path, "--async-save", "--use-persistent-ckpt-worker", "--use-distributed-optimizer",
        "--fully-parallel-load", "--train-iters", "4", "--save-interval", "2",
        "--save-dir", str(save_dir), "--keep-checkpoints", "--yaml-config-path", str(DEFAULT_EXPERIMENT),
        "--training-impact", env={"TMPDIR": str(scratch)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert _left_in(scratch) == []  # the persistent writer's and the Manager's folders too
    report = json.loads(result.stdout)
    assert report["async_save"] is True and report["data_parallel_size"] == 2
    assert report["use_distributed_optimizer"] is True and report["verified"] is True
    # megatron-core 0.17+: the async strategy Megatron-LM would take, or a note saying why it is megatron-core's own.
    strategy, why = megatron_release.async_strategy(None, True)
    assert json.loads((run_dir / "worker.json").read_text())["megatron"]["arguments"].get("async_strategy") == strategy
    assert (why in report["notes"]) if why else not any("async strategy" in note for note in report["notes"])
    assert [s["iteration"] for s in report["saves"]] == [2, 4]
    log = (run_dir / "logs" / "save" / "console.log").read_text()
    assert "scheduled an async checkpoint save at iteration       2" in log
    # The tracker names a checkpoint only once it is finalized, and the last one is waited for.
    assert log.index("scheduled an async checkpoint save at iteration       4") < log.index(
        "successfully saved checkpoint from iteration       4")
    for event in read_event_files(event_files(run_dir / "events")):
        if event.kind == EventKind.SAVE_WRITTEN:  # recorded by megatron-core's writer process as it finished
            assert event.extra.get("recorded_by") == "async writer" and event.bytes > 0
    assert all(s["total_time"] >= s["block_time"] for s in report["saves"])
    # Complete once finalized on the training process: the writer's write | fsync (| collect), the wait for the
    # training loop's next check, the finalize; every rank's phases sum to its total.
    for save in report["saves"]:
        for rank in save["phases_per_rank"]:
            names = [phase["phase"] for phase in rank["phases"] if not phase["blocking"]]
            names = names[1:] if names[0] == "queued" else names  # the writer picked it up a moment later
            assert names[:2] == ["write", "fsync"] and names[-1] == "finalize", names
            assert set(names[2:-1]) <= {"collect", "awaiting_finalize"}, names
            # Each rank's phases run end to end (rounded to the microsecond).
            phases = rank["phases"]
            assert all(abs(before["start"] + before["seconds"] - after["start"]) < 2e-6
                       for before, after in zip(phases, phases[1:], strict=False))
        # The phases shown are the rank the others waited for: its total lies among the ranks' totals (they
        # leave the finalize's collective together, having started a few ms apart; the spread is in ms).
        spread = save["total_time_per_rank"]
        assert spread["min"] - 1e-3 <= sum(phase["seconds"] for phase in save["phases"]) <= spread["max"] + 1e-3
    checkpoints = save_dir / run_dir.name
    assert report["save"] == str(checkpoints)
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    assert (checkpoints / "iter_0000004").is_dir() and (checkpoints / "iter_0000002").is_dir()
    assert (save_dir / "someone-elses-file").read_text() == "never touched"
    # --training-impact: the same iterations without and with saves; the saves' training-visible cost.
    training = report["training"]
    assert (training["iterations"], training["saves"], training["async_save"]) == (4, 2, True)
    assert training["save_impact_time"] == pytest.approx(
        training["time_with_saves"] - training["time_without_saves"], abs=0.001)
    assert [s["iteration"] for s in training["around_saves"]] == [2, 4]


def test_failing_pass_names_the_rank(tmp_path):
    # Positions beyond max_position_embeddings: valid config, but the forward pass fails on every rank.
    result, (run_dir,) = launch(tmp_path, "--set", "seq_length=256", "--train-iters", "2")
    assert result.returncode == 1
    assert "rank" in result.stderr and "failed" in result.stderr
    report = json.loads(result.stdout)
    assert report["run"]["status"] == "failed"
    (save_pass,) = report["run"]["passes"]
    assert save_pass["name"] == "save" and not save_pass["ok"] and save_pass["failed_ranks"]
    assert json.loads((run_dir / "report.json").read_text())["run"]["status"] == "failed"


def test_tp2_sync_torch_dist_then_load_on_another_layout(tmp_path):
    """A TP2 synchronous torch_dist save (Megatron-LM's log lines, megatron-core's files, each save complete when
    the call returns), loaded on TP1 by one rank: resharded and checked per logical tensor."""
    result, (run_dir,) = launch(tmp_path, "--tp", "2", "--train-iters", "2", "--save-interval", "2",
                                "--load-tp", "1", "--load-nproc-per-node", "1", "--keep-checkpoints")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["config"]["tensor_model_parallel_size"] == 2 and report["world_size"] == 2
    assert report["config"]["load_layout"] == {"tp": 1, "pp": 1, "ep": 1, "cp": 1, "dp": 1, "world_size": 1}
    assert report["verified"] is True and report["verification"]["tensors_checked"] > 0
    assert (run_dir / "integrity" / "iter_0000002" / "global.json").is_file()
    assert report["load"]["complete"] and report["load_time"] > 0
    save = report["save"]
    log = (run_dir / "logs" / "save" / "console.log").read_text()
    assert "------------------------ arguments ------------------------" in log
    assert " iteration        2/       2 |" in log
    assert f"saving checkpoint at iteration       2 to {save} in torch_dist format" in log
    assert f"successfully saved checkpoint from iteration       2 to {save} [ t 1/2, p 1/1 ]" in log
    folder = Path(save) / "iter_0000002"
    assert {p.name for p in folder.iterdir()} >= set(TORCH_DIST_COORDINATOR_FILES)  # common.pt up to 0.16.1
    assert {p.name.split("_")[2] for p in folder.glob("__*_*.distcp")} == {"0", "1"}  # both TP ranks wrote
    (saved,) = report["saves"]
    assert saved["complete"] and saved["ranks"] == 2 and saved["block_time"] == saved["total_time"]  # synchronous
