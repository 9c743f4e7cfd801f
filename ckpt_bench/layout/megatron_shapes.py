"""What every rank of a Megatron-LM job saves through `torch_dist`, computed without torch.

The model is `ckpt_bench.model`'s description: a Primus/Megatron experiment's own (dense or MoE, MLA, MTP,
tied embeddings, its parallel layout), or for a DLIO/catalog workload the llama GPT DLIO counts (RMSNorm,
SwiGLU, rope, no biases, untied output layer, its TP and PP, DLIO's split of layers over stages). Megatron-LM
hands `dist_checkpointing.save` megatron-core's sharded state dict of that model with its optimizer; this
module derives its `ShardedTensor`s and `ShardedObject`s for any rank (`rank_shards`), and from them the bytes
and files of every rank (`layout`), so that the `torch_dist` engine allocates exactly them and the launcher
plans, checks memory and reports without building a model. Checked shard by shard (keys, shapes, offsets,
fragmentations, replica ids, dtypes) and byte by byte (what each rank wrote) against real megatron-core
0.16.1 saves on gloo: dense TP2/DP2 and uneven PP2/DP2; MoE with EP 2, EP 2 × TP 2 × ETP 1 with a dense first
layer, a shared expert and the router's expert bias, PP 2 with an uneven stage split and tied embeddings
without the distributed optimizer; MLA with one MTP layer on TP 2 (tests/unit/test_workload_megatron_*.py).

The model's shards, per rank (`ckpt_bench.model.tensors` names and shapes them):

* each parameter is split over TP on its axis (SwiGLU's fc1 as two shards, gate at tp_rank and up at
  tp + tp_rank); replicated ones (norms, the router, MLA's down projections under TE) carry replica id
  (0, tp_rank, dp_rank), split ones (0, 0, dp_rank), dp_rank in the data-parallel × context-parallel group;
* decoder layers are one global tensor per key with the layer index as a leading axis
  (`decoder.layers.self_attention.linear_qkv.weight` is [L, qkv, h]) -- unless `moe_layer_freq` is a list or
  above 1, when megatron-core keys each layer by number (`decoder.layers.<i>.`) without that axis;
* a routed expert's weights are `mlp.experts.experts.linear_fc1/2.weight` with the global expert index as an
  axis (after the layer axis), split over ETP, held by the ranks of its EP rank, replica id (0, 0, edp_rank);
* the embedding on the first stage, the final norm and the output layer on the last; a tied output layer on
  a last stage other than the first is the embedding's replica (pp replica 1: never written there); MTP
  layers (`mtp.layers.<d>.`) on the last stage;
* every linear module carries an `_extra_state` `ShardedObject` (None on the local spec).

The optimizer:

* the `DistributedOptimizer` (`use_distributed_optimizer`) in Megatron-LM's default `dp_reshardable` format:
  per pipeline stage one buffer of the dense parameters (sharded over the data-parallel × context-parallel
  group) and, for a MoE, one of the experts' (sharded over the expert data-parallel group), each the stage's
  parameters in reverse module order, each parameter at a multiple of 64 elements, the end padded to
  lcm(group size, 128), one bucket; group rank d owns the d-th slice, and saves per parameter fragment and
  per alignment gap inside the unpadded buffer three 1-D shards (fp32 `param`, `exp_avg`, `exp_avg_sq`; with
  the precision-aware optimizer the dtypes of `TrainingJob.distributed_states`, e.g. bf16 weights' main
  parameters as int16 remainders) of
  `optimizer.distributed.dp_group_idx_<mp>.gbuf_idx_0.dtype_(<param>, <grad>).bucket_idx_0.<state>`, mp the
  rank in the (expert-)tensor × (expert ×) pipeline group; with both buffers (a MoE stage) megatron's
  ChainedOptimizer prefixes the keys `chained_0.` and `chained_1.`; plus `per_bucket_numel[_unpadded]`;
* without it, Megatron's FP32 optimizer: per model shard `optimizer.state.{exp_avg,exp_avg_sq,fp32_param}.
  <key>` of the same shape and replica id (`fp32_param` only for half-precision weights).

Left out: the optimizer's hyperparameter object (a few hundred bytes per model-parallel rank), the RNG state
and `args` (as Megatron-LM's `--no-save-rng`; a workload has no trainer arguments).

Who writes what (`FullyParallelSaveStrategyWrapper` over each data-parallel × context-parallel group,
Megatron-LM's `--ckpt-fully-parallel-save`): megatron's `distribute_shards_to_ranks` over the shards whose
main replica lies in the group -- held by fewer ranks first, then largest first, then by (key, offset), each
to its least-loaded holder -- reproduced step by step, so `RankShare.bytes` is what each rank writes.
`ShardedObject`s are written by their main replica.

Files of one save (megatron-core's `FileSystemWriterAsync`): every rank that writes `__{rank}_0.distcp`
(with `--thread-count T`, up to T files `__{rank}_{0..T-1}.distcp`), rank 0 also `.metadata`, `common.pt` and
`metadata.json`. Plain Python: DeepSeek-V3's 1,024 ranks take seconds.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ckpt_bench.layout.checkpoint_layout import FileShare, Layout, RankShare, TensorSpec, ranks_that_run
from ckpt_bench.layout.workload import DTYPE_BYTES, TORCH_DTYPE, Workload, WorkloadError
from ckpt_bench.model.architecture import Architecture, ArchitectureError
from ckpt_bench.model.checkpointing import TORCH_DIST_COORDINATOR_FILES
from ckpt_bench.model.job import TrainingJob
from ckpt_bench.model.parallel import ParallelError, Parallelism, RankCoordinates
from ckpt_bench.model.pipeline_layout import ModelChunk
from ckpt_bench.model.tensors import (
    Param,
    ParameterCounts,
    decoder_layer_params,
    embedding_params,
    final_params,
    mtp_params,
    parameter_counts,
)

__all__ = [
    "OPTIMIZER_SHARDING",
    "RANK0_FILES",
    "MegatronGPT",
    "ObjectShard",
    "RankShards",
    "Shard",
    "distcp_file",
    "fully_parallel_bytes",
    "host_held_bytes",
    "layout",
    "megatron_job",
    "rank_layout",
    "rank_shards",
    "training_job",
]

#: The DistributedOptimizer's `sharded_state_dict` format Megatron-LM saves by default.
OPTIMIZER_SHARDING = "dp_reshardable"

#: Files rank 0 writes besides its shards: DCP's global index, the common state, megatron's format record.
RANK0_FILES = TORCH_DIST_COORDINATOR_FILES

# Alignments of megatron-core's `_ParamAndGradBuffer` with the distributed optimizer: every parameter starts
# at a multiple of 64 elements, the bucket ends at a multiple of lcm(group size, 128).
_PARAM_ALIGNMENT = 64
_BUCKET_ALIGNMENT = 128

# The gradient dtype Megatron-LM pairs with each weight dtype: bf16 accumulates and reduces gradients in fp32
# (`--accumulate-allreduce-grads-in-fp32`), fp16 and fp32 in their own. The pair names the optimizer's buffer.
_GRAD_DTYPE = {"bf16": "fp32", "fp16": "fp16", "fp32": "fp32"}

ReplicaId = tuple[int, int, int]


def distcp_file(rank: int) -> str:
    """The shard file megatron-core's `FileSystemWriterAsync` names for `rank`'s first writer."""
    return f"__{rank}_0.distcp"


@dataclass(frozen=True, slots=True)
class Shard:
    """One `ShardedTensor` of a rank's state: the arguments megatron-core's constructor takes."""

    key: str
    """The global tensor's key in the checkpoint."""
    local_shape: tuple[int, ...]
    """The rank's tensor (without prepended axes)."""
    global_shape: tuple[int, ...]
    global_offset: tuple[int, ...]
    """Where the local tensor lies in the global one (prepended axes included)."""
    axis_fragmentations: tuple[int, ...] | None
    """Shards per axis (None for the optimizer's flat buckets, as megatron-core builds them)."""
    replica_id: ReplicaId
    """Megatron's replica id before the fully-parallel save redistributes main replicas."""
    prepend_axis_num: int
    """Axes of the global tensor the local one lacks (the layer index of stacked layers, an expert's index)."""
    dtype: str
    """DLIO datatype name (`workload.DTYPE_BYTES`, `workload.TORCH_DTYPE`)."""
    expert: bool = False
    """A routed expert's: held by the ranks of one expert-parallel rank, replicated over expert data parallelism."""
    name: str = field(init=False)
    """Unique across the job for this shard (its replicas share it): key and offset, as DCP indexes it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", f"{self.key}@{','.join(map(str, self.global_offset))}")

    @property
    def numel(self) -> int:
        return math.prod(self.local_shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]

    @property
    def tensor_spec(self) -> TensorSpec:
        return TensorSpec(self.name, self.numel, self.dtype)

    @property
    def is_main_replica(self) -> bool:
        return not any(self.replica_id)


@dataclass(frozen=True, slots=True)
class ObjectShard:
    """One `ShardedObject` of a rank's state (a pickled object, not a tensor)."""

    key: str
    global_shape: tuple[int, ...]
    global_offset: tuple[int, ...]
    replica_id: ReplicaId
    bucket_numels: tuple[tuple[int, ...], ...] | None = None
    """The optimizer's `per_bucket_numel[_unpadded]`: per buffer (`gbuf_idx`, one per model chunk) one number
    per bucket (megatron stores each buffer's keyed by its (param, grad) dtypes); None for a linear module's
    `_extra_state`, None on the local spec."""

    @property
    def name(self) -> str:
        return f"{self.key}@{','.join(map(str, self.global_offset))}"

    @property
    def is_main_replica(self) -> bool:
        return not any(self.replica_id)


def training_job(workload: Workload) -> TrainingJob:
    """The Megatron job a workload describes: an experiment's own (`Workload.megatron`), else the llama GPT of
    DLIO's fields with DLIO's split of layers over stages, the distributed optimizer and DLIO's dtypes."""
    if workload.megatron is not None:
        return TrainingJob.from_dict(workload.megatron)
    w = workload
    refuse = f"workload {w.name!r} as a Megatron GPT"
    if w.num_layers <= 0:
        raise WorkloadError(f"{refuse}: it has no transformer layers (model.num_layers)")
    for what, dtype in (("model_datatype", w.model_datatype), ("optimizer_datatype", w.optimizer_datatype)):
        if dtype not in _GRAD_DTYPE:
            raise WorkloadError(f"{refuse}: {what} {dtype}: Megatron's are {', '.join(_GRAD_DTYPE)}")
    per_stage, extra = divmod(w.num_layers, w.pipeline_parallelism)
    try:
        architecture = Architecture(
            num_layers=w.num_layers, hidden_size=w.hidden_size, ffn_hidden_size=w.ffn_hidden_size,
            num_attention_heads=w.num_attention_heads, num_query_groups=w.num_kv_heads,
            kv_channels=w.hidden_size // w.num_attention_heads, vocab_size=w.vocab_size,
            vocab_source="the workload's vocab_size", tied_embeddings=False, normalization="RMSNorm",
            gated_mlp=True, add_bias_linear=False, params_dtype=w.model_datatype)
    except ArchitectureError as error:
        raise WorkloadError(f"{refuse}: {error}") from None
    return TrainingJob(
        architecture=architecture, tp=w.tensor_parallelism, pp=w.pipeline_parallelism,
        stage_layer_counts=tuple(per_stage + (stage < extra) for stage in range(w.pipeline_parallelism)),
        distributed_optimizer=True, optimizer_dtype=w.optimizer_datatype)


@dataclass(frozen=True, slots=True)
class _Bucket:
    """One bucket of a distributed-optimizer buffer: its parameters' [start, end) from the bucket's start (each
    at a multiple of 64 elements), its size, and its size padded to lcm(group size, 128)."""

    ranges: tuple[tuple[int, int], ...]
    unpadded: int
    padded: int


@dataclass(frozen=True, slots=True)
class _Buffer:
    """One distributed-optimizer buffer of one model chunk, sharded over a data-parallel group."""

    kind: str
    """"dense", or "expert" (the expert optimizer's, over the expert data-parallel group)."""
    optimizer: int
    """Its optimizer's place in megatron's ChainedOptimizer: the dense one (two with
    `overlap_param_gather_with_optimizer_step`: the first chunk's, the other chunks'), then the expert one."""
    index: int
    """Its `gbuf_idx`: an optimizer's buffers are its chunks' buffers, chunk after chunk."""
    buckets: tuple[_Bucket, ...]
    group_size: int


@dataclass(frozen=True, slots=True)
class _Module:
    """One module of a model chunk: its parameters' key prefix, its layer (stacked layers' index) and whether
    it is a copy of chunk (0, 0)'s word embeddings (a tied output layer, MTP's input elsewhere)."""

    prefix: str
    layer: int | None
    params: list[Param]
    embedding_copy: bool = False


class MegatronGPT:
    """The Megatron GPT a workload describes, on a job of `world_size` ranks; raises `WorkloadError` for a
    model or layout megatron-core refuses."""

    def __init__(self, workload: Workload, world_size: int):
        self.workload = workload
        self.world_size = world_size
        self.job = training_job(workload)
        self.arch = self.job.architecture
        self._modules: dict[tuple[int, int], list[_Module]] = {}
        self._extra_state_names: dict[tuple[int, int], list[tuple[str, tuple[int, ...], tuple[int, ...], bool]]] = {}
        try:
            self.parallel: Parallelism = self.job.parallelism(world_size)
        except ParallelError as error:
            raise self._refuse(str(error)) from None
        self._check()

    def _refuse(self, why: str) -> WorkloadError:
        return WorkloadError(f"workload {self.workload.name!r} as a Megatron GPT: {why}")

    def _check(self) -> None:
        arch, par = self.arch, self.parallel
        divisible = [("ffn_hidden_size", arch.ffn_hidden_size, par.tp, "tensor"),
                     ("num_attention_heads", arch.num_attention_heads, par.tp, "tensor")]
        if arch.mla is None:
            divisible.append(("num_query_groups (num_kv_heads)", arch.num_query_groups, par.tp, "tensor"))
        if arch.moe is not None:
            divisible += [("num_experts", arch.moe.num_experts, par.ep, "expert"),
                          ("moe_ffn_hidden_size", arch.moe.ffn_hidden_size, par.expert_tp, "expert tensor")]
            if arch.moe.shared_expert_size:
                divisible.append(("moe_shared_expert_intermediate_size", arch.moe.shared_expert_size, par.tp,
                                  "tensor"))
        elif par.ep > 1:
            raise self._refuse(f"expert parallelism {par.ep} without experts (num_experts)")
        for what, value, size, name in divisible:
            if value % size:
                raise self._refuse(f"{what} {value} is not divisible by {name} parallelism {size} "
                                   "(megatron-core requires it)")
        for stage in range(par.pp):
            for buffer in self._buffers[stage]:
                self._check_owned(buffer, stage)

    def _check_owned(self, buffer: _Buffer, stage: int) -> None:
        for bucket in buffer.buckets:
            if bucket.unpadded <= (buffer.group_size - 1) * (bucket.padded // buffer.group_size):
                raise self._refuse(
                    f"data-parallel rank {buffer.group_size - 1} of stage {stage} owns no parameter (a bucket of "
                    f"{bucket.unpadded} elements over {buffer.group_size} ranks); megatron-core's "
                    "DistributedOptimizer refuses that (empty bucket): use fewer ranks")

    # ---- layout ------------------------------------------------------------------------------------------

    @property
    def tp(self) -> int:
        return self.parallel.tp

    @property
    def pp(self) -> int:
        return self.parallel.pp

    @property
    def dp(self) -> int:
        return self.parallel.dp_cp

    def coordinates(self, rank: int) -> RankCoordinates:
        return self.parallel.coordinates(rank)

    @staticmethod
    def class_coordinates(c: RankCoordinates) -> RankCoordinates:
        """The coordinates standing for `c`'s class: the ranks holding the same model shards (their context- and
        data-parallel ranks aside), whose shards differ only in their replica ids."""
        return dataclasses.replace(c, rank=0, cp_rank=0, dp_rank=0, edp_rank=0)

    @property
    def padded_vocab_size(self) -> int:
        return self.arch.padded_vocab_size(self.tp)

    @property
    def kv_channels(self) -> int:
        return self.arch.kv_channels

    @cached_property
    def parameters(self) -> ParameterCounts:
        """Total and active parameters, each once (the padded vocabulary)."""
        return parameter_counts(self.arch, self.tp)

    @property
    def num_parameters(self) -> int:
        return self.parameters.total

    @property
    def buffer_dtypes(self) -> tuple[str, str]:
        """(param, grad) datatypes of the buffers the optimizer's state follows."""
        return self.arch.params_dtype, self.job.grad_dtype or _GRAD_DTYPE[self.arch.params_dtype]

    @property
    def buffer_dtype_key(self) -> str:
        param, grad = self.buffer_dtypes
        return f"dtype_(torch.{TORCH_DTYPE[param]}, torch.{TORCH_DTYPE[grad]})"

    # ---- the stage's modules ----------------------------------------------------------------------------------

    def _stage_modules(self, pp_rank: int) -> list[_Module]:
        """The modules of every model chunk of pipeline rank `pp_rank`, chunk after chunk, in module order."""
        return [module for chunk in self.parallel.chunks(pp_rank) for module in self._chunk_modules(chunk)]

    def _chunk_modules(self, chunk: ModelChunk) -> list[_Module]:
        """The modules of one model chunk (one GPTModel), in module order."""
        key = (chunk.pp_rank, chunk.vp_stage)
        if key not in self._modules:
            self._modules[key] = self._build_chunk_modules(chunk)
        return self._modules[key]

    def _build_chunk_modules(self, chunk: ModelChunk) -> list[_Module]:
        arch = self.arch
        numbered = arch.moe is not None and arch.moe.numbered_layers
        modules: list[_Module] = []
        if chunk.embedding:
            modules.append(_Module("", None, embedding_params(arch, self.tp)))
        elif chunk.mtp_layers:  # MTP's input: a copy of the word embeddings
            modules.append(_Module("", None, embedding_params(arch, self.tp)[:1], embedding_copy=True))
        for layer in chunk.layers:
            prefix = f"decoder.layers.{layer}." if numbered else "decoder.layers."
            modules.append(_Module(prefix, None if numbered else layer, decoder_layer_params(arch, layer)))
        final = final_params(arch, self.tp)
        norm, output = final[:-1], final[-1:]
        # The decoder's final norm is the loss chunk's; with MTP layers, the chunk of the last decoder layer's.
        if (arch.num_layers - 1 in chunk.layers) if arch.mtp_num_layers else chunk.loss:
            modules.append(_Module("", None, norm))
        for depth in range(chunk.mtp_layers):
            modules.append(_Module(f"mtp.layers.{depth}.", None, mtp_params(arch, depth)))
        if chunk.loss and not (arch.tied_embeddings and chunk.embedding):
            modules.append(_Module("", None, output, embedding_copy=arch.tied_embeddings))
        return modules

    def _param_shards(self, c: RankCoordinates, module: _Module, param: Param) -> list[Shard]:
        """The shards of one parameter on the rank at `c` (one per local expert for an expert's)."""
        par, arch = self.parallel, self.arch
        dtype = "fp32" if param.fp32 else arch.params_dtype
        # Copies of chunk (0, 0)'s word embeddings (a tied output layer, MTP's input) are replicas.
        tied_copy = module.embedding_copy
        key = "embedding.word_embeddings.weight" if tied_copy else module.prefix + param.name
        lead: list[tuple[int, int]] = []  # prepended axes: (index, size)
        if module.layer is not None:
            lead.append((module.layer, arch.num_layers))
        if param.expert:
            local = arch.moe.num_experts // par.ep
            experts = [(par_e, arch.moe.num_experts) for par_e in range(c.ep_rank * local, (c.ep_rank + 1) * local)]
            split, split_rank = par.expert_tp, c.etp_rank
            replica: ReplicaId = (0, 0 if param.tp_axis is not None else c.etp_rank, c.edp_rank)
        else:
            experts = [None]
            split, split_rank = par.tp, c.tp_rank
            replica = (1 if tied_copy else 0, 0 if param.tp_axis is not None else c.tp_rank, c.dp_rank)
        shape = list(param.shape)
        if param.tp_axis is not None:
            shape[param.tp_axis] //= split * param.chunks
        shards = []
        for expert in experts:
            axes = lead + ([expert] if expert else [])
            for chunk in range(param.chunks):
                fragments, offset = [1] * len(shape), [0] * len(shape)
                if param.tp_axis is not None:
                    fragments[param.tp_axis] = split * param.chunks
                    offset[param.tp_axis] = (chunk * split + split_rank) * shape[param.tp_axis]
                global_shape = tuple(s * f for s, f in zip(shape, fragments, strict=True))
                shards.append(Shard(
                    key, tuple(shape), (*(size for _, size in axes), *global_shape),
                    (*(index for index, _ in axes), *offset), (*(size for _, size in axes), *fragments),
                    replica, len(axes), dtype, param.expert))
        return shards

    def model_shards(self, c: RankCoordinates) -> list[Shard]:
        """The model's `ShardedTensor`s on the rank at `c`, in module order."""
        return [shard for module in self._stage_modules(c.pp_rank) for param in module.params
                for shard in self._param_shards(c, module, param)]

    def _extra_states(self, c: RankCoordinates) -> list[ObjectShard]:
        """Every linear module's `_extra_state` object (None on the local spec)."""
        replicas = ((0, c.tp_rank, c.dp_rank), (0, c.etp_rank, c.edp_rank))
        key = (c.pp_rank, c.ep_rank)
        if key not in self._extra_state_names:  # the same on every rank of a stage and expert-parallel rank
            self._extra_state_names[key] = self._extra_state_keys(*key)
        return [ObjectShard(name, shape, offset, replicas[expert])
                for name, shape, offset, expert in self._extra_state_names[key]]

    def _extra_state_keys(self, pp_rank: int, ep_rank: int) -> list[tuple[str, tuple[int, ...], tuple[int, ...], bool]]:
        """The `_extra_state` objects of a pipeline stage's modules (a routed expert's on the expert-parallel rank
        holding it): (key, global shape, global offset, whether an expert's)."""
        objects, arch, par = [], self.arch, self.parallel
        for module in self._stage_modules(pp_rank):
            prefix, layer = module.prefix, module.layer
            for param in module.params:
                linear = param.name.endswith(".weight") and len(param.shape) == 2 and "router" not in param.name
                if not linear or param.name.startswith(("embedding.", "output_layer.")):
                    continue
                name = prefix + param.name.removesuffix(".weight")
                lead = [(layer, arch.num_layers)] if layer is not None else []
                if param.expert:
                    local = arch.moe.num_experts // par.ep
                    for expert in range(ep_rank * local, (ep_rank + 1) * local):
                        axes = [*lead, (expert, arch.moe.num_experts)]
                        objects.append((f"{name}._extra_state", tuple(s for _, s in axes), tuple(i for i, _ in axes),
                                        True))
                else:
                    axes = lead or [(0, 1)]
                    objects.append((f"{name}._extra_state", tuple(s for _, s in axes), tuple(i for i, _ in axes),
                                    False))
        return objects

    # ---- the optimizer ----------------------------------------------------------------------------------------

    def _shared_embedding(self, module: _Module, param: Param) -> bool:
        """megatron-core's `shared_embedding` parameters, each in a bucket of its own: with a tied output layer
        or MTP layers on more than one pipeline rank, chunk (0, 0)'s word embeddings and every copy of them."""
        if self.pp == 1 or not (self.arch.tied_embeddings or self.arch.mtp_num_layers):
            return False
        return module.embedding_copy or module.prefix + param.name == "embedding.word_embeddings.weight"

    def _local_params(self, chunk: ModelChunk, expert: bool) -> list[tuple[int, bool]]:
        """(element count, shared embedding) of one rank's trained parameters of one model chunk, in module
        order: the dense ones (the same on every TP rank), or the experts' (expert after expert)."""
        par = self.parallel
        local = []
        for module in self._chunk_modules(chunk):
            trained = [p for p in module.params if p.trained and p.expert == expert]
            split = par.expert_tp if expert else par.tp
            entries = [(p.numel // split if p.tp_axis is not None else p.numel, self._shared_embedding(module, p))
                       for p in trained]
            local += entries * (self.arch.moe.num_experts // par.ep if expert and entries else 1)
        return local

    def _bucket_size(self, chunk: ModelChunk) -> int | None:
        """Elements after which megatron-core's DDP closes a bucket: with --overlap-grad-reduce,
        --ddp-bucket-size or max(40 M, 1 M x data-parallel size), on the first pipeline rank's first chunk only
        (Megatron-LM disables bucketing on later chunks, and on all with
        `overlap_param_gather_with_optimizer_step`); else one bucket."""
        if (not self.job.overlap_grad_reduce or chunk.pp_rank > 0 or chunk.vp_stage > 0
                or self.job.overlap_param_gather_with_optimizer_step):
            return None
        return self.job.ddp_bucket_size or max(40_000_000, 1_000_000 * self.parallel.dp_cp)

    @cached_property
    def _buffers(self) -> list[tuple[_Buffer, ...]]:
        """Per pipeline rank, its distributed-optimizer buffers, bucketed as megatron-core's
        `_ParamAndGradBuffer` does, in `get_megatron_optimizer`'s order: the dense optimizer's (each model chunk's
        dense buffer; with `overlap_param_gather_with_optimizer_step` the first chunk's apart, in an optimizer of
        its own), then the expert optimizer's (each chunk's expert buffer)."""
        stages = []
        for pp_rank in range(self.pp):
            chunks = self.parallel.chunks(pp_rank)
            dense = [chunks[:1], chunks[1:]] if self.job.overlap_param_gather_with_optimizer_step else [chunks]
            groups = [("dense", group) for group in dense] + [("expert", chunks)]
            buffers: list[_Buffer] = []
            for kind, group in groups:
                size = self.parallel.dp_cp if kind == "dense" else self.parallel.edp
                optimizer = len({buffer.optimizer for buffer in buffers})
                for chunk in group:
                    params = self._local_params(chunk, kind == "expert")
                    if params:
                        buckets = _bucketize(params, self._bucket_size(chunk), math.lcm(size, _BUCKET_ALIGNMENT))
                        index = sum(buffer.optimizer == optimizer for buffer in buffers)
                        buffers.append(_Buffer(kind, optimizer, index, tuple(buckets), size))
            stages.append(tuple(buffers))
        return stages

    def _optimizer_prefix(self, c: RankCoordinates, buffer: _Buffer) -> str:
        """The key prefix of `buffer`'s optimizer: `chained_<i>.` where the rank has several."""
        chained = len({b.optimizer for b in self._buffers[c.pp_rank]}) > 1
        mp = (self.parallel.model_parallel_rank(c.tp_rank, c.pp_rank) if buffer.kind == "dense" else
              c.etp_rank + self.parallel.expert_tp * (c.ep_rank + self.parallel.ep * c.pp_rank))
        return f"{f'chained_{buffer.optimizer}.' if chained else ''}optimizer.distributed.dp_group_idx_{mp}"

    def optimizer_shards(self, c: RankCoordinates, model: list[Shard] | None = None) -> list[Shard]:
        """The optimizer's `ShardedTensor`s on the rank at `c` (`model`: its model shards, for the optimizer
        without distribution, whose state mirrors them)."""
        if not self.job.distributed_optimizer:
            dtype = self.job.optimizer_dtype
            states = ("exp_avg", "exp_avg_sq") + (("fp32_param",) if self.arch.params_dtype != "fp32" else ())
            trained = {module.prefix + p.name for module in self._stage_modules(c.pp_rank) for p in module.params
                       if p.trained}
            trained.add("embedding.word_embeddings.weight")
            return [Shard(f"optimizer.state.{state}.{s.key}", s.local_shape, s.global_shape, s.global_offset,
                          s.axis_fragmentations, s.replica_id, s.prepend_axis_num, dtype, s.expert)
                    for state in states for s in (model if model is not None else self.model_shards(c))
                    if s.key in trained]
        shards, distributed = [], self.job.distributed_states
        for buffer in self._buffers[c.pp_rank]:
            group_rank = c.dp_rank if buffer.kind == "dense" else c.edp_rank
            for index, bucket in enumerate(buffer.buckets):
                prefix = (f"{self._optimizer_prefix(c, buffer)}.gbuf_idx_{buffer.index}.{self.buffer_dtype_key}"
                          f".bucket_idx_{index}")
                shards += [Shard(f"{prefix}.{state}", (stop - start,), (bucket.unpadded,), (start,), None,
                                 (0, 0, 0), 0, dtype)
                           for start, stop in _owned_pieces(bucket, group_rank, buffer.group_size)
                           for state, dtype in distributed]
        return shards

    def objects(self, c: RankCoordinates) -> list[ObjectShard]:
        """The `ShardedObject`s on the rank at `c`: the linear modules' `_extra_state`s and the distributed
        optimizer's bucket sizes."""
        objects = self._extra_states(c)
        if self.job.distributed_optimizer:
            for optimizer in sorted({buffer.optimizer for buffer in self._buffers[c.pp_rank]}):
                buffers = [buffer for buffer in self._buffers[c.pp_rank] if buffer.optimizer == optimizer]
                group_rank = c.dp_rank if buffers[0].kind == "dense" else c.edp_rank
                prefix = self._optimizer_prefix(c, buffers[0])
                padded = tuple(tuple(b.padded for b in buffer.buckets) for buffer in buffers)
                unpadded = tuple(tuple(b.unpadded for b in buffer.buckets) for buffer in buffers)
                for name, numels in (("per_bucket_numel", padded), ("per_bucket_numel_unpadded", unpadded)):
                    objects.append(ObjectShard(f"{prefix}.{name}", (1,), (0,), (0, 0, group_rank), numels))
        return objects

    # ---- who writes what -----------------------------------------------------------------------------------

    def optimizer_bytes(self, c: RankCoordinates) -> int:
        """Bytes of the distributed optimizer's shards on the rank at `c`, without building them."""
        elements = 0
        for buffer in self._buffers[c.pp_rank]:
            group_rank = c.dp_rank if buffer.kind == "dense" else c.edp_rank
            elements += sum(stop - start for bucket in buffer.buckets
                            for start, stop in _owned_pieces(bucket, group_rank, buffer.group_size))
        return elements * sum(DTYPE_BYTES[dtype] for _, dtype in self.job.distributed_states)

    def save_distribution(self, tp_rank: int, pp_rank: int) -> Distribution:
        """Who writes what in one data-parallel × context-parallel group under megatron-core's
        `FullyParallelSaveStrategyWrapper` (`determine_main_replica_uniform_distribution`): the shards whose main
        replica lies in the group, held by fewer ranks first, then largest first, then by (key, offset), each
        to its least-loaded holder (the lowest group rank on a tie); a rank's own optimizer shards are its own.

        The ranks of one expert-parallel (and expert-tensor-parallel) rank hold the same model shards, so each
        such class is built once, with the replica ids of the group's main replicas; a dense shard is held by
        the whole group, an expert's by its class, whose main replica is there if the class holds expert
        data-parallel rank 0."""
        group = self.parallel.data_parallel_group(tp_rank, pp_rank)
        coords = [self.coordinates(rank) for rank in group]
        everyone = tuple(range(len(group)))
        classes: dict[tuple[int, int], list[int]] = defaultdict(list)
        for index, c in enumerate(coords):
            classes[(c.ep_rank, c.etp_rank)].append(index)
        distributed = self.job.distributed_optimizer
        loads = [self.optimizer_bytes(c) if distributed else 0 for c in coords]
        resident = list(loads)
        entries: dict[str, tuple[tuple[int, ...], int, tuple]] = {}
        main_holder: dict[str, int] = {}
        for members in classes.values():
            probe = dataclasses.replace(coords[members[0]], dp_rank=0, edp_rank=0)
            shards = self.model_shards(probe)
            if not distributed:
                shards += self.optimizer_shards(probe, shards)
            held = sum(shard.nbytes for shard in shards)
            for index in members:
                resident[index] += held
            main_here = any(coords[index].edp_rank == 0 for index in members)
            for shard in shards:
                if shard.is_main_replica and (main_here or not shard.expert) and shard.name not in entries:
                    holders = tuple(members) if shard.expert else everyone
                    entries[shard.name] = (holders, shard.nbytes, (shard.key, shard.global_offset))
                    main_holder[shard.name] = min(holders, key=lambda i: (
                        coords[i].edp_rank if shard.expert else coords[i].dp_rank, i))
        # Without the wrapper (ckpt_fully_parallel_save off) each shard's main replica writes it: data-parallel
        # rank 0 of the group (an expert's: expert data-parallel rank 0 of its class), beside its own optimizer.
        main = list(loads)
        writer: dict[str, int] = {}
        for name, (holders, size, _) in sorted(entries.items(), key=lambda e: (len(e[1][0]), -e[1][1], e[1][2])):
            index = min(holders, key=lambda i: (loads[i], i))
            writer[name] = group[index]
            loads[index] += size
            main[main_holder[name]] += size
        return Distribution(writer, dict(zip(group, loads, strict=True)), dict(zip(group, resident, strict=True)),
                            dict(zip(group, main, strict=True)))


@dataclass(frozen=True)
class Distribution:
    """One data-parallel group's save: who writes each shared shard, and each rank's bytes."""

    writer: dict[str, int]
    """The rank that writes each shard held by several ranks or with its main replica here (by `Shard.name`);
    a rank's own distributed-optimizer shards are not listed: it writes them."""
    written: dict[int, int]
    """Tensor bytes each rank writes."""
    resident: dict[int, int]
    """Tensor bytes each rank holds (its model shards and its optimizer's)."""
    main_written: dict[int, int]
    """Tensor bytes each rank writes without the wrapper (megatron-core's `keep_only_main_replica`): the main
    replicas it holds, and its own optimizer shards."""


def _bucketize(params: list[tuple[int, bool]], bucket_size: int | None, multiple: int) -> tuple[_Bucket, ...]:
    """megatron-core's `_ParamAndGradBuffer` with the distributed optimizer: the parameters in reverse module
    order, each at a multiple of 64 elements; a bucket closes once it holds `bucket_size` elements, and around a
    shared embedding; each bucket's end padded to a multiple of `multiple`."""
    buckets: list[_Bucket] = []
    ranges: list[tuple[int, int]] = []
    bucket_start = start = 0

    def close(end: int) -> int:
        nonlocal bucket_start, ranges
        padded_end = -(-end // multiple) * multiple
        buckets.append(_Bucket(tuple((a - bucket_start, b - bucket_start) for a, b in ranges), end - bucket_start,
                               padded_end - bucket_start))
        bucket_start, ranges = padded_end, []
        return padded_end

    for numel, shared in reversed(params):  # backprop order
        start = -(-start // _PARAM_ALIGNMENT) * _PARAM_ALIGNMENT
        if shared and ranges:
            start = close(start)
        ranges.append((start, start + numel))
        end = start + numel
        start = close(end) if shared or (bucket_size is not None and end - bucket_start >= bucket_size) else end
    if ranges:
        close(ranges[-1][1])
    return tuple(buckets)


def _owned_pieces(bucket: _Bucket, group_rank: int, group_size: int) -> list[tuple[int, int]]:
    """The [start, stop) pieces of a bucket that data-parallel rank `group_rank` saves: its slice's parameter
    fragments and, as `sharded_param_state_dp_reshardable` inserts them, the alignment gaps between them that
    start inside the unpadded bucket."""
    local = bucket.padded // group_size
    begin, end = group_rank * local, (group_rank + 1) * local
    fragments = [(max(s, begin), min(e, end)) for s, e in bucket.ranges if min(e, end) > max(s, begin)]
    pieces, cursor = [], begin
    for start, stop in [*fragments, (end, end)]:
        if start > cursor and cursor < bucket.unpadded:
            pieces.append((cursor, start))
        if stop > start:
            pieces.append((start, stop))
        cursor = stop
    return pieces


@dataclass(frozen=True)
class RankShards:
    """Everything one rank holds and writes: what the `torch_dist` engine allocates and saves."""

    rank: int
    coordinates: RankCoordinates
    model: tuple[Shard, ...]
    """Its model shards (replicated over DP, some over TP), megatron-core's order."""
    optimizer: tuple[Shard, ...]
    """Its optimizer shards."""
    objects: tuple[ObjectShard, ...]
    written: frozenset[str]
    """Names of the shards it writes under the fully-parallel save."""

    @property
    def tp_rank(self) -> int:
        return self.coordinates.tp_rank

    @property
    def dp_rank(self) -> int:
        return self.coordinates.dp_rank

    @property
    def pp_rank(self) -> int:
        return self.coordinates.pp_rank

    @property
    def shards(self) -> tuple[Shard, ...]:
        return self.model + self.optimizer

    @property
    def written_shards(self) -> list[Shard]:
        return [s for s in self.shards if s.name in self.written]

    @property
    def written_objects(self) -> list[ObjectShard]:
        return [o for o in self.objects if o.is_main_replica]

    @property
    def perturbed(self) -> str:
        """The shard each save changes (`Shard.name`): one that its replicas change alike, so that a replica
        loaded from another rank's write still verifies -- the distributed optimizer's smallest shard (this
        rank's alone), else the smallest dense model shard (every rank of the data-parallel group holds it and
        picks the same)."""
        own = [s for s in self.optimizer if s.replica_id == (0, 0, 0) and s.key.startswith(
            ("optimizer.distributed.", "chained_"))]
        candidates = own or [s for s in self.model if not s.expert]
        return min(candidates, key=lambda s: (s.numel, s.name)).name


def _rank_shards(gpt: MegatronGPT, c: RankCoordinates, distribution: Distribution) -> RankShards:
    model = gpt.model_shards(c)
    optimizer = gpt.optimizer_shards(c, model)
    if gpt.job.checkpointing.ckpt_fully_parallel_save:
        written = {name for name, writer in distribution.writer.items() if writer == c.rank}
    else:  # megatron-core's keep_only_main_replica: the main replicas it holds
        written = {shard.name for shard in model + ([] if gpt.job.distributed_optimizer else optimizer)
                   if shard.is_main_replica}
    if gpt.job.distributed_optimizer:
        written |= {shard.name for shard in optimizer}
    return RankShards(c.rank, c, tuple(model), tuple(optimizer), tuple(gpt.objects(c)), frozenset(written))


def rank_shards(gpt: MegatronGPT, rank: int) -> RankShards:
    """What `rank` of the job holds and writes."""
    c = gpt.coordinates(rank)
    return _rank_shards(gpt, c, gpt.save_distribution(c.tp_rank, c.pp_rank))


def megatron_job(workload: Workload, world_size: int | None,
                 run_ranks: Sequence[int] | None) -> tuple[MegatronGPT, tuple[int, ...]]:
    """The Megatron GPT of `workload` on its job of `world_size` ranks (default: the workload's), and the ranks
    of it that run (`run_ranks`, default all: `checkpoint_layout.ranks_that_run`). Raises `WorkloadError`."""
    world = workload.world_size if world_size is None else world_size
    if world is None:
        raise WorkloadError(f"workload {workload.name!r} has no world size: pass world_size=")
    return MegatronGPT(workload, world), ranks_that_run(world, run_ranks)


def fully_parallel_bytes(gpt: MegatronGPT) -> tuple[dict[int, int], dict[int, int]]:
    """Tensor bytes each rank of the job writes under megatron's fully-parallel save, and the tensor bytes it
    holds (its model shards and its optimizer's), by rank."""
    written, resident, _ = _group_bytes(gpt)
    return written, resident


def host_held_bytes(gpt: MegatronGPT, ranks_per_node: int) -> tuple[int, ...]:
    """Tensor bytes each host's ranks hold, each shard once (ranks on hosts in order, `ranks_per_node` a host): a
    model shard (and, without the distributed optimizer, its optimizer state) that several of a host's ranks hold as
    data-parallel replicas counts once; a rank's distributed-optimizer shards are its own. What a restart without
    the fully parallel load reads from a file system where the host's page cache serves a replica once.

    Ranks of one class (same model shards: `MegatronGPT.save_distribution`'s classes, context- and data-parallel
    ranks aside) hold the same shard names; a host's union is taken once per set of classes."""
    distributed = gpt.job.distributed_optimizer
    held: dict[RankCoordinates, dict[str, int]] = {}
    unions: dict[frozenset, int] = {}
    hosts = []
    for start in range(0, gpt.world_size, ranks_per_node):
        probes, own = set(), 0
        for rank in range(start, start + ranks_per_node):
            c = gpt.coordinates(rank)
            probe = gpt.class_coordinates(c)
            if probe not in held:
                shards = gpt.model_shards(probe)
                if not distributed:
                    shards += gpt.optimizer_shards(probe, shards)
                held[probe] = {shard.name: shard.nbytes for shard in shards}
            probes.add(probe)
            if distributed:
                own += gpt.optimizer_bytes(c)
        key = frozenset(probes)
        if key not in unions:
            union: dict[str, int] = {}
            for probe in probes:
                union.update(held[probe])
            unions[key] = sum(union.values())
        hosts.append(unions[key] + own)
    return tuple(hosts)


def _group_bytes(gpt: MegatronGPT) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """(written under the fully parallel save, held, written without it) tensor bytes by rank."""
    written: dict[int, int] = {}
    resident: dict[int, int] = {}
    main: dict[int, int] = {}
    for pp_rank in range(gpt.pp):
        for tp_rank in range(gpt.tp):
            distribution = gpt.save_distribution(tp_rank, pp_rank)
            written |= distribution.written
            resident |= distribution.resident
            main |= distribution.main_written
    return written, resident, main


def rank_layout(gpt: MegatronGPT, running: Sequence[int], written: Sequence[int] | Mapping[int, int],
                resident: Mapping[int, int], read: Mapping[int, int] | None = None) -> Layout:
    """The layout of the `running` ranks of `gpt`'s job, given the tensor bytes each rank of the job writes and
    holds (and reads per load, where that is not what it writes): a rank that writes has its shard file, rank 0
    the files of the whole checkpoint besides."""
    world = gpt.world_size
    ranks = []
    for rank in running:
        c = gpt.coordinates(rank)
        # The shards themselves are the engine's to build (`rank_shards`); the plan needs their bytes.
        files = [FileShare(distcp_file(rank), "sharded", ())] if written[rank] else []
        if rank == 0:
            files += [FileShare(name, "metadata", ()) for name in RANK0_FILES]
        ranks.append(RankShare(
            rank=rank, files=tuple(files), bytes=written[rank], resident_bytes=resident[rank], tp_rank=c.tp_rank,
            pp_rank=c.pp_rank, dp_rank=c.dp_rank, mp_rank=gpt.parallel.model_parallel_rank(c.tp_rank, c.pp_rank),
            ep_rank=c.ep_rank, read_bytes=None if read is None else read[rank]))
    return Layout(workload=gpt.workload, world_size=world, data_parallelism=gpt.dp, ranks=tuple(ranks),
                  total_bytes=sum(written[r] for r in range(world)), parameters=gpt.parameters,
                  job_rank_bytes=tuple(written[r] for r in range(world)))


def layout(workload: Workload, world_size: int | None = None, run_ranks: Sequence[int] | None = None) -> Layout:
    """Every rank's bytes and files for one `torch_dist` save of `workload` as a Megatron GPT (of the ranks that
    run: `run_ranks`, default all).

    `RankShare.bytes`: the tensor bytes the rank writes under the fully-parallel save; `resident_bytes`: the
    tensor bytes it holds (its model shards and its optimizer shards). `Layout.total_bytes`: the whole job's
    (each replicated shard once). Raises `WorkloadError`.
    """
    gpt, running = megatron_job(workload, world_size, run_ranks)
    fully_parallel, resident, main = _group_bytes(gpt)
    settings = gpt.job.checkpointing
    # A restart without ckpt_fully_parallel_load reads every shard a rank holds, replicas included (megatron-core's
    # TorchDistLoadShardedStrategy keeps them all: strategies/torch.py 364); with it, about what the fully
    # parallel distribution gives each rank, the rest exchanged.
    return rank_layout(gpt, running, fully_parallel if settings.ckpt_fully_parallel_save else main, resident,
                       read=fully_parallel if settings.ckpt_fully_parallel_load else resident)
