"""What every rank of a Megatron-LM job saves through `torch_dist`, computed without torch.

A Megatron GPT of the workload's shape and parallel layout -- megatron-core's local layer spec (RMSNorm,
SwiGLU, rotary positions, no biases, untied output layer: the llama model DLIO counts), bf16/fp16/fp32
weights, and the `DistributedOptimizer` -- hands `dist_checkpointing.save` a sharded state dict. This module
derives that state dict's `ShardedTensor`s and `ShardedObject`s for any rank (`rank_shards`), and from them
the bytes and files of every rank (`layout`), so that the `torch_dist` engine can allocate exactly them and
the launcher can plan, check memory and report without building a model. Checked tensor by tensor (keys,
shapes, offsets, replica ids, the bytes each rank writes) against a real GPTModel + DistributedOptimizer
saved by megatron-core 0.16.1 on gloo with TP 2 / DP 2 and PP 2 / DP 2.

The model, as megatron-core builds it (h hidden, f ffn hidden, L layers, tp/pp/dp parallel sizes):

* the vocabulary is padded as Megatron-LM pads it (`--make-vocab-size-divisible-by 128`, times tp), so the
  embedding and output layer are [V'/tp, h], sharded over TP on dim 0;
* attention: kv_channels = h // heads (floored, as `TransformerConfig` does: MLPerf's llama3-1t has 134),
  `linear_qkv` [kv_channels·(heads + 2·kv_heads)/tp, h] column-parallel, `linear_proj`
  [h, kv_channels·heads/tp] row-parallel; MLP `linear_fc1` [2f/tp, h] (gated), `linear_fc2` [h, f/tp];
  the two norms per layer and the final norm [h], replicated over TP;
* the keys are megatron-core's, not the module paths: the local spec maps `input_layernorm` and
  `pre_mlp_layernorm` to `self_attention.linear_qkv.layer_norm_weight` and `mlp.linear_fc1.layer_norm_weight`
  (Transformer Engine's names), and the layers of a homogeneous `TransformerBlock` are one global tensor
  each, keyed without the layer number, with the global layer index as a prepended axis
  (`decoder.layers.self_attention.linear_qkv.weight` is [L, qkv, h]; layer i's shard is at offset (i, ...));
  SwiGLU's fc1 is saved as two shards per rank (megatron's `apply_swiglu_sharded_factory`: the gate rows at
  tp_rank, the up rows at tp + tp_rank, in units of f/tp);
* pipeline stages: the embedding on the first, the final norm and output layer on the last, the layers split
  as DLIO splits them (`shapes._layer_range`: contiguous runs, the first L % pp stages one layer more). When
  pp divides L that is Megatron's own even split; otherwise Megatron-LM needs an explicit
  `--pipeline-model-parallel-layout` to run the job at all, and this is the one we take;
* ranks in Megatron's default order `tp-cp-ep-dp-pp`: rank = tp_rank + tp·(dp_rank + dp·pp_rank). This is
  not DLIO's order (DLIO puts pp before dp), so a `--subset` of the first N ranks holds other shares than
  DLIO's first N ranks;
* model weights are replicated over data-parallel ranks: `replica_id` (0, 0, dp_rank), and (0, tp_rank,
  dp_rank) for the norms, which are replicated over TP as well;
* layers carry a `_extra_state` `ShardedObject` per linear module (None on the local spec), replicated over
  TP and DP like the norms.

The optimizer is the `DistributedOptimizer` (Megatron's ZeRO-1, whatever the workload's `zero_stage`) in the
format Megatron-LM saves by default: `dp_reshardable` (Megatron-LM's `_build_sharded_state_dict_metadata`
without `--dist-ckpt-optim-fully-reshardable`; megatron-core's own default, `fully_sharded_model_space`, is
deprecated and not what Megatron-LM asks for). Each pipeline stage's parameters lie, in reverse module order,
in one gradient buffer per (param, grad) dtype: each parameter starts at a multiple of 64 elements, the end is
padded to a multiple of lcm(dp, 128), one bucket (Megatron-LM's default without `--overlap-grad-reduce`), and
data-parallel rank d owns the d-th of dp equal slices. Its state is, per parameter fragment in its slice and
per alignment gap inside the unpadded buffer, three 1-D `ShardedTensor`s (fp32 main `param`, `exp_avg`,
`exp_avg_sq`, in the workload's optimizer datatype) of one global tensor per buffer and state,
`optimizer.distributed.dp_group_idx_{mp}.gbuf_idx_0.dtype_(<param>, <grad>).bucket_idx_0.<state>`, where mp
is the rank in its model-parallel group (tp_rank + tp·pp_rank), unique to the rank (`replica_id` (0, 0, 0)),
plus the `per_bucket_numel` and `per_bucket_numel_unpadded` objects of data-parallel rank 0. The norms'
optimizer state is therefore held once per TP rank. Left out: the optimizer's hyperparameter object
(`...optimizer`, a few hundred bytes per model-parallel rank), the RNG state and `args` (as Megatron-LM's
`--no-save-rng`; our workloads have no trainer arguments).

Who writes what (`FullyParallelSaveStrategyWrapper` over each data-parallel group, Megatron-LM's default
`--ckpt-fully-parallel-save`): each rank writes its own optimizer shards; the model shards whose main replica
lies in the group (all of them, except the norms in groups of tp_rank > 0, whose main replica is tp_rank 0's)
go, largest first, each to the group's rank with the fewest bytes so far -- megatron's
`distribute_shards_to_ranks`, reproduced here step by step, so `RankShare.bytes` is what each rank writes.
`ShardedObject`s are not distributed: their main replica (data-parallel rank 0, tp_rank 0) writes them.

Files of one save (megatron-core's `FileSystemWriterAsync`): every rank that writes `__{rank}_0.distcp`
(with `--thread-count T`, the same tensors spread over up to T files `__{rank}_{0..T-1}.distcp` by size),
rank 0 also `.metadata` (the global index), `common.pt` and `metadata.json`.

Everything here is plain Python: llama3-1t's 1,024 ranks take a fraction of a second.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

from ckpt_bench.backends.workload.shapes import (
    TORCH_DTYPE,
    FileShare,
    Layout,
    RankShare,
    TensorSpec,
    Workload,
    WorkloadError,
)

__all__ = [
    "MAKE_VOCAB_SIZE_DIVISIBLE_BY",
    "OPTIMIZER_SHARDING",
    "RANK0_FILES",
    "MegatronGPT",
    "ObjectShard",
    "RankShards",
    "Shard",
    "distcp_file",
    "layout",
    "rank_shards",
]

#: Megatron-LM's `--make-vocab-size-divisible-by` default: the vocabulary is padded to a multiple of it × tp.
MAKE_VOCAB_SIZE_DIVISIBLE_BY = 128

#: The DistributedOptimizer's `sharded_state_dict` format Megatron-LM saves by default.
OPTIMIZER_SHARDING = "dp_reshardable"

#: Files rank 0 writes besides its shards: DCP's global index, the common state, megatron's format record.
RANK0_FILES = (".metadata", "common.pt", "metadata.json")

# Alignments of megatron-core's `_ParamAndGradBuffer` with the distributed optimizer: every parameter starts
# at a multiple of 64 elements, the bucket ends at a multiple of lcm(dp, 128).
_PARAM_ALIGNMENT = 64
_BUCKET_ALIGNMENT = 128

# Megatron's model datatypes (DLIO names) and the gradient dtype Megatron-LM pairs with each: bf16 accumulates
# and reduces gradients in fp32 (`validate_args` sets --accumulate-allreduce-grads-in-fp32), fp16 and fp32 in
# their own dtype. The pair names the optimizer's buffer and its keys.
_GRAD_DTYPE = {"bf16": "fp32", "fp16": "fp16", "fp32": "fp32"}
_OPTIMIZER_STATES = ("param", "exp_avg", "exp_avg_sq")
_LAYER_LINEARS = ("self_attention.linear_proj", "self_attention.linear_qkv", "mlp.linear_fc1", "mlp.linear_fc2")

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
    """Axes of the global tensor the local one lacks (1: the layer index of stacked layers)."""
    dtype: str
    """DLIO datatype name (`shapes.DTYPE_BYTES`, `shapes.TORCH_DTYPE`)."""

    @property
    def name(self) -> str:
        """Unique across the job for this shard (its replicas share it): key and offset, as DCP indexes it."""
        return f"{self.key}@{','.join(map(str, self.global_offset))}"

    @property
    def numel(self) -> int:
        return math.prod(self.local_shape)

    @property
    def nbytes(self) -> int:
        return self.tensor_spec.nbytes

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
    bucket_numels: tuple[int, ...] | None = None
    """The optimizer's `per_bucket_numel[_unpadded]`: one number per bucket (megatron stores them keyed by
    the buffer's (param, grad) dtypes); None for a layer's `_extra_state`, which is None on the local spec."""

    @property
    def name(self) -> str:
        return f"{self.key}@{','.join(map(str, self.global_offset))}"

    @property
    def is_main_replica(self) -> bool:
        return not any(self.replica_id)


@dataclass(frozen=True)
class MegatronGPT:
    """The Megatron GPT a workload describes, on a job of `world_size` ranks; raises `WorkloadError` for a
    shape or layout megatron-core refuses."""

    workload: Workload
    world_size: int

    def __post_init__(self) -> None:
        w, tp, pp = self.workload, self.workload.tensor_parallelism, self.workload.pipeline_parallelism

        def refuse(why: str) -> WorkloadError:
            return WorkloadError(f"workload {w.name!r} as a Megatron GPT (--engine torch_dist): {why}")

        if w.num_layers <= 0:
            raise refuse("it has no transformer layers (model.num_layers)")
        if w.model_datatype not in _GRAD_DTYPE:
            raise refuse(f"model_datatype {w.model_datatype}: Megatron's weights are {', '.join(_GRAD_DTYPE)}")
        if w.optimizer_datatype not in _GRAD_DTYPE:
            raise refuse(f"optimizer_datatype {w.optimizer_datatype}: Megatron's optimizer state is "
                         f"{', '.join(_GRAD_DTYPE)}")
        if self.world_size % (tp * pp):
            raise refuse(f"world size {self.world_size} is not a multiple of tensor × pipeline parallelism = {tp * pp}")
        for what, value in (("num_attention_heads", w.num_attention_heads), ("num_kv_heads", w.num_kv_heads),
                            ("ffn_hidden_size", w.ffn_hidden_size)):
            if value % tp:
                raise refuse(f"{what} {value} is not divisible by tensor parallelism {tp} (megatron-core requires it)")
        if w.num_attention_heads % w.num_kv_heads:
            raise refuse(f"num_attention_heads {w.num_attention_heads} is not a multiple of num_kv_heads "
                         f"{w.num_kv_heads}")

    # ---- layout ------------------------------------------------------------------------------------------

    @property
    def tp(self) -> int:
        return self.workload.tensor_parallelism

    @property
    def pp(self) -> int:
        return self.workload.pipeline_parallelism

    @property
    def dp(self) -> int:
        return self.world_size // (self.tp * self.pp)

    def coordinates(self, rank: int) -> tuple[int, int, int]:
        """(tp_rank, dp_rank, pp_rank) of `rank` in Megatron's default order tp-cp-ep-dp-pp."""
        return rank % self.tp, (rank // self.tp) % self.dp, rank // (self.tp * self.dp)

    def rank(self, tp_rank: int, dp_rank: int, pp_rank: int) -> int:
        return tp_rank + self.tp * (dp_rank + self.dp * pp_rank)

    def data_parallel_group(self, tp_rank: int, pp_rank: int) -> list[int]:
        """The ranks of one data-parallel group, in group-rank order."""
        return [self.rank(tp_rank, d, pp_rank) for d in range(self.dp)]

    def stage_layers(self, pp_rank: int) -> range:
        """Global (0-based) indices of the layers of pipeline stage `pp_rank`: DLIO's split (see the module)."""
        per_stage, extra = divmod(self.workload.num_layers, self.pp)
        first = pp_rank * per_stage + min(pp_rank, extra)
        return range(first, first + per_stage + (pp_rank < extra))

    # ---- shapes ------------------------------------------------------------------------------------------

    @property
    def padded_vocab_size(self) -> int:
        multiple = MAKE_VOCAB_SIZE_DIVISIBLE_BY * self.tp
        return -(-self.workload.vocab_size // multiple) * multiple

    @property
    def kv_channels(self) -> int:
        return self.workload.hidden_size // self.workload.num_attention_heads

    @property
    def qkv_rows(self) -> int:
        w = self.workload
        return self.kv_channels * (w.num_attention_heads + 2 * w.num_kv_heads)

    @property
    def query_size(self) -> int:
        return self.kv_channels * self.workload.num_attention_heads

    @property
    def num_parameters(self) -> int:
        """Parameters of the whole model (each once), with the padded vocabulary."""
        h, f = self.workload.hidden_size, self.workload.ffn_hidden_size
        per_layer = 2 * h + self.qkv_rows * h + h * self.query_size + 3 * f * h
        return 2 * self.padded_vocab_size * h + self.workload.num_layers * per_layer + h

    @property
    def num_norm_parameters(self) -> int:
        """Parameters of the norms (replicated over TP): two per layer and the final one."""
        return (2 * self.workload.num_layers + 1) * self.workload.hidden_size

    @property
    def buffer_dtypes(self) -> tuple[str, str]:
        """(param, grad) datatypes of the gradient buffer the optimizer's state follows."""
        return self.workload.model_datatype, _GRAD_DTYPE[self.workload.model_datatype]

    @property
    def buffer_dtype_key(self) -> str:
        """`dtype_(<param>, <grad>)` of the optimizer's keys: the buffer's torch dtypes, as megatron prints them."""
        param, grad = self.buffer_dtypes
        return f"dtype_(torch.{TORCH_DTYPE[param]}, torch.{TORCH_DTYPE[grad]})"

    def _stage_parameters(self, pp_rank: int) -> list[int]:
        """Element counts of one rank's parameters of stage `pp_rank`, in module order (`named_parameters`);
        the same on every TP rank."""
        w, tp = self.workload, self.tp
        h, f = w.hidden_size, w.ffn_hidden_size
        vocab_shard = self.padded_vocab_size // tp * h
        numels = [vocab_shard] if pp_rank == 0 else []
        layer = [h, h * self.query_size // tp, self.qkv_rows // tp * h, h, 2 * f // tp * h, h * f // tp]
        numels += layer * len(self.stage_layers(pp_rank))
        if pp_rank == self.pp - 1:
            numels += [h, vocab_shard]
        return numels

    def model_shards(self, tp_rank: int, dp_rank: int, pp_rank: int) -> list[Shard]:
        """The model's `ShardedTensor`s on one rank, in the order of megatron-core's `sharded_state_dict`."""
        w, tp, dtype = self.workload, self.tp, self.workload.model_datatype
        h, f, layers = w.hidden_size, w.ffn_hidden_size, w.num_layers
        sharded: ReplicaId = (0, 0, dp_rank)
        replicated: ReplicaId = (0, tp_rank, dp_rank)  # over TP too: tp_rank 0 holds the main replica
        vocab = self.padded_vocab_size // tp

        def vocab_parallel(key: str) -> Shard:
            return Shard(key, (vocab, h), (vocab * tp, h), (tp_rank * vocab, 0), (tp, 1), sharded, 0, dtype)

        def layer_shard(i: int, name: str, local: tuple[int, ...], axis: int | None, chunk: int = 0,
                        chunks: int = 1) -> Shard:
            """Layer i's shard of a stacked tensor: split over TP on `axis` (None: replicated over TP), as the
            `chunk`-th of `chunks` pieces per rank (SwiGLU's fc1: 2)."""
            fragments = [1] * len(local)
            offset = [0] * len(local)
            if axis is not None:
                fragments[axis] = tp * chunks
                offset[axis] = (chunk * tp + tp_rank) * local[axis]
            global_shape = tuple(size * fragment for size, fragment in zip(local, fragments, strict=True))
            return Shard(f"decoder.layers.{name}", local, (layers, *global_shape), (i, *offset),
                         (layers, *fragments), sharded if axis is not None else replicated, 1, dtype)

        shards = [vocab_parallel("embedding.word_embeddings.weight")] if pp_rank == 0 else []
        for i in self.stage_layers(pp_rank):
            shards += [
                layer_shard(i, "self_attention.linear_qkv.layer_norm_weight", (h,), None),
                layer_shard(i, "self_attention.linear_proj.weight", (h, self.query_size // tp), 1),
                layer_shard(i, "self_attention.linear_qkv.weight", (self.qkv_rows // tp, h), 0),
                layer_shard(i, "mlp.linear_fc1.layer_norm_weight", (h,), None),
                layer_shard(i, "mlp.linear_fc1.weight", (f // tp, h), 0, chunk=0, chunks=2),
                layer_shard(i, "mlp.linear_fc1.weight", (f // tp, h), 0, chunk=1, chunks=2),
                layer_shard(i, "mlp.linear_fc2.weight", (h, f // tp), 1),
            ]
        if pp_rank == self.pp - 1:
            shards += [Shard("decoder.final_layernorm.weight", (h,), (h,), (0,), (1,), replicated, 0, dtype),
                       vocab_parallel("output_layer.weight")]
        return shards

    @cached_property
    def _buffers(self) -> list[tuple[list[tuple[int, int]], int, int]]:
        """Per pipeline stage: the parameters' [start, end) in its gradient buffer (buffer order), the unpadded
        and the padded buffer size -- megatron-core's `_ParamAndGradBuffer` with the distributed optimizer."""
        buffers = []
        bucket_multiple = math.lcm(self.dp, _BUCKET_ALIGNMENT)
        for pp_rank in range(self.pp):
            ranges, end = [], 0
            for numel in reversed(self._stage_parameters(pp_rank)):  # backprop order
                start = -(-end // _PARAM_ALIGNMENT) * _PARAM_ALIGNMENT
                end = start + numel
                ranges.append((start, end))
            buffers.append((ranges, end, -(-end // bucket_multiple) * bucket_multiple))
        return buffers

    def optimizer_shards(self, tp_rank: int, dp_rank: int, pp_rank: int) -> list[Shard]:
        """The DistributedOptimizer's `dp_reshardable` `ShardedTensor`s on one rank: for every parameter
        fragment and alignment gap of its buffer slice, in buffer order, its three states."""
        ranges, unpadded, padded = self._buffers[pp_rank]
        local = padded // self.dp
        begin, end = dp_rank * local, (dp_rank + 1) * local
        # This rank's parameter fragments in world (buffer) coordinates, then the gaps between them, as
        # `sharded_param_state_dp_reshardable` inserts them: only those starting inside the unpadded buffer.
        fragments = [(max(s, begin), min(e, end)) for s, e in ranges if min(e, end) > max(s, begin)]
        if not fragments:
            raise WorkloadError(
                f"workload {self.workload.name!r} as a Megatron GPT: data-parallel rank {dp_rank} of stage "
                f"{pp_rank} owns no parameter (a buffer of {unpadded} elements over {self.dp} ranks); "
                "megatron-core's DistributedOptimizer refuses that (empty bucket): use fewer ranks")
        pieces, cursor = [], begin
        for start, stop in [*fragments, (end, end)]:
            if start > cursor and cursor < unpadded:
                pieces.append((cursor, start))
            if stop > start:
                pieces.append((start, stop))
            cursor = stop
        mp_rank = tp_rank + self.tp * pp_rank
        prefix = f"optimizer.distributed.dp_group_idx_{mp_rank}.gbuf_idx_0.{self.buffer_dtype_key}.bucket_idx_0"
        dtype = self.workload.optimizer_datatype
        return [Shard(f"{prefix}.{state}", (stop - start,), (unpadded,), (start,), None, (0, 0, 0), 0, dtype)
                for start, stop in pieces for state in _OPTIMIZER_STATES]

    def objects(self, tp_rank: int, dp_rank: int, pp_rank: int) -> list[ObjectShard]:
        """The `ShardedObject`s on one rank: the layers' `_extra_state`s and the optimizer's bucket sizes."""
        layers = self.workload.num_layers
        objects = [ObjectShard(f"decoder.layers.{linear}._extra_state", (layers,), (i,), (0, tp_rank, dp_rank))
                   for i in self.stage_layers(pp_rank) for linear in _LAYER_LINEARS]
        _, unpadded, padded = self._buffers[pp_rank]
        prefix = f"optimizer.distributed.dp_group_idx_{tp_rank + self.tp * pp_rank}"
        for name, numel in (("per_bucket_numel", padded), ("per_bucket_numel_unpadded", unpadded)):
            objects.append(ObjectShard(f"{prefix}.{name}", (1,), (0,), (0, 0, dp_rank), (numel,)))
        return objects

    # ---- who writes what -----------------------------------------------------------------------------------

    def save_distribution(self, tp_rank: int, pp_rank: int) -> dict[str, int]:
        """Which data-parallel rank writes each model shard of one data-parallel group under megatron-core's
        `FullyParallelSaveStrategyWrapper` (`distribute_shards_to_ranks`): shards held by fewer ranks first
        (each rank's own optimizer shards), then by size, largest first, then by shard id; each to the
        group's rank with the fewest bytes so far (the lowest rank on a tie). Shards with no main replica in
        the group (the norms of tp_rank > 0) are nobody's here."""
        loads = [(sum(s.nbytes for s in self.optimizer_shards(tp_rank, d, pp_rank)), d) for d in range(self.dp)]
        shared = [s for s in self.model_shards(tp_rank, 0, pp_rank) if s.is_main_replica]
        shared.sort(key=lambda s: (-s.nbytes, s.key, s.global_offset))
        writer = {}
        for shard in shared:
            size, dp_rank = min(loads)
            writer[shard.name] = dp_rank
            loads[dp_rank] = (size + shard.nbytes, dp_rank)
        return writer


@dataclass(frozen=True)
class RankShards:
    """Everything one rank holds and writes: what the `torch_dist` engine allocates and saves."""

    rank: int
    tp_rank: int
    dp_rank: int
    pp_rank: int
    model: tuple[Shard, ...]
    """Its model shards (replicated over DP, some over TP), megatron-core's order."""
    optimizer: tuple[Shard, ...]
    """Its DistributedOptimizer shards (its own)."""
    objects: tuple[ObjectShard, ...]
    written: frozenset[str]
    """Names of the shards it writes under the fully-parallel save: its optimizer shards and the model shards
    its data-parallel group assigns to it."""

    @property
    def shards(self) -> tuple[Shard, ...]:
        return self.model + self.optimizer

    @property
    def written_shards(self) -> list[Shard]:
        return [s for s in self.shards if s.name in self.written]

    @property
    def written_objects(self) -> list[ObjectShard]:
        return [o for o in self.objects if o.is_main_replica]


def _rank_shards(gpt: MegatronGPT, tp_rank: int, dp_rank: int, pp_rank: int, assigned: dict[str, int]) -> RankShards:
    optimizer = tuple(gpt.optimizer_shards(tp_rank, dp_rank, pp_rank))
    written = {s.name for s in optimizer} | {name for name, writer in assigned.items() if writer == dp_rank}
    return RankShards(gpt.rank(tp_rank, dp_rank, pp_rank), tp_rank, dp_rank, pp_rank,
                      tuple(gpt.model_shards(tp_rank, dp_rank, pp_rank)), optimizer,
                      tuple(gpt.objects(tp_rank, dp_rank, pp_rank)), frozenset(written))


def rank_shards(gpt: MegatronGPT, rank: int) -> RankShards:
    """What `rank` of the job holds and writes."""
    tp_rank, dp_rank, pp_rank = gpt.coordinates(rank)
    return _rank_shards(gpt, tp_rank, dp_rank, pp_rank, gpt.save_distribution(tp_rank, pp_rank))


def _all_rank_shards(gpt: MegatronGPT) -> Iterator[RankShards]:
    """Every rank's shards, one data-parallel group at a time (the distribution is computed once per group)."""
    for pp_rank in range(gpt.pp):
        for tp_rank in range(gpt.tp):
            assigned = gpt.save_distribution(tp_rank, pp_rank)
            for dp_rank in range(gpt.dp):
                yield _rank_shards(gpt, tp_rank, dp_rank, pp_rank, assigned)


def layout(workload: Workload, world_size: int | None = None, subset_ranks: int | None = None) -> Layout:
    """Every rank's bytes and files for one `torch_dist` save of `workload` as a Megatron GPT.

    `RankShare.bytes`: the tensor bytes the rank writes under the fully-parallel save; `resident_bytes`: the
    tensor bytes it holds (its model shards and its optimizer shards). `Layout.total_bytes`: the whole job's
    (each replicated shard once); `dlio_reported_bytes`: the state held by the ranks that run, as DLIO's
    `checkpoint_size_GB` counts its own (allocated model and optimizer bytes). `RankShare.mp_rank` is the rank
    in its model-parallel group (`dp_group_idx` of the optimizer keys). Raises `WorkloadError`.
    """
    world = workload.world_size if world_size is None else world_size
    if world is None:
        raise WorkloadError(f"workload {workload.name!r} has no world size: pass world_size=")
    count = world if subset_ranks is None else subset_ranks
    if not 1 <= count <= world:
        raise WorkloadError(f"subset_ranks = {subset_ranks!r} is not valid for a job of {world} ranks")
    gpt = MegatronGPT(workload, world)

    written: dict[int, int] = {}
    ranks: dict[int, RankShare] = {}
    for state in _all_rank_shards(gpt):
        tensors = tuple(s.tensor_spec for s in state.written_shards)
        share = sum(t.nbytes for t in tensors)
        written[state.rank] = share
        if state.rank >= count:
            continue
        files = [FileShare(distcp_file(state.rank), "sharded", tensors)] if tensors else []
        if state.rank == 0:
            files += [FileShare(name, "metadata", ()) for name in RANK0_FILES]
        ranks[state.rank] = RankShare(
            rank=state.rank, files=tuple(files), bytes=share,
            resident_bytes=sum(s.nbytes for s in state.shards),
            tp_rank=state.tp_rank, pp_rank=state.pp_rank, dp_rank=state.dp_rank,
            mp_rank=state.tp_rank + gpt.tp * state.pp_rank)
    shares = tuple(ranks[r] for r in range(count))
    return Layout(workload=workload, world_size=world, data_parallelism=gpt.dp, ranks=shares,
                  total_bytes=sum(written.values()), dlio_reported_bytes=sum(r.resident_bytes for r in shares))
