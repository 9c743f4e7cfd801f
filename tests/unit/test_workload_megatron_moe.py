"""MoE, MLA and MTP in megatron_shapes, against real megatron-core 0.16.1 saves.

REAL_SAVES: GPTModels of megatron-core's local spec (RMSNorm, SwiGLU, rope, no bias, bf16, padded vocabulary
1024) with megatron-core's DDP and optimizer, their sharded state dicts built as Megatron-LM builds them
(`singleton_local_shards` off, `dp_reshardable`, `chained_optim_avoid_prefix`) and saved on gloo CPU ranks
through `dist_checkpointing.save` with `FullyParallelSaveStrategyWrapper` over the data-parallel group. The
numbers are the tensor bytes each rank wrote (from the checkpoint's `.metadata`). In each of these runs every
ShardedTensor (key, local and global shape, offset, fragmentations, replica id, prepended axes, dtype) and
every ShardedObject but the optimizer's hyperparameters matched `rank_shards` exactly, rank by rank.
With virtual pipeline stages each rank built one GPTModel per (pipeline rank, virtual stage) chunk, each
wrapped in its own DDP (bucketing off after the first chunk, as Megatron-LM's `get_model`), one optimizer
over all of them, the state dict keyed `model0`, `model1`, ... as Megatron-LM's `generate_state_dict`.
`tools/megatron_core_reference.py` repeats any case (`{**TINY, **args}` as its JSON, under torchrun with the
case's world size; tp2_ep2_etp1 with `sequence_parallel=True` besides, which megatron-core's MoE layer asks of TP
with EP when it trains) and prints what matches; it
matched every case below but the built-in worker's.
"""

from __future__ import annotations

import pytest

from ckpt_bench.layout.megatron_shapes import MegatronGPT, host_held_bytes, layout, rank_shards
from ckpt_bench.layout.workload import Workload, WorkloadError
from ckpt_bench.model.architecture import ArchitectureError
from ckpt_bench.model.job import TrainingJob

TINY = dict(num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4, padded_vocab_size=1024,
            normalization="RMSNorm", swiglu=True, add_bias_linear=False, position_embedding_type="rope", bf16=True,
            untie_embeddings_and_output_weights=True, use_distributed_optimizer=True)
GQA = dict(group_query_attention=True, num_query_groups=2)
MOE = dict(num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=96)

REAL_SAVES = {
    # EP 2 on 2 ranks: dense DP 2, expert DP 1; ChainedOptimizer of a dense and an expert DistributedOptimizer
    "ep2": (dict(**GQA, **MOE, expert_model_parallel_size=2), 2, [2127616, 2127488]),
    # TP 2 x EP 2 with ETP 1 on 4 ranks; a dense first layer (moe_layer_freq [0, 1]: layers keyed by number),
    # a shared expert, the router's fp32 expert bias
    "tp2_ep2_etp1": (dict(**GQA, **MOE, tensor_model_parallel_size=2, expert_model_parallel_size=2,
                          expert_tensor_parallel_size=1, moe_layer_freq=[0, 1], moe_shared_expert_intermediate_size=64,
                          moe_router_enable_expert_bias=True, moe_router_score_function="sigmoid"), 4,
                     [934800, 933632, 936960, 936960]),
    # PP 2 with 1 + 2 layers, EP 2, tied embeddings (the last stage's copy is a replica), no distributed optimizer
    "pp2_uneven_tied_no_distopt": (dict(**GQA, **MOE, num_layers=3, pipeline_model_parallel_size=2,
                                        expert_model_parallel_size=2, decoder_first_pipeline_num_layers=1,
                                        untie_embeddings_and_output_weights=False, use_distributed_optimizer=False),
                                   4, [1064960, 1062144, 1210112, 1209984]),
    # EP 4 on 4 ranks, 8 experts and a shared expert
    "ep4_shared": (dict(**GQA, **{**MOE, "num_experts": 8}, expert_model_parallel_size=4,
                        moe_shared_expert_intermediate_size=128), 4, [1781888, 1725952, 1725824, 1781120]),
    # EP 2 on 4 ranks (expert data parallelism 2); hidden 72 and expert ffn 40: alignment gaps in both buffers;
    # moe_layer_freq 2: layer 0 MoE, layer 1 dense
    "ep2_expert_dp2_gaps": (dict(**GQA, **{**MOE, "moe_ffn_hidden_size": 40}, hidden_size=72, ffn_hidden_size=100,
                                 expert_model_parallel_size=2, moe_layer_freq=2), 4, [872064, 775440, 780480, 871296]),
    # --overlap-grad-reduce with 20,000-element buckets, EP 2 on 4 ranks: several buckets per buffer
    "ep2_buckets": (dict(**GQA, **MOE, expert_model_parallel_size=2, overlap_grad_reduce=True, ddp_bucket_size=20000),
                    4, [1116800, 1011200, 1011072, 1116032]),
    # one MTP layer with PP 2, untied: the last stage keeps a copy of the word embeddings in a bucket of its own
    "mtp_pp2": (dict(**GQA, mtp_num_layers=1, pipeline_model_parallel_size=2), 2, [1435392, 2857984]),
    # MLA (q and kv low-rank projections) with one MTP layer, TP 2, tied embeddings
    "mla_mtp_tp2": (dict(multi_latent_attention=True, q_lora_rank=32, kv_lora_rank=32, qk_head_dim=16,
                         qk_pos_emb_head_dim=8, v_head_dim=16, mtp_num_layers=1, tensor_model_parallel_size=2,
                         untie_embeddings_and_output_weights=False), 2, [1374464, 1373184]),
    # virtual pipeline stages: PP 2 x VPP 2 x DP 2, 4 layers (chunks [0], [1], [2], [3] on ranks 0, 1, 0, 1);
    # each chunk its own distributed-optimizer buffer (gbuf_idx 0, 1)
    "pp2_vpp2_dp2": (dict(**GQA, num_layers=4, pipeline_model_parallel_size=2, num_virtual_stages_per_pipeline_rank=2,
                          overlap_p2p_comm=True), 4, [976640, 976640, 977152, 977024]),
    # the same split on 8 layers, tied embeddings (the loss chunk's output layer a replica), no distributed optimizer
    "pp2_vpp2_tied_no_distopt": (dict(**GQA, num_layers=8, pipeline_model_parallel_size=2,
                                      num_virtual_stages_per_pipeline_rank=2, overlap_p2p_comm=True,
                                      untie_embeddings_and_output_weights=False, use_distributed_optimizer=False),
                                 4, [1494528, 1494528, 1036288, 1036160]),
    # an uneven layout of 4 stages on PP 2 (1, 2, 1, 1 layers), EP 2, tied: dense and expert buffers per chunk
    "layout_uneven_ep2": (dict(**GQA, **MOE, num_layers=5, pipeline_model_parallel_size=2,
                               pipeline_model_parallel_layout="Et|tt|t|tL", overlap_p2p_comm=True,
                               expert_model_parallel_size=2, untie_embeddings_and_output_weights=False),
                          4, [1708544, 1628160, 2205568, 2210560]),
    # a layout with the MTP layer in a chunk of its own: the decoder's final norm goes with the last decoder
    # layer (rank 0's second chunk), the MTP chunk keeps a copy of the word embeddings
    "layout_mtp": (dict(**GQA, num_layers=4, mtp_num_layers=1, pipeline_model_parallel_size=2,
                        pipeline_model_parallel_layout="Et|tt|t|mL", overlap_p2p_comm=True), 2, [1954176, 3374976]),
    # overlap_param_gather_with_optimizer_step (legacy format only in Megatron-LM): the first chunk's dense
    # parameters in a distributed optimizer of their own (chained_0, later chunks chained_1, experts chained_2),
    # no chunk bucketed though overlap_grad_reduce asks for 20,000-element buckets; EP 2
    "vpp2_optimizer_step_overlap": (dict(**GQA, **MOE, num_layers=4, pipeline_model_parallel_size=2,
                                         num_virtual_stages_per_pipeline_rank=2, overlap_p2p_comm=True,
                                         expert_model_parallel_size=2, overlap_param_gather_with_optimizer_step=True,
                                         overlap_param_gather=True, overlap_grad_reduce=True, ddp_bucket_size=20000,
                                         ckpt_format="torch"), 4, [1708544, 1628160, 1629056, 1708544]),
}


def workload(world: int, **args) -> Workload:
    job = TrainingJob.from_megatron_args({**TINY, **args})
    return Workload(name="tiny-moe", model_type="transformer", num_layers=job.architecture.num_layers,
                    model_datatype="bf16", world_size=world, megatron=job.as_dict())


# The built-in worker's save of its default experiment made a MoE (`ckpt-launch --set num_experts=4 --set
# moe_router_topk=2 --ep 2 --nproc-per-node 2`): GPT-2 style (LayerNorm with biases, biased linears and router,
# learned positions, tied embeddings), fp32, no distributed optimizer; bytes per rank from its .metadata.
BUILT_IN_MOE = dict(num_layers=4, hidden_size=256, ffn_hidden_size=1024, num_attention_heads=8, seq_length=128,
                    max_position_embeddings=128, vocab_size=8192, position_embedding_type="learned_absolute",
                    normalization="LayerNorm", swiglu=False, add_bias_linear=True,
                    untie_embeddings_and_output_weights=False, use_distributed_optimizer=False, bf16=False,
                    num_experts=4, moe_router_topk=2, expert_model_parallel_size=2)


def test_the_built_in_workers_moe_save():
    job = TrainingJob.from_megatron_args(BUILT_IN_MOE)
    tiny = Workload(name="built-in", model_type="transformer", num_layers=4, model_datatype="fp32",
                    megatron=job.as_dict())
    assert [share.bytes for share in layout(tiny, 2).ranks] == [69602400, 69602400]


@pytest.mark.parametrize("case", REAL_SAVES)
def test_bytes_each_rank_wrote_in_a_real_megatron_save(case):
    args, world, written = REAL_SAVES[case]
    result = layout(workload(world, **args), world)
    assert [share.bytes for share in result.ranks] == written
    assert result.total_bytes == sum(written)


@pytest.mark.parametrize(("args", "world", "per_host"), [
    (dict(**GQA, **MOE, tensor_model_parallel_size=2, expert_model_parallel_size=2, expert_tensor_parallel_size=1,
          moe_layer_freq=[0, 1]), 16, 4),  # dense replicas over DP, experts over expert DP, within a host
    (dict(**GQA, **MOE, expert_model_parallel_size=2, use_distributed_optimizer=False), 8, 4),  # Adam replicated
    (dict(**GQA, pipeline_model_parallel_size=2, tensor_model_parallel_size=2), 8, 2),  # a host per TP group
])
def test_a_hosts_held_bytes_count_each_shard_its_ranks_share_once(args, world, per_host):
    """`host_held_bytes` is the union of the shard names a host's ranks hold (what its page cache reads once),
    their distributed-optimizer shards each their own; one rank a host is what the rank holds."""
    gpt = MegatronGPT(workload(world, **args), world)
    ranks = [rank_shards(gpt, rank) for rank in range(world)]
    expected = []
    for start in range(0, world, per_host):
        names = {shard.name: shard.nbytes for share in ranks[start:start + per_host] for shard in share.model}
        shared = {} if gpt.job.distributed_optimizer else {
            shard.name: shard.nbytes for share in ranks[start:start + per_host] for shard in share.optimizer}
        own = sum(shard.nbytes for share in ranks[start:start + per_host] for shard in share.optimizer
                  ) if gpt.job.distributed_optimizer else 0
        expected.append(sum(names.values()) + sum(shared.values()) + own)
    hosts = host_held_bytes(gpt, per_host)
    assert hosts == tuple(expected)
    held = [sum(s.nbytes for s in share.model + share.optimizer) for share in ranks]
    assert host_held_bytes(gpt, 1) == tuple(held)
    assert all(host < sum(held[h * per_host:(h + 1) * per_host]) for h, host in enumerate(hosts))


def test_experts_carry_their_global_index_and_the_expert_data_parallel_replica():
    args, world, _ = REAL_SAVES["tp2_ep2_etp1"]
    state = rank_shards(MegatronGPT(workload(world, **args), world), 1)  # tp 1, ep 1 (ETP 1: ranks are experts)
    fc1 = [s for s in state.model if s.key == "decoder.layers.1.mlp.experts.experts.linear_fc1.weight"]
    # experts 2 and 3, gate and up halves of each, whole over ETP 1; no layer axis (layers keyed by number)
    assert [(s.global_offset, s.local_shape, s.global_shape) for s in fc1] == [
        ((2, 0, 0), (96, 64), (4, 192, 64)), ((2, 96, 0), (96, 64), (4, 192, 64)),
        ((3, 0, 0), (96, 64), (4, 192, 64)), ((3, 96, 0), (96, 64), (4, 192, 64))]
    assert {s.replica_id for s in fc1} == {(0, 0, 0)} and {s.prepend_axis_num for s in fc1} == {1}
    bias = next(s for s in state.model if s.key.endswith("router.expert_bias"))
    assert bias.dtype == "fp32" and bias.replica_id == (0, 1, 0)  # replicated over TP, kept in fp32
    keys = {s.key.split(".bucket_idx_0")[0] for s in state.optimizer}
    assert keys == {"chained_0.optimizer.distributed.dp_group_idx_1.gbuf_idx_0.dtype_(torch.bfloat16, torch.float32)",
                    "chained_1.optimizer.distributed.dp_group_idx_1.gbuf_idx_0.dtype_(torch.bfloat16, torch.float32)"}


def test_the_tied_output_layer_of_the_last_stage_is_never_written_there():
    args, world, _ = REAL_SAVES["pp2_uneven_tied_no_distopt"]
    gpt = MegatronGPT(workload(world, **args), world)
    last = rank_shards(gpt, 2)
    copy = [s for s in last.shards if s.key.endswith("embedding.word_embeddings.weight")]
    assert copy and all(s.replica_id[0] == 1 for s in copy)
    assert not any(name.startswith(("embedding.", "optimizer.state.exp_avg.embedding")) for name in last.written)
    assert [list(gpt.parallel.stage_layers(stage)) for stage in range(2)] == [[0], [1, 2]]


def test_mixtral_8x7b_and_deepseek_v3_have_their_published_parameter_counts():
    llama = dict(normalization="RMSNorm", swiglu=True, add_bias_linear=False, position_embedding_type="rope",
                 untie_embeddings_and_output_weights=True, bf16=True)
    mixtral = TrainingJob.from_megatron_args(dict(
        **llama, num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
        group_query_attention=True, num_query_groups=8, vocab_size=32000, num_experts=8, moe_router_topk=2))
    counts = MegatronGPT(Workload(name="mixtral", model_type="transformer", num_layers=32, model_datatype="bf16",
                                  megatron=mixtral.as_dict()), 8).parameters
    assert (counts.total, counts.active) == (46_702_792_704, 12_879_925_248)  # Mixtral-8x7B's 46.7 B / 12.9 B


@pytest.mark.parametrize(("args", "world", "needle"), [
    (dict(**MOE, expert_model_parallel_size=3), 3, "num_experts 4 is not divisible by expert parallelism 3"),
    (dict(**MOE, expert_model_parallel_size=2), 3, "world size 3 is not a multiple of expert tensor"),
    ({**MOE, "expert_model_parallel_size": 2, "expert_tensor_parallel_size": 2, "moe_ffn_hidden_size": 95}, 4,
     "moe_ffn_hidden_size 95 is not divisible by expert tensor parallelism 2"),
    (dict(num_layers=3, pipeline_model_parallel_size=2), 2, "num_layers 3 cannot be split over 2 pipeline stages"),
    (dict(expert_model_parallel_size=2), 2, "expert parallelism 2 without experts"),
])
def test_layouts_megatron_refuses(args, world, needle):
    with pytest.raises(WorkloadError, match=needle):
        layout(workload(world, **args), world)


# Megatron-LM's legacy torch format of the same real models: the tensor bytes of what each rank's
# model_optim_rng.pt holds (`state_dict_for_save_checkpoint`, and `state_dict` of the optimizer without the
# distributed optimizer) and distrib_optim.pt (`get_parameter_state_dp_zero` of the optimizers whose
# data-parallel rank 0 it is), as megatron-core 0.16.1 returned them; {} for a rank that writes neither.
REAL_LEGACY = {
    "ep2_expert_dp2_gaps": [{"model_optim_rng.pt": 436176, "distrib_optim.pt": 2621184},
                            {"model_optim_rng.pt": 436176, "distrib_optim.pt": 207360}, {}, {}],
    "tp2_ep2_etp1": [{"model_optim_rng.pt": 267408, "distrib_optim.pt": 1604352},
                     {"model_optim_rng.pt": 267408, "distrib_optim.pt": 1604352}, {}, {}],
    "pp2_uneven_tied_no_distopt": [{"model_optim_rng.pt": 1611048}, {"model_optim_rng.pt": 1611048},
                                   {"model_optim_rng.pt": 2305488}, {"model_optim_rng.pt": 2305488}],
    "mtp_pp2": [{"model_optim_rng.pt": 205056, "distrib_optim.pt": 1230336},
                {"model_optim_rng.pt": 427008, "distrib_optim.pt": 2562048}],
    "pp2_vpp2_dp2": [{"model_optim_rng.pt": 279040, "distrib_optim.pt": 1674240}, {},
                     {"model_optim_rng.pt": 279168, "distrib_optim.pt": 1675008}, {}],
    "pp2_vpp2_tied_no_distopt": [{"model_optim_rng.pt": 2989156}, {}, {"model_optim_rng.pt": 2990056}, {}],
    "layout_uneven_ep2": [{"model_optim_rng.pt": 329216, "distrib_optim.pt": 1975296},
                          {"model_optim_rng.pt": 329216, "distrib_optim.pt": 884736},
                          {"model_optim_rng.pt": 428416, "distrib_optim.pt": 2570496},
                          {"model_optim_rng.pt": 428416, "distrib_optim.pt": 1327104}],
    "layout_mtp": [{"model_optim_rng.pt": 279168, "distrib_optim.pt": 1675008},
                   {"model_optim_rng.pt": 500864, "distrib_optim.pt": 3005184}],
    "vpp2_optimizer_step_overlap": [{"model_optim_rng.pt": 329216, "distrib_optim.pt": 1975296},
                                    {"model_optim_rng.pt": 329216, "distrib_optim.pt": 884736},
                                    {"model_optim_rng.pt": 329344, "distrib_optim.pt": 1976064},
                                    {"model_optim_rng.pt": 329344, "distrib_optim.pt": 884736}],
}


@pytest.mark.parametrize("case", REAL_LEGACY)
def test_legacy_torch_files_hold_what_megatron_core_returns(case):
    from ckpt_bench.layout.megatron_torch import layout as legacy_layout

    args, world, _ = REAL_SAVES[case]
    shares = legacy_layout(workload(world, **args), world).ranks
    assert [{f.name.split("/")[1]: f.nbytes for f in share.files} for share in shares] == REAL_LEGACY[case]
    assert all(f.name.startswith("mp_rank_") for share in shares for f in share.files)


def test_virtual_stages_keep_global_layers_in_torch_dist_and_local_ones_per_chunk_in_legacy_files():
    from ckpt_bench.layout.megatron_torch import rank_files

    args, world, _ = REAL_SAVES["layout_mtp"]
    gpt = MegatronGPT(workload(world, **args), world)
    state = rank_shards(gpt, 0)  # chunks "Et" (layer 0) and "t" (layer 3, the decoder's final norm)
    qkv = [s for s in state.model if s.key == "decoder.layers.self_attention.linear_qkv.weight"]
    assert [s.global_offset[0] for s in qkv] == [0, 3] and {s.global_shape[0] for s in qkv} == {4}
    assert any(s.key == "decoder.final_layernorm.weight" for s in state.model)
    assert {s.key.split(".gbuf_idx_")[1][0] for s in state.optimizer} == {"0", "1"}
    # megatron-core's state_dict_for_save_checkpoint keys of each chunk, as the real save returned them
    names = [t.name for t in rank_files(gpt, gpt.coordinates(1))[0].tensors if t.name.startswith("model")]
    assert [n for n in names if "layers.0.self_attention.linear_qkv.weight" in n or "mtp" in n and "enorm" in n] == [
        "model0/decoder.layers.0.self_attention.linear_qkv.weight", "model1/mtp.layers.0.enorm.weight"]
    assert "model1/embedding.word_embeddings.weight" in names and not any("final_layernorm.weight" in n and
                                                                           "decoder" in n for n in names)


def test_the_first_chunk_gets_its_own_optimizer_with_overlap_param_gather_with_optimizer_step():
    args, world, _ = REAL_SAVES["vpp2_optimizer_step_overlap"]
    state = rank_shards(MegatronGPT(workload(world, **args), world), 0)
    prefixes = {s.key.split(".optimizer.distributed.")[0] + "." + s.key.split(".")[4] for s in state.optimizer}
    assert prefixes == {"chained_0.gbuf_idx_0", "chained_1.gbuf_idx_0", "chained_2.gbuf_idx_0",
                        "chained_2.gbuf_idx_1"}
    assert {s.key.split("bucket_idx_")[1].split(".")[0] for s in state.optimizer} == {"0"}  # no chunk bucketed
    with pytest.raises(ArchitectureError, match="overlap_param_gather_with_optimizer_step: Megatron-LM takes it"):
        TrainingJob.from_megatron_args({**TINY, **args, "ckpt_format": "torch_dist"})
