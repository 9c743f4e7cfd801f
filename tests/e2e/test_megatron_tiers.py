"""Megatron-LM's other checkpoint tiers in the built-in worker, end to end on 2 CPU ranks: non-persistent local
checkpoints through nvidia-resiliency-ext with replication, restored after rank 0 lost its copy; non-persistent
global ones told apart from the persistent ones, the restart Megatron-LM would make read on another
tensor-parallel size with --dist-ckpt-strictness raise_all; --save-retain-interval's
deletions timed."""

import subprocess
import sys

import pytest
from helpers import ROOT, launch_ok

from ckpt_bench.core import megatron_release

NVRX_LOCAL = megatron_release.nvrx_missing("local")
RUN = ("--train-iters", "4", "--save-interval", "3", "--set", "non_persistent_save_interval=2", "--format", "json")


@pytest.mark.skipif(NVRX_LOCAL is not None, reason=f"{NVRX_LOCAL}")
def test_local_checkpoints_restored_from_a_replica_and_old_checkpoints_deleted(tmp_path):
    """Persistent saves at 3 and 4 (the last iteration), a local one at 2 (each rank's file and its peer's
    replica); retention every 2 deletes 3 after 4 is saved; the load (--load-tier non-persistent: a restart after a
    failure between persistent saves) restores 2 from the local tier after rank 0's folder is removed, and every
    tensor is the one saved."""
    report = launch_ok(*RUN, "--set", "non_persistent_ckpt_type=local", "--set", "replication=true",
                       "--set", "replication_jump=1", "--set", "save_retain_interval=2", "--load-tier",
                       "non-persistent", runs_dir=tmp_path)
    assert report["run"]["status"] == "ok" and report["verification"]["verified"]
    saves = {save["iteration"]: save for save in report["saves"]}
    assert sorted(saves) == [2, 3, 4] and report["load"]["iteration"] == 2
    # A local save holds its peers' replicas too, so its bytes are not what a load reads: the load is not sized.
    load = report["load"]
    assert (load["tier"], load["bytes"], load["bandwidth"]) == ("non_persistent_local", None, None)
    assert load["tier_reason"] == ("--load-tier non-persistent; the newest persistent checkpoint is of iteration 4, "
                                   "the newest non-persistent of 2")
    assert saves[2]["bytes"] > 1.8 * saves[4]["bytes"]  # each rank's file and the replica of its peer's
    deleted = [note for note in report["notes"] if note.startswith("old checkpoints deleted by rank 0")]
    assert len(deleted) == 1 and "iteration 3 after saving 4" in deleted[0], report["notes"]


def test_global_checkpoints_told_apart_and_the_restart_megatron_lm_would_make(tmp_path):
    """A non-persistent global save at 2, persistent ones at 3 and 4 (the last iteration): each save says its tier,
    each tier's figures apart; the restart reads the persistent 4 as Megatron-LM would (the non-persistent 2 is
    older), says why, and reads it on TP 2 with --dist-ckpt-strictness raise_all."""
    report = launch_ok(*RUN, "--set", "non_persistent_ckpt_type=global", "--set", "dist_ckpt_strictness=raise_all",
                       "--load-tp", "2", runs_dir=tmp_path)
    assert report["run"]["status"] == "ok" and report["verification"]["verified"]
    assert [(save["iteration"], save["tier"]) for save in report["saves"]] == [
        (2, "non_persistent_global"), (3, "persistent"), (4, "persistent")]
    load = report["load"]
    assert (load["iteration"], load["tier"], load["bytes_source"]) == (4, "persistent", "disk")
    assert load["tier_reason"] == (
        "Megatron-LM restarts from the non-persistent checkpoint when it is not older than the persistent one (the "
        "newest persistent checkpoint is of iteration 4, the newest non-persistent of 2)")
    by_tier = report["stats_by_tier"]
    assert by_tier["non_persistent_global"]["total_time"]["n"] == 1
    assert by_tier["persistent"]["first_save"]["iteration"] == 3
    assert by_tier["persistent"]["excluding_first"]["total_time"]["n"] == 1


@pytest.mark.skipif(NVRX_LOCAL is None, reason="nvidia-resiliency-ext's local checkpointing runs here")
def test_local_checkpoints_without_nvidia_resiliency_ext_are_refused_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "ckpt_launch.py"), "--device", "cpu", *RUN, "--set",
                             "non_persistent_ckpt_type=local", "--runs-dir", str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: non_persistent_ckpt_type local: Megatron-LM's local checkpoints are nvidia-resiliency-ext's "
        f"LocalCheckpointManager, and {NVRX_LOCAL}; use non_persistent_ckpt_type global")


def test_a_tier_the_run_cannot_load_is_refused_in_one_line(tmp_path):
    """--load-tier non-persistent where every non-persistent interval falls on a persistent save; --load-tier with a
    framework, whose own restart picks the tier."""
    result = subprocess.run([sys.executable, str(ROOT / "ckpt_launch.py"), "--device", "cpu", "--train-iters", "4",
                             "--save-interval", "2", "--set", "non_persistent_save_interval=2", "--set",
                             "non_persistent_ckpt_type=global", "--load-tier", "non-persistent", "--runs-dir",
                             str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: --load-tier non-persistent: no iteration of the run saves a non-persistent checkpoint "
        "(non_persistent_save_interval 2 falls only on persistent saves within --train-iters 4); lower the interval"]
    framework = subprocess.run([sys.executable, str(ROOT / "ckpt_launch.py"), "--framework", "megatron-lm",
                                "--megatron-path", str(tmp_path), "--load-tier", "persistent"],
                               capture_output=True, text=True, timeout=120)
    assert framework.returncode == 2 and "--load-tier persistent runs in the built-in worker" in framework.stderr
