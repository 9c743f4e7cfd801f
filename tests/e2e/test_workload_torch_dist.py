"""`--workload ... --engine torch_dist` (and `dcp`, `torch`) end to end: real torchrun ranks hold a Megatron GPT's
sharded state (model replicated over data-parallel ranks, DistributedOptimizer shards) and save and load it
through megatron-core's dist_checkpointing (or PyTorch DCP, or Megatron's legacy files); what each rank wrote is
read back from the checkpoint's own index (`.metadata`)."""

from __future__ import annotations

import json
import math
import pickle
from collections import Counter
from pathlib import Path

from helpers import ROOT, launch_ok


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


# The default experiment made a small MoE: 4 experts, EP 2, the distributed optimizer, bf16; a 4-rank job of
# which ranks 0 and 1 run (their expert-parallel ranks differ: experts 0-1 and 2-3), or (TWO_RANKS) the job
# of 2 ranks, whose dense state both hold.
TWO_RANKS = ("--workload", ROOT / "ckpt_bench" / "configs" / "tiny_gpt.yaml", "--set", "num_experts=4", "--set",
             "moe_router_topk=2", "--set", "expert_model_parallel_size=2", "--set", "use_distributed_optimizer=true",
             "--set", "bf16=true")
MOE = (*TWO_RANKS, "--job-ranks", "4")


def moe_plan(engine: str, job_ranks: int = 4):
    from ckpt_bench.backends.workload.engines import ENGINES, state_layout
    from ckpt_bench.layout.sources import resolve_workload

    overrides = dict(num_experts=4, moe_router_topk=2, expert_model_parallel_size=2, use_distributed_optimizer=True,
                     bf16=True)
    return state_layout(ENGINES[engine], resolve_workload(str(MOE[1]), overrides), job_ranks,
                        range(2) if job_ranks > 2 else None)


def test_an_async_moe_subset_writes_its_ranks_shares(tmp_path):
    """Ranks 0 and 1 of the 4-rank MoE job save asynchronously through torch_dist (the fully parallel save spreads
    the replicated dense state over the expert-data-parallel ranks), with Megatron-LM's 2 writer threads a rank:
    every rank's tensor bytes and files are the plan's, to the byte. MLPerf's checkpoint_size_GB (report.json,
    DLIO's summary.json) is the tensor bytes those ranks wrote, as the checkpoint's own index counts them, not the
    state they hold (each holds the replicated dense state whole)."""
    report = launch_ok(*MOE, "--engine", "torch_dist", "--subset", "--nproc-per-node", "2", "--save-calls", "1",
                       "--load-calls", "1", "--time-between-checkpoints", "0", "--async-save",
                       "--save-dir", tmp_path / "ckpt", "--keep-checkpoints", "--format", "json",
                       runs_dir=tmp_path / "runs")
    run_dir = Path(report["run"]["dir"])
    folder = tmp_path / "ckpt" / run_dir.name / "iter_0000001"
    expected = moe_plan("torch_dist")
    assert report["verified"] is True and report["config"]["model"] == "MoE"
    assert report["async_save"] is True and report["config"]["subset"] == 2
    assert all(save["block_time"] <= save["total_time"] for save in report["saves"])
    # The writer's write | fsync (its SAVE_WRITTEN), the wait for megatron's finalize, the finalize: to the total.
    (save,) = report["saves"]
    background = [p["phase"] for p in save["phases"] if not p["blocking"] and p["phase"] != "queued"]
    assert background[:2] == ["write", "fsync"] and background[-2:] == ["awaiting_finalize", "finalize"]
    # The rank shown is the one the others waited for: its total lies among the ranks' totals (ms), not
    # necessarily the longest (a rank that started a few ms earlier).
    spread = save["total_time_per_rank"]
    assert spread["min"] - 1e-3 <= sum(p["seconds"] for p in save["phases"]) <= spread["max"] + 1e-3
    assert tensor_bytes_by_rank(folder) == {share.rank: share.bytes for share in expected.ranks}
    files = {f.name for share in expected.ranks for f in share.files}
    files |= {f"__{rank}_{thread}.distcp" for rank in (0, 1) for thread in (0, 1)}
    assert {path.name for path in folder.iterdir()} == files
    assert report["config"]["largest_rank"] == expected.spread.largest_rank
    written = sum(tensor_bytes_by_rank(folder).values())
    assert written < sum(share.resident_bytes for share in expected.ranks)
    size = report["mlperf"]["dlio"]["checkpoint_size_GB"]
    assert report["config"]["mlperf_checkpoint_bytes"] == written and size == round(written / 2**30, 6)
    assert json.loads((run_dir / "summary.json").read_text())["metric"]["checkpoint_size_GB"] == size
    assert written <= save["bytes"] < written * 1.01  # on disk: the tensors and megatron's few small files


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


def test_a_moe_through_dcp_writes_each_shard_once_as_planned(tmp_path):
    """The 2-rank MoE through DCP, asynchronously: each rank hands DCP its shards at megatron's global offsets,
    DCP writes the replicated dense state once (its planner picks the writer; the plan replays it) and each
    rank's experts; every rank's tensor bytes are the plan's, and the load reads back every shard each rank
    holds, replicas included."""
    report = launch_ok(*TWO_RANKS, "--engine", "dcp", "--nproc-per-node", "2", "--save-calls", "1",
                       "--load-calls", "1", "--time-between-checkpoints", "0", "--async-save",
                       "--save-dir", tmp_path / "ckpt", "--keep-checkpoints", "--format", "json",
                       "--storage-write-gbps", "1", runs_dir=tmp_path / "runs")
    folder = tmp_path / "ckpt" / report["run"]["dir"].rsplit("/", 1)[1] / "iter_0000001"
    expected = moe_plan("dcp", job_ranks=2)
    assert report["verified"] is True and report["config"]["model"] == "MoE" and report["config"]["subset"] is None
    written = tensor_bytes_by_rank(folder)
    assert written == {share.rank: share.bytes for share in expected.ranks} and len(set(written.values())) == 2
    assert sum(written.values()) == moe_plan("torch_dist", job_ranks=2).total_bytes  # the same state, once
    assert {path.name for path in folder.iterdir()} == {"__0_0.distcp", "__1_0.distcp", ".metadata"}
    # The projection (asked for by a storage figure) computed DCP's global steps at this size with DCP's own code:
    # its .metadata is the real one's size within 2 % (each item's length is its tensor bytes, not its serialization).
    projection = report["projection"]
    assert projection["save_traffic"]["bytes"] == sum(written.values())
    simulated, real = projection["rank_costs"]["metadata_file_bytes"], (folder / ".metadata").stat().st_size
    assert abs(simulated - real) <= 0.02 * real, (simulated, real)
