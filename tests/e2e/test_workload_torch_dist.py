"""`--workload ... --engine torch_dist` end to end: real torchrun ranks hold a Megatron GPT's sharded state (model
replicated over data-parallel ranks, DistributedOptimizer shards) and save and load it through megatron-core's
dist_checkpointing; what each rank wrote is read back from the checkpoint's own index (`.metadata`)."""

from __future__ import annotations

import math
import pickle
from collections import Counter
from pathlib import Path

from helpers import ROOT, launch_ok

from ckpt_bench.backends.workload.megatron_shapes import layout
from ckpt_bench.backends.workload.shapes import load_dlio_yaml

WORKLOADS = ROOT / "tests" / "fixtures" / "workloads"
TINY = WORKLOADS / "tiny_test.yaml"  # TP1 x DP2 on 2 ranks: the fully-parallel save splits the model between them


def tensor_bytes_by_rank(folder: Path) -> Counter:
    """Tensor bytes each rank wrote, from the checkpoint's global index: every chunk's file is `__<rank>_<t>.distcp`."""
    metadata = pickle.loads((folder / ".metadata").read_bytes())
    written: Counter = Counter()
    for index, stored in metadata.storage_data.items():
        tensor = metadata.state_dict_metadata[index.fqn]
        if index.offset is None:  # a pickled object (`_extra_state`, the optimizer's bucket sizes)
            continue
        chunk = next(c for c in tensor.chunks if tuple(c.offsets) == tuple(index.offset))
        rank = int(stored.relative_path.split("_")[2])
        written[rank] += math.prod(chunk.sizes) * tensor.properties.dtype.itemsize
    return written


def run(tmp_path: Path, workload: Path, *options: str) -> tuple[dict, Path]:
    """The brief's launch (2 saves unless `options` say otherwise), checkpoints kept: its report and the
    folder of its last save."""
    report = launch_ok("--workload", workload, "--engine", "torch_dist", "--nproc-per-node", "2",
                       "--save-calls", "2", "--load-calls", "1", "--time-between-checkpoints", "0", *options,
                       "--save-dir", tmp_path / "ckpt", "--keep-checkpoints", "--format", "json",
                       runs_dir=tmp_path / "runs")
    last = f"iter_{report['config']['save_calls']:07d}"
    return report, tmp_path / "ckpt" / report["run"]["dir"].rsplit("/", 1)[1] / last


def check_written(report: dict, folder: Path, workload: Path, world_size: int, threads: int = 2) -> None:
    """The files (`threads` shard files a rank: 2 by default, Megatron-LM's) and every rank's tensor bytes
    are megatron_shapes' layout, to the byte."""
    expected = layout(load_dlio_yaml(workload), world_size=world_size, subset_ranks=2)
    assert report["verified"] is True and report["verification"]["ranks_checked"] == 2
    assert report["num_saved"] == report["config"]["save_calls"]
    assert report["config"]["tensor_bytes_per_save"] == expected.run_bytes
    assert report["config"]["fsync"] is True  # megatron-core fsyncs its shard files and .metadata
    files = {f.name for share in expected.ranks for f in share.files}
    files |= {f"__{share.rank}_{thread}.distcp" for share in expected.ranks for thread in range(threads)}
    assert {path.name for path in folder.iterdir()} == files
    assert tensor_bytes_by_rank(folder) == {share.rank: share.bytes for share in expected.ranks}
    assert all(expected.run_bytes < save["bytes"] < expected.run_bytes * 1.01 for save in report["saves"])


def test_fully_parallel_save_and_load(tmp_path):
    report, folder = run(tmp_path, TINY)
    check_written(report, folder, TINY, world_size=2)
    assert report["ckpt_format"] == "torch_dist" and report["async_save"] is False


# The default experiment made a small MoE: 4 experts, EP 2, the distributed optimizer, bf16; a 4-rank job of
# which ranks 0 and 1 run (their expert-parallel ranks differ: experts 0-1 and 2-3).
MOE = ("--workload", ROOT / "ckpt_bench" / "configs" / "tiny_gpt.yaml", "--set", "num_experts=4", "--set",
       "moe_router_topk=2", "--set", "expert_model_parallel_size=2", "--set", "use_distributed_optimizer=true",
       "--set", "bf16=true", "--job-ranks", "4")


def moe_plan(engine: str):
    from ckpt_bench.backends.workload.engines import ENGINES, state_layout
    from ckpt_bench.backends.workload.sources import resolve_workload

    overrides = dict(num_experts=4, moe_router_topk=2, expert_model_parallel_size=2, use_distributed_optimizer=True,
                     bf16=True)
    return state_layout(ENGINES[engine], resolve_workload(str(MOE[1]), overrides), 4, 2)


def test_an_async_moe_subset_with_one_writer_writes_its_ranks_shares(tmp_path):
    """Ranks 0 and 1 of the 4-rank MoE job save asynchronously through torch_dist, one writer thread each: every
    rank's tensor bytes and files are the plan's, to the byte."""
    report = launch_ok(*MOE, "--engine", "torch_dist", "--subset", "--nproc-per-node", "2", "--save-calls", "1",
                       "--load-calls", "1", "--time-between-checkpoints", "0", "--thread-count", "1", "--async-save",
                       "--save-dir", tmp_path / "ckpt", "--keep-checkpoints", "--format", "json",
                       runs_dir=tmp_path / "runs")
    folder = tmp_path / "ckpt" / report["run"]["dir"].rsplit("/", 1)[1] / "iter_0000001"
    expected = moe_plan("torch_dist")
    assert report["verified"] is True and report["config"]["model"] == "MoE"
    assert report["async_save"] is True and report["config"]["subset"] == 2
    assert all(save["block_time"] <= save["total_time"] for save in report["saves"])
    assert tensor_bytes_by_rank(folder) == {share.rank: share.bytes for share in expected.ranks}
    files = {f.name for share in expected.ranks for f in share.files} | {f"__{r}_0.distcp" for r in (0, 1)}
    assert {path.name for path in folder.iterdir()} == files
    assert report["config"]["largest_rank"] == expected.spread.largest_rank


def test_a_moe_subset_in_megatrons_legacy_torch_format(tmp_path):
    report = launch_ok(*MOE, "--set", "ckpt_format=torch", "--subset", "--nproc-per-node", "2", "--save-calls", "1",
                       "--load-calls", "1", "--time-between-checkpoints", "0", "--save-dir", tmp_path / "ckpt",
                       "--keep-checkpoints", "--format", "json", runs_dir=tmp_path / "runs")
    folder = tmp_path / "ckpt" / report["run"]["dir"].rsplit("/", 1)[1] / "iter_0000001"
    assert report["verified"] is True and report["ckpt_format"] == "torch"  # the experiment's own format
    written = sorted(str(path.relative_to(folder)) for path in folder.rglob("*.pt"))
    assert written == ["mp_rank_00_000/distrib_optim.pt", "mp_rank_00_000/model_optim_rng.pt",
                       "mp_rank_00_001/distrib_optim.pt", "mp_rank_00_001/model_optim_rng.pt"]
    assert sorted(f"{f.name}" for share in moe_plan("torch").ranks for f in share.files) == written
