"""ckpt_bench.layout.megatron_shapes: what each rank of a Megatron GPT job holds and writes through
torch_dist, without torch.

REAL_SAVES are numbers of real megatron-core 0.16.1 saves: a GPTModel (local spec, RMSNorm, SwiGLU, rope, no
bias, untied output, bf16) with megatron-core's DDP and DistributedOptimizer (`dp_reshardable`), saved on gloo by
4 ranks through `dist_checkpointing.save` with `FullyParallelSaveStrategyWrapper` over the data-parallel group:
the tensor bytes each rank wrote, summed from the checkpoint's `.metadata` (every chunk's `__<rank>_0.distcp`).
Every ShardedTensor of those runs (key, shapes, offset, axis fragmentations, replica id, dtype), every
ShardedObject but the optimizer's hyperparameters, and which rank wrote each shard matched `rank_shards` too.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

import pytest
from helpers import assert_one_line_error, launch

from ckpt_bench.layout.catalog import CATALOG
from ckpt_bench.layout.megatron_shapes import MegatronGPT, distcp_file, layout, rank_shards
from ckpt_bench.layout.workload import Workload, WorkloadError, num_parameters

BF16, FP32 = 2, 4


def norm_parameters(workload: Workload) -> int:
    """The norms' parameters (replicated over TP, so each TP rank's optimizer keeps them): two a layer, a final."""
    return (2 * workload.num_layers + 1) * workload.hidden_size


def gpt_workload(**changes) -> Workload:
    """tiny_test.yaml's model: every parameter a multiple of 64 elements, so no alignment padding."""
    shape = dict(name="tiny", model_type="transformer", num_layers=2, hidden_size=256, ffn_hidden_size=768,
                 num_attention_heads=4, num_kv_heads=2, vocab_size=8000, model_datatype="bf16",
                 optimizer_datatype="fp32", zero_stage=1)
    return Workload(**{**shape, **changes})


# (model shape and layout, world size, tensor bytes each rank wrote in a real megatron-core save)
TP2_DP2 = dict(num_layers=4, hidden_size=64, ffn_hidden_size=96, num_attention_heads=4, num_kv_heads=2,
               vocab_size=1000, tensor_parallelism=2)
REAL_SAVES = [
    (TP2_DP2, 4, [892928, 892672, 892800, 891904]),
    # hidden 72 and ffn 100: the norms and fc2 are no multiples of 64, so the optimizer buffer has gaps
    (dict(num_layers=4, hidden_size=72, ffn_hidden_size=100, num_attention_heads=4, num_kv_heads=2, vocab_size=1000,
          pipeline_parallelism=2), 4, [1039680, 1040256, 1041024, 1039920]),
]


@pytest.mark.parametrize(("shape", "world", "written"), REAL_SAVES)
def test_bytes_each_rank_wrote_in_a_real_megatron_save(shape, world, written):
    result = layout(gpt_workload(**shape), world)
    assert [share.bytes for share in result.ranks] == written
    assert result.total_bytes == sum(written)


def test_keys_shapes_and_replicas_of_a_real_megatron_save():
    gpt = MegatronGPT(gpt_workload(**TP2_DP2), 4)
    state = rank_shards(gpt, 3)  # tp 1, dp 1
    assert (state.tp_rank, state.dp_rank, state.pp_rank) == (1, 1, 0)
    qkv = next(s for s in state.model if s.key == "decoder.layers.self_attention.linear_qkv.weight")
    assert (qkv.local_shape, qkv.global_shape, qkv.global_offset) == ((64, 64), (4, 128, 64), (0, 64, 0))
    assert qkv.axis_fragmentations == (4, 2, 1) and qkv.replica_id == (0, 0, 1) and qkv.prepend_axis_num == 1
    gate, up = (s for s in state.model if s.key == "decoder.layers.mlp.linear_fc1.weight" and s.global_offset[0] == 0)
    assert (gate.global_offset, up.global_offset, gate.global_shape) == ((0, 48, 0), (0, 144, 0), (4, 192, 64))
    norm = next(s for s in state.model if s.key == "decoder.final_layernorm.weight")
    assert norm.replica_id == (0, 1, 1)  # replicated over TP: tp_rank 0 holds the main replica
    embedding = state.model[0]
    assert embedding.key == "embedding.word_embeddings.weight" and embedding.global_shape == (1024, 64)  # padded
    first = state.optimizer[0]
    assert first.key == ("optimizer.distributed.dp_group_idx_1.gbuf_idx_0.dtype_(torch.bfloat16, torch.float32)"
                         ".bucket_idx_0.param")
    assert first.global_shape == (127552,) and first.global_offset == (63808,) and first.replica_id == (0, 0, 0)


@pytest.mark.parametrize("world", [2, 4, 8])
def test_total_is_parameters_times_model_bytes_plus_three_fp32_states(world):
    workload = gpt_workload()
    gpt = MegatronGPT(workload, world)
    assert layout(workload, world).total_bytes == gpt.num_parameters * (BF16 + 3 * FP32)


def test_tensor_parallel_ranks_each_keep_the_norms_optimizer_state():
    workload = gpt_workload(tensor_parallelism=2)
    gpt = MegatronGPT(workload, 4)
    model, optimizer = gpt.num_parameters * BF16, (gpt.num_parameters + norm_parameters(workload)) * 3 * FP32
    assert layout(workload, 4).total_bytes == model + optimizer


def test_alignment_gaps_are_saved_as_optimizer_state():
    workload = gpt_workload(hidden_size=72, ffn_hidden_size=100)
    gpt = MegatronGPT(workload, 2)
    parameters_per_stage = 6 * workload.num_layers + 3
    total = layout(workload, 2).total_bytes
    assert gpt.num_parameters * (BF16 + 3 * FP32) < total
    assert total < gpt.num_parameters * (BF16 + 3 * FP32) + parameters_per_stage * 64 * 3 * FP32


def test_parameter_count_is_dlio_s_where_nothing_is_padded():
    assert MegatronGPT(CATALOG["llama3-8b"], 8).num_parameters == num_parameters(CATALOG["llama3-8b"])
    # TP8 pads the 128,256-token vocabulary to 129,024 (128 x 8 x 126) rows in the embedding and the output layer
    gpt = MegatronGPT(CATALOG["llama3-70b"], 64)
    assert gpt.padded_vocab_size == 129024
    assert gpt.num_parameters - num_parameters(CATALOG["llama3-70b"]) == 2 * (129024 - 128256) * 8192


def test_every_rank_holds_its_replicas_and_writes_its_share():
    workload = gpt_workload(tensor_parallelism=2, pipeline_parallelism=2, num_layers=3)
    gpt = MegatronGPT(workload, 16)  # dp 4
    result = layout(workload, 16)
    writers = defaultdict(list)
    for rank in range(16):
        state = rank_shards(gpt, rank)
        share = result.ranks[rank]
        assert (share.tp_rank, share.dp_rank, share.pp_rank) == (rank % 2, rank // 2 % 4, rank // 8)  # tp-dp-pp
        assert share.bytes == sum(s.nbytes for s in state.written_shards) <= share.resident_bytes
        assert share.resident_bytes == sum(s.nbytes for s in state.shards)
        for shard in state.written_shards:
            writers[shard.name].append(rank)
    # each shard is written once; TP-replicated norms only by tp_rank 0's groups
    assert all(len(ranks) == 1 for ranks in writers.values())
    assert not any("layernorm" in name and ranks[0] % 2 for name, ranks in writers.items())
    # stage layers: DLIO's split, 2 + 1; the embedding on stage 0, the output layer on the last
    assert [list(gpt.parallel.stage_layers(p)) for p in range(2)] == [[0, 1], [2]]
    assert {s.key for s in rank_shards(gpt, 0).model} >= {"embedding.word_embeddings.weight"}
    assert "output_layer.weight" in {s.key for s in rank_shards(gpt, 8).model}
    # the files: every rank its shard file, rank 0 the index and the common state too
    assert [f.name for f in result.ranks[0].files] == [distcp_file(0), ".metadata", "common.pt", "metadata.json"]
    assert [f.name for f in result.ranks[5].files] == [distcp_file(5)]


def test_data_parallel_ranks_split_the_optimizer_buffer_and_the_model_writes_evenly():
    workload = gpt_workload()
    gpt = MegatronGPT(workload, 8)
    coverage = defaultdict(list)
    for rank in range(8):
        for shard in rank_shards(gpt, rank).optimizer:
            coverage[shard.key].append((shard.global_offset[0], shard.global_offset[0] + shard.numel))
    for key, pieces in coverage.items():  # each state's global tensor covered exactly once
        pieces.sort()
        assert pieces[0][0] == 0 and all(a[1] == b[0] for a, b in zip(pieces, pieces[1:], strict=False))
        assert pieces[-1][1] == gpt.num_parameters, key
    shares = [share.bytes for share in layout(workload, 8).ranks]
    largest_shard = max(s.nbytes for s in rank_shards(gpt, 0).model)
    assert max(shares) - min(shares) <= largest_shard


def test_a_subset_holds_what_the_same_ranks_of_the_job_hold():
    workload = gpt_workload(tensor_parallelism=2)
    job, subset = layout(workload, 8), layout(workload, 8, run_ranks=range(3))
    assert subset.ranks == job.ranks[:3] and subset.total_bytes == job.total_bytes and subset.is_subset
    assert subset.run_bytes == sum(share.bytes for share in job.ranks[:3])
    # MLPerf's checkpoint_size_GB counts what the ranks that ran wrote, not the (replicated) state they hold.
    assert subset.mlperf_checkpoint_bytes == subset.run_bytes < sum(share.resident_bytes for share in job.ranks[:3])


def test_the_mlperf_shapes_at_their_rank_counts():
    # How fast (benchmarks/workload_layout_speed.py): a timed test would fail on a busy machine, not a slow layout.
    workload = CATALOG["llama3-1t"]
    result = layout(workload)
    gpt = MegatronGPT(workload, 1024)
    assert len(result.ranks) == 1024 and gpt.kv_channels == 134  # 25872 // 192, as megatron-core floors it
    assert sum(share.bytes for share in result.ranks) == result.total_bytes
    norms_again = (workload.tensor_parallelism - 1) * norm_parameters(workload)
    exact = gpt.num_parameters * 2 + (gpt.num_parameters + norms_again) * 3 * FP32
    assert exact <= result.total_bytes < exact * 1.0001  # plus the optimizer buffers' alignment gaps
    assert math.isclose(layout(CATALOG["llama3-8b"]).total_bytes, num_parameters(CATALOG["llama3-8b"]) * 14)


@pytest.mark.parametrize(("changes", "world", "needle"), [
    (dict(num_kv_heads=1, tensor_parallelism=2), 2,
     r"num_query_groups \(num_kv_heads\) 1 is not divisible by tensor parallelism 2"),
    (dict(model_datatype="int8"), 2, "model_datatype int8"),
    (dict(tensor_parallelism=2), 3, "world size 3 is not a multiple"),
    (dict(vocab_size=8, hidden_size=64, ffn_hidden_size=64, num_layers=1), 4096, "owns no parameter"),
])
def test_layouts_megatron_refuses(changes, world, needle):
    with pytest.raises(WorkloadError, match=needle):
        layout(gpt_workload(**changes), world)


def test_plan_of_the_torch_dist_engine_is_this_layout():
    plan = json.loads(launch("--workload", "llama3-8b", "--engine", "torch_dist", "--plan", "--format", "json").stdout)
    expected = layout(CATALOG["llama3-8b"])
    assert plan["total_bytes"] == expected.total_bytes and len(plan["ranks"]) == 8
    # a file per writer thread (megatron-core's 2) a rank, rank 0's own beside
    assert [(r["bytes"], r["files"]) for r in plan["ranks"]] == [
        (share.bytes, [f"__{share.rank}_0.distcp", f"__{share.rank}_1.distcp"]
         + ([".metadata", "common.pt", "metadata.json"] if share.rank == 0 else [])) for share in expected.ranks]


def test_no_sync_files_is_refused_megatron_always_fsyncs(tmp_path):
    result = launch("--workload", "llama3-8b", "--engine", "torch_dist", "--subset", "--no-sync-files",
                    runs_dir=tmp_path / "runs")
    assert_one_line_error(result, "always fsyncs")
