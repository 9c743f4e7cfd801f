"""Megatron-LM's other checkpoint tiers in the built-in worker, end to end on 2 CPU ranks: non-persistent local
checkpoints through nvidia-resiliency-ext with replication, restored after rank 0 lost its copy; non-persistent
global ones restored on another tensor-parallel size with --dist-ckpt-strictness raise_all; --save-retain-interval's
deletions timed."""

import pytest
from helpers import launch_ok

pytest.importorskip("nvidia_resiliency_ext")
RUN = ("--train-iters", "4", "--save-interval", "3", "--set", "non_persistent_save_interval=2", "--format", "json")


def test_local_checkpoints_restored_from_a_replica_and_old_checkpoints_deleted(tmp_path):
    """Persistent saves at 3 and 4 (the last iteration), a local one at 2 (each rank's file and its peer's
    replica); retention every 2 deletes 3 after 4 is saved; the load restores 2 from the local tier after rank 0's
    folder is removed, and every tensor is the one saved."""
    report = launch_ok(*RUN, "--set", "non_persistent_ckpt_type=local", "--set", "replication=true",
                       "--set", "replication_jump=1", "--set", "save_retain_interval=2", runs_dir=tmp_path)
    assert report["run"]["status"] == "ok" and report["verification"]["verified"]
    saves = {save["iteration"]: save for save in report["saves"]}
    assert sorted(saves) == [2, 3, 4] and report["load"]["iteration"] == 2
    assert saves[2]["bytes"] > 1.8 * saves[4]["bytes"]  # each rank's file and the replica of its peer's
    deleted = [note for note in report["notes"] if note.startswith("old checkpoints deleted by rank 0")]
    assert len(deleted) == 1 and "iteration 3 after saving 4" in deleted[0], report["notes"]


def test_global_checkpoints_restored_on_another_layout_with_strict_keys(tmp_path):
    report = launch_ok(*RUN, "--set", "non_persistent_ckpt_type=global", "--set", "dist_ckpt_strictness=raise_all",
                       "--load-tp", "2", runs_dir=tmp_path)
    assert report["run"]["status"] == "ok" and report["verification"]["verified"]
    assert sorted(save["iteration"] for save in report["saves"]) == [2, 3, 4] and report["load"]["iteration"] == 2
