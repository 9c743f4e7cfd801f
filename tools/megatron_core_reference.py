"""Save a small GPT through real megatron-core on gloo CPU ranks and compare it with ckpt-bench's layout of the
same job: the check behind the real-save numbers of tests/unit/test_workload_megatron_*.py.

    torchrun --nproc-per-node N tools/megatron_core_reference.py ARGS_JSON OUT_DIR

ARGS_JSON holds Megatron-LM arguments (underscores), as the tests' cases write them. The model is
megatron-core's local spec with RMSNorm, SwiGLU, rope, no bias, bf16 and a padded vocabulary
(`padded_vocab_size`), whatever the arguments say of those; its sizes, MoE, MLA, MTP, tied embeddings,
parallel sizes, pipeline split (virtual stages, `pipeline_model_parallel_layout`), distributed optimizer and
buckets are the arguments'. Each rank builds its model chunks as Megatron-LM's `get_model` does (one GPTModel
and DDP per virtual stage, bucketing off after the first), steps Adam once, builds the state dict as
`generate_state_dict` does (`model` or `model0`, `model1`, ...; `dp_reshardable`) and saves it with
`FullyParallelSaveStrategyWrapper` over the data-parallel group. Rank 0 then prints, per rank, whether every
ShardedTensor and ShardedObject (but the optimizer's hyperparameters) equals `megatron_shapes.rank_shards`,
the tensor bytes each rank wrote (from `.metadata`) against `megatron_shapes.layout`, and the tensor bytes
and model keys of Megatron's legacy files (`state_dict_for_save_checkpoint`, the optimizer's `state_dict`,
`get_parameter_state_dp_zero`) against `megatron_torch.rank_files`. Exit 1 on any difference.
"""

from __future__ import annotations

import json
import math
import pickle
import sys
from collections import Counter
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ckpt_bench.worker import cpu_compat

cpu_compat.install()

from megatron.core import dist_checkpointing, parallel_state  # noqa: E402
from megatron.core.dist_checkpointing.dict_utils import nested_values  # noqa: E402
from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor, apply_factories  # noqa: E402
from megatron.core.dist_checkpointing.strategies.fully_parallel import FullyParallelSaveStrategyWrapper  # noqa: E402
from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy  # noqa: E402
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig  # noqa: E402
from megatron.core.models.gpt import GPTModel  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import (  # noqa: E402
    get_gpt_decoder_block_spec,
    get_gpt_layer_local_spec,
    get_gpt_mtp_block_spec,
)
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer  # noqa: E402
from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed  # noqa: E402
from megatron.core.transformer import TransformerConfig  # noqa: E402
from megatron.core.transformer.module import Float16Module  # noqa: E402

from ckpt_bench.layout.megatron_shapes import MegatronGPT, layout, rank_shards  # noqa: E402
from ckpt_bench.layout.megatron_torch import rank_files  # noqa: E402
from ckpt_bench.layout.workload import Workload  # noqa: E402
from ckpt_bench.model.job import TrainingJob  # noqa: E402

TORCH_DTYPES = {"torch.bfloat16": "bf16", "torch.float32": "fp32"}
# Megatron-LM argument -> TransformerConfig field, where they differ or are passed as they are.
CONFIG_FIELDS = {"num_experts": "num_moe_experts", "decoder_first_pipeline_num_layers": "num_layers_in_first_"
                 "pipeline_stage", "decoder_last_pipeline_num_layers": "num_layers_in_last_pipeline_stage"}
PASSED = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "moe_router_topk",
          "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "moe_layer_freq",
          "moe_router_enable_expert_bias", "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim",
          "qk_pos_emb_head_dim", "v_head_dim", "mtp_num_layers", "qk_layernorm", "moe_router_score_function",
          "sequence_parallel", "pipeline_model_parallel_layout",
          "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split", *CONFIG_FIELDS)


def transformer_config(args: dict, job: TrainingJob, vp: int | None) -> TransformerConfig:
    fields = {CONFIG_FIELDS.get(key, key): args[key] for key in PASSED if args.get(key) is not None}
    if args.get("group_query_attention"):
        fields["num_query_groups"] = args["num_query_groups"]
    fields |= dict(
        tensor_model_parallel_size=job.tp, pipeline_model_parallel_size=job.pp, expert_model_parallel_size=job.ep,
        expert_tensor_parallel_size=job.etp or job.tp, context_parallel_size=job.cp,
        virtual_pipeline_model_parallel_size=vp, normalization="RMSNorm", gated_linear_unit=True,
        activation_func=F.silu, add_bias_linear=False, bf16=True, params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16, bias_activation_fusion=False, masked_softmax_fusion=False,
        persist_layer_norm=False, bias_dropout_fusion=False, apply_rope_fusion=False,
        gradient_accumulation_fusion=False, hidden_dropout=0.0, attention_dropout=0.0)
    if args.get("multi_latent_attention"):
        from megatron.core.transformer.transformer_config import MLATransformerConfig

        return MLATransformerConfig(**fields)
    return TransformerConfig(**fields)


def layer_spec(config: TransformerConfig, args: dict):
    if args.get("moe_layer_freq") is not None:  # dense and MoE layers: a block spec, as Megatron-LM builds it
        return get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization="RMSNorm")
    spec = get_gpt_layer_local_spec(num_experts=config.num_moe_experts, moe_grouped_gemm=False,
                                    qk_layernorm=config.qk_layernorm,
                                    multi_latent_attention=config.multi_latent_attention, normalization="RMSNorm")
    if config.multi_latent_attention:
        # The local spec's DotProductAttention takes no k/v channels (MLA passes them); it holds no state.
        from megatron.core.transformer import multi_latent_attention
        from megatron.core.transformer.dot_product_attention import DotProductAttention

        class LocalAttention(DotProductAttention):
            def __init__(self, *positional, k_channels=None, v_channels=None, **named):
                super().__init__(*positional, **named)

        spec.submodules.self_attention.submodules.core_attention = LocalAttention
        multi_latent_attention.HAVE_TE = False  # a partial Transformer Engine import sets it
    return spec


def tensor_bytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(tensor_bytes(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(item) for item in value)
    return 0


def save(args: dict, job: TrainingJob, out: Path) -> None:
    """This rank's part: build, step, dump its sharded state dict and legacy-file contents, save."""
    rank = dist.get_rank()
    vp = job.parallelism(dist.get_world_size()).pipeline.vp
    vp = vp if vp > 1 else None
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=job.tp, pipeline_model_parallel_size=job.pp,
        virtual_pipeline_model_parallel_size=vp, expert_model_parallel_size=job.ep,
        expert_tensor_parallel_size=job.etp, context_parallel_size=job.cp)
    torch.manual_seed(1)
    model_parallel_cuda_manual_seed(1)
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    config = transformer_config(args, job, vp)
    config.sequence_parallel = False  # validated with it (megatron-core needs it for TP with EP); the local
    # spec's torch norms refuse it, and it changes no state
    spec = layer_spec(config, args)
    bucket = job.ddp_bucket_size if job.overlap_grad_reduce else None
    chunks, wrapped = [], []
    for index in range(vp or 1):
        stage = index if vp else None
        mtp = (get_gpt_mtp_block_spec(config, spec, use_transformer_engine=False, vp_stage=stage)
               if config.mtp_num_layers else None)
        model = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=args["padded_vocab_size"],
                         max_sequence_length=64,
                         pre_process=parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=stage),
                         post_process=parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=stage),
                         share_embeddings_and_output_weights=job.architecture.tied_embeddings,
                         position_embedding_type="rope", mtp_block_spec=mtp, vp_stage=stage)
        chunks.append(model)
        wrapped.append(DistributedDataParallel(
            config=config, module=Float16Module(config, model),
            disable_bucketing=index > 0 or job.overlap_param_gather_with_optimizer_step,
            ddp_config=DistributedDataParallelConfig(
                grad_reduce_in_fp32=True, use_distributed_optimizer=job.distributed_optimizer,
                overlap_grad_reduce=job.overlap_grad_reduce, bucket_size=bucket)))
    optimizer = get_megatron_optimizer(OptimizerConfig(
        optimizer="adam", lr=1e-4, bf16=True, params_dtype=torch.bfloat16,
        use_distributed_optimizer=job.distributed_optimizer,
        overlap_param_gather_with_optimizer_step=job.overlap_param_gather_with_optimizer_step), wrapped)
    for module in wrapped:  # Adam's state exists after a step
        for param in module.parameters():
            if hasattr(param, "main_grad"):
                param.main_grad.zero_()
    optimizer.step()

    data_parallel = parallel_state.get_data_parallel_group(with_context_parallel=True)
    # Megatron-LM's `_build_sharded_state_dict_metadata`: the sharding type only with the distributed optimizer
    # (with it, a ChainedOptimizer prefixes its optimizers' keys `chained_<i>.`)
    metadata = {"singleton_local_shards": False, "chained_optim_avoid_prefix": True, "dp_cp_group": data_parallel}
    if job.distributed_optimizer:
        metadata["distrib_optim_sharding_type"] = "dp_reshardable"
    names = ["model"] if len(chunks) == 1 else [f"model{i}" for i in range(len(chunks))]
    state = {name: chunk.sharded_state_dict(metadata=metadata) for name, chunk in zip(names, chunks, strict=True)}
    state["optimizer"] = optimizer.sharded_state_dict(state, metadata=metadata)
    dumped = {key: dict(value) if key.startswith("model") else value for key, value in state.items()}
    apply_factories(dumped)
    shards = []
    for value in nested_values(dumped):
        if isinstance(value, ShardedTensor):
            shards.append(["tensor", value.key, value.local_shape, value.global_shape, value.global_offset,
                           value.axis_fragmentations, value.replica_id, value.prepend_axis_num,
                           TORCH_DTYPES[str(value.dtype)]])
        elif isinstance(value, ShardedObject) and not value.key.endswith(".optimizer"):
            shards.append(["object", value.key, value.global_shape, value.global_offset, value.replica_id])

    legacy: dict = {}
    if parallel_state.get_expert_data_parallel_rank() == 0:
        models = [chunk.state_dict_for_save_checkpoint() for chunk in chunks]
        legacy["model_optim_rng.pt"] = tensor_bytes(models) + (
            0 if job.distributed_optimizer else tensor_bytes(optimizer.state_dict()))
        legacy["keys"] = sorted(f"{name}/{key}" for name, model in zip(names, models, strict=True)
                                for key, value in model.items() if isinstance(value, torch.Tensor))
    if job.distributed_optimizer:
        gathered = [(o, o.get_parameter_state_dp_zero()) for o in getattr(optimizer, "chained_optimizers", [optimizer])]
        owned = [state for o, state in gathered if o.data_parallel_group.rank() == 0]
        if owned:
            legacy["distrib_optim.pt"] = tensor_bytes(owned)
    (out / f"rank{rank}.json").write_text(json.dumps({"shards": shards, "legacy": legacy}))

    checkpoint = out / "checkpoint"
    if rank == 0:
        checkpoint.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    strategy = FullyParallelSaveStrategyWrapper(TorchDistSaveShardedStrategy("torch_dist", 1, thread_count=1),
                                                data_parallel)
    dist_checkpointing.save(state, str(checkpoint), strategy)
    dist.barrier()


def written_bytes(checkpoint: Path, world: int) -> list[int]:
    """Tensor bytes each rank wrote, from the checkpoint's DCP index."""
    index = pickle.loads((checkpoint / ".metadata").read_bytes())
    written: Counter = Counter()
    for item, stored in index.storage_data.items():
        tensor = index.state_dict_metadata[item.fqn]
        if item.offset is None:
            continue
        chunk = next(c for c in tensor.chunks if tuple(c.offsets) == tuple(item.offset))
        written[int(stored.relative_path.split("_")[2])] += math.prod(chunk.sizes) * tensor.properties.dtype.itemsize
    return [written[rank] for rank in range(world)]


def compare(job: TrainingJob, out: Path, world: int) -> bool:
    """Rank 0: every rank's dump and the checkpoint against ckpt-bench's layout of the job."""
    workload = Workload(name="reference", model_type="transformer", num_layers=job.architecture.num_layers,
                        model_datatype="bf16", world_size=world, megatron=job.as_dict())
    gpt = MegatronGPT(workload, world)
    same = True
    for rank in range(world):
        dump = json.loads((out / f"rank{rank}.json").read_text())
        real = Counter(tuple(tuple(x) if isinstance(x, list) else x for x in shard) for shard in dump["shards"])
        state = rank_shards(gpt, rank)
        ours = Counter([("tensor", s.key, s.local_shape, s.global_shape, s.global_offset, s.axis_fragmentations,
                         s.replica_id, s.prepend_axis_num, s.dtype) for s in state.shards]
                       + [("object", o.key, o.global_shape, o.global_offset, o.replica_id) for o in state.objects])
        files = {f.name.split("/")[1]: f for f in rank_files(gpt, gpt.coordinates(rank))}
        legacy = {name: size for name, size in dump["legacy"].items() if name != "keys"}
        keys = sorted(t.name for f in files.values() for t in f.tensors if t.name.startswith("model"))
        problems = [f"only megatron-core: {sorted(real - ours)[:4]}" if real - ours else "",
                    f"only ours: {sorted(ours - real)[:4]}" if ours - real else "",
                    f"legacy bytes {legacy} vs ours {({n: f.nbytes for n, f in files.items()})}"
                    if legacy != {n: f.nbytes for n, f in files.items()} else "",
                    "legacy model keys differ" if keys != dump["legacy"].get("keys", []) else ""]
        problems = [p for p in problems if p]
        same &= not problems
        print(f"rank {rank}: {len(real)} shards, legacy {legacy}: " + ("; ".join(problems) or "match"))
    theirs, ours = written_bytes(out / "checkpoint", world), [share.bytes for share in layout(workload, world).ranks]
    print(f"bytes written: megatron-core {theirs}, ours {ours}: {'match' if theirs == ours else 'DIFFER'}")
    return same and theirs == ours


def main() -> None:
    args, out = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
    args.setdefault("position_embedding_type", "rope")
    job = TrainingJob.from_megatron_args(args)
    dist.init_process_group("gloo")
    out.mkdir(parents=True, exist_ok=True)
    save(args, job, out)
    same = compare(job, out, dist.get_world_size()) if dist.get_rank() == 0 else True
    dist.destroy_process_group()
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
