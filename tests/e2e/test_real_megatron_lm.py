"""The real Megatron-LM (core_v0.16.1, or core_v0.19.0 on megatron-core 0.17+: `upstream_megatron_lm`) under
`--framework megatron-lm` on 2 CPU ranks:
its own pretrain_gpt.py trains a tiny MoE GPT, saves twice and, in a new process, loads the last checkpoint; the
report comes from its own log lines, sizes from the checkpoint folder. One run (every rank process, and every helper
megatron-core spawns from one, imports Megatron-LM: ~5 s of CPU each here) covers expert parallelism and async
saves through the persistent writer."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

from helpers import ROOT

from ckpt_bench.core.environment import megatron_core_version

TINY = ("--set", "num_layers=2", "--set", "hidden_size=64", "--set", "ffn_hidden_size=128",
        "--set", "num_attention_heads=4", "--set", "seq_length=64", "--set", "max_position_embeddings=64",
        "--set", "vocab_size=1024", "--set", "micro_batch_size=1", "--set", "global_batch_size=2",
        "--train-iters", "4", "--save-interval", "2")


def run(tmp_path: Path, megatron: Path, *args: str) -> dict:
    result = subprocess.run(
        [sys.executable, str(ROOT / "ckpt_launch.py"), "--framework", "megatron-lm", "--megatron-path", str(megatron),
         "--runs-dir", str(tmp_path / "runs"), "--format", "json", *TINY, *args],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return json.loads(result.stdout)


def assert_saved_and_loaded(report: dict, megatron: Path, logged: str) -> list[list[str]]:
    """Two saves and the load of the last, timed by Megatron-LM, sized on disk; returns the passes' commands."""
    assert report["run"]["status"] == "ok", report["notes"]
    assert [s["iteration"] for s in report["saves"]] == [2, 4] and all(s["complete"] for s in report["saves"])
    assert all(s["time_source"].startswith("megatron") for s in report["saves"])
    assert all(s["bytes_source"] == "disk" and s["bytes"] > 100_000 for s in report["saves"])
    assert report["load"]["iteration"] == 4 and report["load"]["time"] > 0
    assert report["load"]["time_source"].startswith("megatron") and report["load"]["cache"] == "cold"
    assert any("checkpoint folder holds what the log says was saved: iterations 2, 4, "
               "latest_checkpointed_iteration.txt 4" in note for note in report["notes"]), report["notes"]
    assert not any("left out" in note for note in report["notes"]), report["notes"]
    version = megatron_core_version(megatron)
    assert version.startswith(("0.16.", "0.19.")), version
    ran = f"the ranks ran this checkout's megatron-core {version} ({megatron.resolve()})"
    assert ran in report["notes"], report["notes"]
    run_dir = Path(report["run"]["dir"])
    commands = [shlex.split(line) for line in (run_dir / "commands.sh").read_text().splitlines()
                if "torch.distributed.run" in line]
    save, load = commands
    for command in commands:  # the checkout's own script, through the bootstrap
        module = command.index("-m", command.index("torch.distributed.run") + 1)
        assert command[module + 1:module + 3] == ["ckpt_bench.backends.frameworks.megatron_lm_bootstrap",
                                                  str(megatron / "pretrain_gpt.py")]
    assert "--save" in save and "--load" in load and "--exit-on-missing-checkpoint" in load
    assert logged in (run_dir / "logs" / "save" / "megatron.log").read_text()
    return commands


def test_moe_on_expert_parallel_saved_async_through_the_persistent_writer(tmp_path, upstream_megatron_lm):
    """A tiny MoE (4 experts, 2 per rank on --ep 2) in torch_dist, saved asynchronously through the persistent
    writer: the block time is Megatron-LM's scheduling of the save, the total time ends at its 'successfully
    saved' line. (The legacy torch format's files are checked byte by byte against megatron-core by the
    workload's `--engine torch`; its log lines by the parsers' tests.)"""
    report = run(tmp_path, upstream_megatron_lm, "--set", "num_experts=4", "--set", "moe_router_topk=2", "--ep", "2",
                 "--async-save", "--use-persistent-ckpt-worker")
    save, _ = assert_saved_and_loaded(report, upstream_megatron_lm, "scheduled an async checkpoint save at iteration")
    assert report["ckpt_format"] == "torch_dist" and report["async_save"] is True
    assert all(s["source_semantics"] == {"block_time": "schedule", "total_time": "durable"} for s in report["saves"])
    assert all(s["block_time"] <= s["total_time"] for s in report["saves"])
    assert save[save.index("--hidden-size") + 1] == "64" and save[save.index("--train-iters") + 1] == "4"
    assert "--mock-data" in save and save[save.index("--tokenizer-type") + 1] == "NullTokenizer"
    assert "--async-save" in save and "--use-persistent-ckpt-worker" in save
    assert save[save.index("--expert-model-parallel-size") + 1] == "2" and "--num-experts" in save
