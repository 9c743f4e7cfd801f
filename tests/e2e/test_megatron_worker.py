"""The Megatron-core worker end to end: real torchrun processes on gloo, a tiny GPT, tmp dirs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ckpt_bench.backends.megatron.spec import MegatronSpec
from ckpt_bench.backends.megatron.worker_args import SpecError, megatron_args
from ckpt_bench.core.checkpoint_dir import latest_iteration
from ckpt_bench.core.events import EventKind, event_files, read_event_files
from ckpt_bench.report.engine import build_report

TINY_MODEL = {
    "num_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "seq_length": 32,
    "vocab_size": 512,
    "micro_batch_size": 2,
    "global_batch_size": 4,
    "train_iters": 4,
    "save_interval": 2,
}
SAVED_ITERATIONS = [2, 4]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Run:
    """One benchmark run folder: spec, checkpoint, events and integrity dirs."""

    def __init__(self, root: Path, **arguments):
        self.root = root
        self.save = root / "ckpt"
        self.events = root / "events"
        self.integrity = root / "integrity"
        self.spec = root / "spec.json"
        spec = MegatronSpec(arguments={**TINY_MODEL, "save": str(self.save), **arguments},
                            events_dir=str(self.events), integrity_dir=str(self.integrity))
        self.spec.write_text(json.dumps(spec.to_json()))

    def torchrun(self, phase: str) -> subprocess.CompletedProcess:
        command = [
            sys.executable, "-W", "ignore", "-m", "torch.distributed.run",
            "--nproc-per-node", "2", "--master-port", str(_free_port()),
            "-m", "ckpt_bench.backends.megatron.worker", "--spec", str(self.spec), "--phase", phase,
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        return subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)

    def run_ok(self, phase: str) -> str:
        result = self.torchrun(phase)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
        return result.stdout

    def events_by_rank(self) -> dict[int, list]:
        by_rank: dict[int, list] = {}
        for event in read_event_files(event_files(self.events)):
            by_rank.setdefault(event.rank, []).append(event)
        return by_rank

    def verdicts(self) -> list[dict]:
        return [json.loads((self.integrity / f"load-rank-{r}.json").read_text()) for r in (0, 1)]


def _iterations(events, kind: EventKind) -> list[int]:
    return [e.iteration for e in events if e.kind == kind]


def _assert_complete_events(run: Run, load_iteration: int) -> None:
    by_rank = run.events_by_rank()
    assert sorted(by_rank) == [0, 1]
    for rank, events in by_rank.items():
        assert all(e.error is None for e in events), rank
        for kind in (EventKind.SAVE_START, EventKind.SAVE_BLOCK_END, EventKind.SAVE_END):
            assert sorted(_iterations(events, kind)) == SAVED_ITERATIONS, (rank, kind)
        assert _iterations(events, EventKind.LOAD_START) == [load_iteration]
        assert _iterations(events, EventKind.LOAD_END) == [load_iteration]


def test_tp2_sync_torch_dist(tmp_path):
    run = Run(tmp_path, tensor_model_parallel_size=2, ckpt_format="torch_dist", async_save=False,
              not_a_megatron_argument="kept")  # fmt: skip
    out = run.run_ok("save")
    assert "------------------------ arguments ------------------------" in out
    assert "  not_a_megatron_argument ......" in out
    assert " iteration        4/       4 | consumed samples:           16 |" in out
    assert f"saving checkpoint at iteration       2 to {run.save} in torch_dist format" in out
    assert f"successfully saved checkpoint from iteration       4 to {run.save} [ t 1/2, p 1/1 ]" in out

    for iteration in SAVED_ITERATIONS:
        folder = run.save / f"iter_{iteration:07d}"
        assert {p.name for p in folder.iterdir()} >= {".metadata", "common.pt", "metadata.json"}
        assert {p.name.split("_")[2] for p in folder.glob("__*_*.distcp")} == {"0", "1"}
    assert latest_iteration(run.save) == 4

    out = run.run_ok("load")
    assert f" loading distributed checkpoint from {run.save} at iteration 4" in out
    assert f"  successfully loaded checkpoint from {run.save} [ t 1/2, p 1/1 ] at iteration 4" in out
    assert all(v["verified"] and v["tensors_checked"] > 0 for v in run.verdicts())
    _assert_complete_events(run, load_iteration=4)

    by_rank = run.events_by_rank()
    for events in by_rank.values():  # synchronous: the save blocks until it is on storage
        for iteration in SAVED_ITERATIONS:
            block_end, end = (next(e for e in events if e.kind == k and e.iteration == iteration)
                              for k in (EventKind.SAVE_BLOCK_END, EventKind.SAVE_END))  # fmt: skip
            assert end.mono_ns >= block_end.mono_ns and end.bytes > 0

    report = build_report(e for events in by_rank.values() for e in events)
    assert [s["iteration"] for s in report["saves"]] == SAVED_ITERATIONS
    assert all(s["complete"] and s["ranks"] == 2 and s["bytes_source"] == "ranks" for s in report["saves"])
    assert report["num_saved"] == 2 and report["accurate"]
    assert report["load"]["iteration"] == 4 and report["load_time"] > 0


def test_dp2_async_distributed_optimizer(tmp_path):
    run = Run(tmp_path, ckpt_format="torch_dist", async_save=True, use_persistent_ckpt_worker=True,
              use_distributed_optimizer=True, ckpt_fully_parallel_load=True)  # fmt: skip
    out = run.run_ok("save")
    assert f"scheduled an async checkpoint save at iteration       2 to {run.save}" in out
    # The tracker names a checkpoint only once it is finalized, and the last one is waited for.
    assert latest_iteration(run.save) == 4
    assert out.index("scheduled an async checkpoint save at iteration       4") < out.index(
        "successfully saved checkpoint from iteration       4"
    )
    run.run_ok("load")
    assert all(v["verified"] for v in run.verdicts())
    _assert_complete_events(run, load_iteration=4)
    for events in run.events_by_rank().values():
        ends = [e for e in events if e.kind == EventKind.SAVE_END]
        # Recorded by megatron-core's writer process the moment it finished writing.
        assert all(e.extra.get("recorded_by") == "async writer" and e.bytes > 0 for e in ends)


def test_torch_format_detects_a_changed_tensor(tmp_path):
    run = Run(tmp_path, ckpt_format="torch")  # DP=2: data-parallel rank 0 writes the one file
    run.run_ok("save")
    files = sorted(p.relative_to(run.save).as_posix() for p in run.save.rglob("*.pt"))
    assert files == [f"iter_{i:07d}/mp_rank_00/model_optim_rng.pt" for i in SAVED_ITERATIONS]

    path = run.save / "iter_0000004" / "mp_rank_00" / "model_optim_rng.pt"
    state = torch.load(path, weights_only=False)
    assert state["iteration"] == 4 and state["checkpoint_version"] == 3.0
    name = "decoder.final_layernorm.weight"
    state["model"][name] += 1.0  # still loads, but holds different numbers
    torch.save(state, path)

    result = run.torchrun("load")
    assert result.returncode != 0
    assert "verification failed" in result.stderr and f"model.{name}" in result.stderr
    assert "exitcode  : 3" in result.stderr  # torchrun's summary of the ranks' exit codes
    # Everything else in the file loaded and verified: the worker's torch format round-trips.
    for verdict in run.verdicts():
        assert (verdict["verified"], verdict["mismatched"], verdict["first_mismatch"]) == (False, 1, f"model.{name}")


def test_spec_defaults_derived_values_and_errors(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"megatron": {"arguments": {"save": "/c", "tensor_model_parallel_size": 2,
                                                           "unknown_key": 1}},
                                "events_dir": "/e", "integrity_dir": "/i"}))  # fmt: skip
    args = megatron_args(MegatronSpec.from_file(path), world_size=4)
    assert (args.data_parallel_size, args.load, args.unknown_key) == (2, "/c", 1)
    assert args.padded_vocab_size % 256 == 0 and args.ffn_hidden_size == 4 * args.hidden_size
    # The launcher names the run's checkpoint folder beside the arguments; it is then save and load.
    spec = MegatronSpec(arguments={"save": None, "load": None}, checkpoint_dir="/run/ckpt")
    assert (megatron_args(spec, 1).save, megatron_args(spec, 1).load) == ("/run/ckpt", "/run/ckpt")

    with pytest.raises(SpecError, match="async_save needs ckpt_format torch_dist"):
        megatron_args(MegatronSpec(arguments={"save": "/c", "ckpt_format": "torch", "async_save": True}), 2)
    with pytest.raises(SpecError, match="not a multiple"):
        megatron_args(MegatronSpec(arguments={"save": "/c", "tensor_model_parallel_size": 2}), 3)
