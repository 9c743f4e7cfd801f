"""Every engine saves and loads a Megatron experiment's checkpoint, dense and MoE, of the whole job and of a
subset of it: each run is planned as `ckpt_launch.py --workload` plans it (2 ranks, 1 save, 1 load), and all
of them run in one torchrun through the workload worker's own passes (tests/workload_runs.py), so the matrix
costs one process start-up. Each run must verify every tensor it loaded, and write the tensor bytes its plan
says, rank by rank where the checkpoint's index names the writer."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT
from test_workload_torch_dist import tensor_bytes_by_rank

from ckpt_bench.benchmark import registry
from ckpt_bench.cli.launch import parse_argv
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.launcher.guard import guarded

TINY_GPT = ROOT / "ckpt_bench" / "configs" / "tiny_gpt.yaml"
# The default experiment as it is (dense, no distributed optimizer: the issue-38 crash), and made a small MoE
# with the distributed optimizer and bf16 (4 experts, EP 2).
STATES = {
    "dense": (),
    "moe": ("--set", "num_experts=4", "--set", "moe_router_topk=2", "--set", "expert_model_parallel_size=2",
            "--set", "use_distributed_optimizer=true", "--set", "bf16=true"),
}
JOBS = {"whole": ("--job-ranks", "2"), "subset": ("--job-ranks", "8", "--subset")}  # 8: a dense rank 1 holds no tensor
ENGINES = ("torch-save", "torch", "torch_dist", "dcp")
RUNS = [(engine, state, job) for engine in ENGINES for state in STATES for job in JOBS]
# DLIO's formulas (the torch-save engine) know one dense MLP a block: a MoE is refused, in one line.
REFUSED = {("torch-save", "moe"): "is a MoE model: DLIO.s formulas .* cannot express its experts; use --engine dcp"}


def _plan(engine: str, state: str, job: str, folder: Path):
    values, given = parse_argv(["--workload", str(TINY_GPT), "--engine", engine, *STATES[state], *JOBS[job],
                                "--nproc-per-node", "2", "--save-calls", "1", "--load-calls", "1",
                                "--time-between-checkpoints", "0", "--save-dir", str(folder / "ckpt")])
    launch, _ = registry.build_launch(values, given, {})
    return registry.runner_for(launch).plan(launch)


def _tensor_bytes(node) -> int:
    """Tensor bytes of a `torch.load`ed object: its tensors, in dicts and lists at any depth."""
    import torch

    if isinstance(node, torch.Tensor):
        return node.numel() * node.element_size()
    children = node.values() if isinstance(node, dict) else node if isinstance(node, (list, tuple)) else ()
    return sum(_tensor_bytes(child) for child in children)


@pytest.fixture
def runs(tmp_path_factory) -> dict:
    """Every run that is not refused: its plan's layout and folder, once all have run in one torchrun."""
    root = tmp_path_factory.mktemp("engines")
    planned = {}
    for engine, state, job in RUNS:
        if (engine, state) in REFUSED:
            continue
        folder = root / f"{engine}-{state}-{job}"
        plan = _plan(engine, state, job, folder)
        spec = dataclasses.replace(plan.spec, run_dir=str(folder), checkpoint_dir=str(folder / "ckpt"),
                                   events_dir=str(folder / "events"), integrity_dir=str(folder / "integrity"))
        (folder / "ckpt").mkdir(parents=True)
        (folder / "worker.json").write_text(json.dumps(spec.to_json()))
        planned[(engine, state, job)] = (spec.layout(), folder)
    command = [sys.executable, "-W", "ignore", "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--standalone", "--log-dir", str(root / "torchrun"),  # else torchrun leaves /tmp/torchelastic_*
               str(ROOT / "tests" / "workload_runs.py"),
               *(str(folder / "worker.json") for _, folder in planned.values())]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    # Under the launcher's guard, as every pass: it stops what the ranks leave running (megatron-core's writer
    # helper process), which would hold the output pipes open.
    result = subprocess.run(guarded(command), capture_output=True, text=True, timeout=240, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return planned


def test_every_engine_saves_and_loads_dense_and_moe_whole_and_subset(runs, tmp_path):
    """One test over the matrix, so that its one torchrun runs once, whichever test process takes it."""
    for engine, state, job in RUNS:
        _check_run(runs, tmp_path, engine, state, job)


def _check_run(runs, tmp_path, engine, state, job):
    if (engine, state) in REFUSED:
        with pytest.raises(ConfigError, match=REFUSED[engine, state]):
            _plan(engine, state, job, tmp_path)
        return
    name = f"{engine}-{state}-{job}"
    layout, folder = runs[engine, state, job]
    assert layout.is_subset == (job == "subset") and len(layout.ranks) == 2, name
    outcomes = [json.loads((folder / f"outcome-rank-{rank}.json").read_text()) for rank in (0, 1)]
    assert outcomes == ["ok", "ok"], name
    verdicts = [json.loads((folder / "integrity" / f"load-rank-{rank}.json").read_text()) for rank in (0, 1)]
    assert all(verdict["verified"] for verdict in verdicts if verdict["tensors_checked"]), name
    assert any(verdict["tensors_checked"] for verdict in verdicts), name
    saved = folder / "ckpt" / "iter_0000001"
    if (saved / ".metadata").exists():  # torch_dist, dcp: the index names each chunk's writing rank
        planned = {share.rank: share.bytes for share in layout.ranks if share.bytes}
        assert dict(tensor_bytes_by_rank(saved)) == planned, name
    else:  # torch-save, torch: torch.save'd files of nested dicts
        import torch

        assert sum(_tensor_bytes(torch.load(path, weights_only=False)) for path in saved.rglob("*.pt")) == \
            layout.run_bytes, name
