"""What every rank of a DLIO ``torch.save`` checkpoint holds and writes, computed without torch.

DLIO (argonne-lcf/dlio_benchmark, the engine behind MLPerf Storage's checkpointing benchmark) builds no model:
each rank allocates flat 1-D tensors whose lengths follow from a few formulas over the workload's transformer
shape and parallel layout, and ``torch.save``s dicts of them. This module derives the same tensors (our own
implementation of those formulas, checked tensor by tensor against DLIO at commit e1919d7), so that an engine
can allocate exactly them and write, rank by rank, the tensor bytes DLIO writes.

The formulas in words (h hidden size, f ffn hidden size, V vocabulary, L layers, kv = (h // heads) * kv_heads;
every division floors, applied one after the other in the order written):

* parameter count P = 2·V·h + L·(2h + h·(h + 2kv) + h² + 3·h·f) + h: embedding and an untied lm_head, per layer
  two norms, fused QKV, output projection, gated MLP (2·h·f) and down projection (h·f), a final norm;
* DLIO's "layers" are 0 (embedding), 1..L (blocks), L+1 (lm_head), L+2 (final norm). Blocks go to pipeline
  stages in contiguous runs, the first ``L % pp`` stages taking one more; stage 0 also holds layer 0 and the
  last stage layers L+1 and L+2;
* a layer's tensors: embedding / lm_head [h·V / tp]; final norm [h]; block [h, h·(h+2kv) / tp, h·h / tp, h,
  2·h·f / tp, h·f / tp]. With ZeRO-3 each is further divided by the data-parallel size dp. A tensor that floors
  to 0 elements is left out (its key is skipped; the others keep their index as key);
* optimizer state: six tensors [n, 5h, n, 5h, n, 5h] of the optimizer datatype, n = P // (dp·tp·pp) with
  ZeRO ≥ 1 and P // (tp·pp) without; every rank gets the same n, whatever its pipeline stage;
* rank coordinates: tp rank = r % tp, pipeline rank = (r // tp) % pp, model-parallel rank mp = r % (tp·pp),
  data-parallel rank = r // (tp·pp);
* who writes what, per save, into ``<checkpoint_folder>/global_epoch1_step<k>/``:

  - ZeRO 0: only the first data-parallel replica (rank < tp·pp) writes:
    ``zero_pp_rank_<dp>_mp_rank_<mp>_model_states.pt`` (``{layer: {index: tensor}}``) and
    ``zero_pp_rank_<dp>_mp_rank_<mp>_optim_states.pt`` (``{index: tensor}``); the other ranks hold nothing;
  - ZeRO 1 and 2: every rank writes its optimizer file; the model is written by data-parallel rank 0 alone,
    one ``layer_<i>-model_<mp>_model_states.pt`` (``{index: tensor}``) per layer when pp > 1, else one
    ``model_<mp>_model_states.pt`` (``{layer: {index: tensor}}``). ZeRO-1 ranks of dp rank > 0 do not allocate
    the model; ZeRO-2 ranks do, and write nothing of it;
  - ZeRO 3 (pp must be 1): every rank writes its model shard and its optimizer shard, named as for ZeRO 0;
  - a model that is not ``type: transformer`` and has ``model_size_bytes`` > 0 (DLIO's default is 10240!) adds
    ``model_states-<rank>.pt`` = ``{"a": int8[model_size_bytes]}`` on every writing rank, written first.

Loads read the same names from steps 1..num_checkpoints_read. Subset mode (``checkpoint.mode: subset`` with
``model.parallelism.data``; mlpstorage uses it when fewer processes run than the workload's world size) keeps the
job's data-parallel size and runs only ranks 0..N-1: they hold exactly what the same ranks of the full job hold.

Everything here is plain Python: no torch import, and the 1,024-rank llama3-1t layout takes milliseconds.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ckpt_bench.model.tensors import ParameterCounts

__all__ = [
    "CATALOG",
    "DLIO_APPLIES_FSYNC",
    "DTYPE_BYTES",
    "FileShare",
    "Layout",
    "RankShare",
    "TensorSpec",
    "Workload",
    "WorkloadError",
    "checkpoint_dir",
    "get_workload",
    "layout",
    "load_dlio_yaml",
    "num_parameters",
]

#: Bytes per element of each datatype name DLIO accepts (``model.model_datatype``, ``model.optimizer_datatype``).
DTYPE_BYTES: dict[str, int] = {"int8": 1, "uint8": 1, "fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8}

#: The torch dtype attribute for each DLIO datatype name (``getattr(torch, TORCH_DTYPE[name])``).
TORCH_DTYPE: dict[str, str] = {
    "int8": "int8",
    "uint8": "uint8",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "fp64": "float64",
}

#: Whether DLIO (commit e1919d7) fsyncs its checkpoint files when a workload asks for it: it does not. Its config
#: reader stores ``checkpoint.fsync`` as ``args.checkpoint_sync`` while the save passes ``args.checkpoint_fsync``
#: (default False), so every MLPerf llama3 run, all of which set ``fsync: True``, writes without fsync.
DLIO_APPLIES_FSYNC = False

#: DLIO's ``model.type`` for the formula-driven transformer layout.
TRANSFORMER = "transformer"


class WorkloadError(ValueError):
    """A workload, a DLIO YAML or a layout request that DLIO's checkpointing cannot run as given."""


def checkpoint_dir(step: int, epoch: int = 1) -> str:
    """The folder, under the checkpoint folder, of DLIO's save number ``step`` (1-based; DLIO's epoch is 1)."""
    return f"global_epoch{epoch}_step{step}"


# --------------------------------------------------------------------------------------------------------------
# The workload
# --------------------------------------------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Workload:
    """A DLIO checkpoint workload: model shape, parallel layout and the save/load schedule.

    Field defaults are DLIO's own defaults (``ConfigArguments``), so ``load_dlio_yaml`` of a YAML that leaves a
    key out gives what DLIO would use. Checks run in ``__post_init__`` and raise :class:`WorkloadError`.
    """

    name: str = "default"
    """The workload's name (DLIO ``model.name``; the catalog key for catalog entries)."""

    model_type: str | None = None
    """DLIO ``model.type``. Only ``"transformer"`` turns off the extra ``model_states-<rank>.pt`` file of
    ``model_size_bytes`` int8 bytes; DLIO's default is no type at all."""

    num_layers: int = -1
    """Transformer blocks (``model.num_layers``); ≤ 0 means no transformer tensors and no optimizer state."""

    hidden_size: int = 2048
    """``model.transformer.hidden_size``."""

    ffn_hidden_size: int = 8192
    """``model.transformer.ffn_hidden_size``: the gated MLP's inner size (DLIO counts 3·h·f per block)."""

    num_attention_heads: int = 32
    """``model.transformer.num_attention_heads``; the head size is ``hidden_size // num_attention_heads``,
    floored as DLIO does (MLPerf's llama3-1t has 25872 / 192 = 134.75 → 134)."""

    num_kv_heads: int = 8
    """``model.transformer.num_kv_heads``: K and V each have ``head_size * num_kv_heads`` columns."""

    vocab_size: int = 32000
    """``model.transformer.vocab_size``: embedding and lm_head are each ``vocab_size * hidden_size``."""

    model_datatype: str = "fp16"
    """Datatype of the model tensors (``model.model_datatype``): one of :data:`DTYPE_BYTES`."""

    optimizer_datatype: str = "fp32"
    """Datatype of the optimizer tensors (``model.optimizer_datatype``): one of :data:`DTYPE_BYTES`."""

    model_size_bytes: int = 10240
    """``model.model_size_bytes``: size of the single int8 tensor of a non-transformer model (DLIO default 10240).
    DLIO reads this exact key; its own unet3d YAMLs say ``model_size`` and so get 10240."""

    tensor_parallelism: int = 1
    """``model.parallelism.tensor``."""

    pipeline_parallelism: int = 1
    """``model.parallelism.pipeline``: must not exceed ``num_layers`` when there are layers."""

    zero_stage: int = 0
    """``model.parallelism.zero_stage``: 0, 1, 2 or 3 (3 needs ``pipeline_parallelism == 1``)."""

    world_size: int | None = None
    """Ranks of the whole job, a multiple of tp·pp (data-parallel size = world_size // (tp·pp)). DLIO takes it
    from ``mpirun -np``, or in subset mode from ``model.parallelism.data`` × tp × pp. None: give it to
    :func:`layout`."""

    subset: bool = False
    """DLIO ``checkpoint.mode: subset``: the YAML describes a job of ``world_size`` ranks of which only the first
    N run (``mpirun -np N``); pass ``subset_ranks=N`` to :func:`layout`."""

    num_checkpoints_write: int = -1
    """Saves per run (``checkpoint.num_checkpoints_write``); ≤ 0 means none."""

    num_checkpoints_read: int = -1
    """Loads per run (``checkpoint.num_checkpoints_read``), of saves 1..n; at most ``num_checkpoints_write``
    when that is > 0; ≤ 0 means none."""

    time_between_checkpoints: float = -1.0
    """Seconds each rank sleeps before every save and every load (``checkpoint.time_between_checkpoints``).
    DLIO sleeps the absolute value, so its default -1 sleeps 1 s."""

    fsync: bool = False
    """What the workload asks (``checkpoint.fsync``). DLIO itself never fsyncs: see :data:`DLIO_APPLIES_FSYNC`."""

    rank_sync: bool = False
    """``checkpoint.rank_sync``: a barrier after each save/load, before the rank stops its clock."""

    randomize_tensor: bool = True
    """``checkpoint.randomize_tensor``: random values (``torch.rand``/``randint``) rather than ones."""

    checkpoint_folder: str = "./checkpoints/"
    """``checkpoint.checkpoint_folder`` (DLIO strips a trailing ``/`` from the YAML's value)."""

    megatron: dict | None = None
    """The Megatron job an experiment describes (``ckpt_bench.model.job.TrainingJob.as_dict()``: its model,
    MoE, MLA and MTP included, and its parallel layout), which the Megatron engines save; None: the dense GPT
    of the fields above. DLIO's formulas describe a dense model only, so the DLIO engines refuse a job whose
    model is not one (see :func:`layout`)."""

    def __post_init__(self) -> None:
        def bad(what: str, value: object, valid: str) -> WorkloadError:
            return WorkloadError(f"workload {self.name!r}: {what} = {value!r} is not valid; {valid}")

        for attr in (
            "num_layers",
            "hidden_size",
            "ffn_hidden_size",
            "num_attention_heads",
            "num_kv_heads",
            "vocab_size",
            "model_size_bytes",
            "tensor_parallelism",
            "pipeline_parallelism",
            "zero_stage",
            "num_checkpoints_write",
            "num_checkpoints_read",
        ):
            if not _is_int(getattr(self, attr)):
                raise bad(attr, getattr(self, attr), "it must be an integer")
        for attr in ("model_datatype", "optimizer_datatype"):
            if getattr(self, attr) not in DTYPE_BYTES:
                raise bad(attr, getattr(self, attr), f"use one of {', '.join(DTYPE_BYTES)}")
        for attr in ("fsync", "rank_sync", "randomize_tensor", "subset"):
            if not isinstance(getattr(self, attr), bool):
                raise bad(attr, getattr(self, attr), "it must be true or false")
        if self.model_type is not None and not isinstance(self.model_type, str):
            raise bad("model_type", self.model_type, "it must be a string such as 'transformer', or absent")
        if not isinstance(self.time_between_checkpoints, (int, float)) or isinstance(
            self.time_between_checkpoints, bool
        ):
            raise bad("time_between_checkpoints", self.time_between_checkpoints, "it must be a number of seconds")
        for attr in ("tensor_parallelism", "pipeline_parallelism"):
            if getattr(self, attr) < 1:
                raise bad(attr, getattr(self, attr), "it must be at least 1")
        if self.zero_stage not in (0, 1, 2, 3):
            raise bad("zero_stage", self.zero_stage, "DLIO knows ZeRO stages 0, 1, 2 and 3")
        if self.num_layers > 0:
            for attr in ("hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads", "vocab_size"):
                if getattr(self, attr) < 1:
                    raise bad(attr, getattr(self, attr), "a transformer needs it to be at least 1")
            if self.num_attention_heads > self.hidden_size:
                raise bad(
                    "num_attention_heads",
                    self.num_attention_heads,
                    f"more heads than hidden_size {self.hidden_size} gives a head size of 0",
                )
            if self.num_layers < self.pipeline_parallelism:
                raise bad(
                    "pipeline_parallelism",
                    self.pipeline_parallelism,
                    f"DLIO needs at least one layer per stage: at most num_layers = {self.num_layers}",
                )
        if self.zero_stage == 3 and self.pipeline_parallelism > 1:
            raise bad("zero_stage", 3, f"DLIO refuses ZeRO-3 with pipeline_parallelism {self.pipeline_parallelism}")
        if self.model_size_bytes < 0:
            raise bad("model_size_bytes", self.model_size_bytes, "it must be ≥ 0")
        if self.num_checkpoints_write > 0 and self.num_checkpoints_read > self.num_checkpoints_write:
            raise bad(
                "num_checkpoints_read",
                self.num_checkpoints_read,
                f"DLIO reads back saves it wrote: at most num_checkpoints_write = {self.num_checkpoints_write}",
            )
        if self.world_size is not None:
            if not _is_int(self.world_size) or self.world_size < 1:
                raise bad("world_size", self.world_size, "it must be a positive integer or None")
            if self.world_size % self.model_parallelism:
                raise bad(
                    "world_size",
                    self.world_size,
                    f"it must be a multiple of tensor × pipeline parallelism = {self.model_parallelism}",
                )
        if self.subset and self.world_size is None:
            raise bad("subset", True, "subset mode needs the job's world_size (DLIO: model.parallelism.data)")
        if self.num_layers <= 0 and not self._writes_model_states:
            raise WorkloadError(
                f"workload {self.name!r} writes nothing: num_layers = {self.num_layers} gives no transformer tensors"
                f" and model_type {self.model_type!r} with model_size_bytes = {self.model_size_bytes} no"
                " model_states file; set num_layers > 0, or a non-transformer type with model_size_bytes > 0"
            )

    @property
    def model_parallelism(self) -> int:
        """tensor × pipeline parallelism: the ranks of one model replica."""
        return self.tensor_parallelism * self.pipeline_parallelism

    @property
    def _writes_model_states(self) -> bool:
        return self.model_type != TRANSFORMER and self.model_size_bytes > 0

    def replace(self, **changes: Any) -> Workload:
        """A copy with ``changes`` applied (checked again)."""
        return dataclasses.replace(self, **changes)


def num_parameters(workload: Workload) -> int:
    """The model's parameter count as DLIO counts it (0 when it has no transformer layers)."""
    w = workload
    if w.num_layers <= 0:
        return 0
    h = w.hidden_size
    kv = (h // w.num_attention_heads) * w.num_kv_heads
    per_layer = h + h * (h + 2 * kv) + h * h + h + 2 * w.ffn_hidden_size * h + w.ffn_hidden_size * h
    return 2 * w.vocab_size * h + per_layer * w.num_layers + h


# --------------------------------------------------------------------------------------------------------------
# The catalog
# --------------------------------------------------------------------------------------------------------------

# MLPerf Storage's four llama3 checkpoint workloads: the shapes and layouts of mlcommons/storage
# configs/dlio/workload/llama3_{8b,70b,405b,1t}.yaml, at the rank counts of its CLOSED division (mlpstorage
# config.py LLM_ALLOWED_VALUES; Submission_guidelines.md table 2: TP×PP×DP 1×1×8, 8×1×8, 8×32×2, 8×64×2).
# Note that MLPerf's "70B" has 128 heads (head size 64, so K/V of 512 columns), not Llama 3 70B's 64: 69.88 B
# parameters rather than 70.55 B. Its "1T" has a head size of 25872 // 192 = 134.
_MLPERF = dict(
    model_type=TRANSFORMER,
    vocab_size=128256,
    model_datatype="fp16",
    optimizer_datatype="fp32",
    num_checkpoints_write=10,
    num_checkpoints_read=10,
    time_between_checkpoints=5.0,
    fsync=True,
)

# Llama 2 7B and 70B with their real shapes (32000 vocabulary, SwiGLU, untied lm_head, RMSNorm without bias:
# DLIO's count gives their exact parameter counts, 6,738,415,616 and 68,976,648,192). The layouts are ours:
# llama2-7b uses DLIO's own llama_7b.yaml layout (TP1 PP1 ZeRO-1) on one 8-rank node; llama2-70b uses DLIO's
# llama_70b.yaml layout (TP8 PP4 ZeRO-1) with two data-parallel replicas (64 ranks).
#
# No MoE: DLIO's formulas know one dense MLP per block. Setting ffn_hidden_size to experts × expert size would
# match a MoE's parameter count, but not its tensors (one per expert, plus the router), nor expert parallelism,
# so the per-rank files would not be those of any MoE training job. Left out on purpose.
_LLAMA2 = dict(
    model_type=TRANSFORMER,
    vocab_size=32000,
    model_datatype="fp16",
    optimizer_datatype="fp32",
    num_checkpoints_write=10,
    num_checkpoints_read=10,
    time_between_checkpoints=5.0,
    fsync=True,
)

CATALOG: dict[str, Workload] = {
    "llama3-8b": Workload(
        name="llama3-8b",
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=14336,
        num_attention_heads=32,
        num_kv_heads=8,
        tensor_parallelism=1,
        pipeline_parallelism=1,
        zero_stage=3,
        world_size=8,
        checkpoint_folder="checkpoints/llama_8b",
        **_MLPERF,
    ),
    "llama3-70b": Workload(
        name="llama3-70b",
        num_layers=80,
        hidden_size=8192,
        ffn_hidden_size=28672,
        num_attention_heads=128,
        num_kv_heads=8,
        tensor_parallelism=8,
        pipeline_parallelism=1,
        zero_stage=3,
        world_size=64,
        checkpoint_folder="checkpoints/llama_70b",
        **_MLPERF,
    ),
    "llama3-405b": Workload(
        name="llama3-405b",
        num_layers=126,
        hidden_size=16384,
        ffn_hidden_size=53248,
        num_attention_heads=128,
        num_kv_heads=8,
        tensor_parallelism=8,
        pipeline_parallelism=32,
        zero_stage=1,
        world_size=512,
        checkpoint_folder="checkpoints/llama_405b",
        **_MLPERF,
    ),
    "llama3-1t": Workload(
        name="llama3-1t",
        num_layers=128,
        hidden_size=25872,
        ffn_hidden_size=98304,
        num_attention_heads=192,
        num_kv_heads=32,
        tensor_parallelism=8,
        pipeline_parallelism=64,
        zero_stage=1,
        world_size=1024,
        checkpoint_folder="checkpoints/llama_1t",
        **_MLPERF,
    ),
    "llama2-7b": Workload(
        name="llama2-7b",
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=11008,
        num_attention_heads=32,
        num_kv_heads=32,
        tensor_parallelism=1,
        pipeline_parallelism=1,
        zero_stage=1,
        world_size=8,
        checkpoint_folder="checkpoints/llama2_7b",
        **_LLAMA2,
    ),
    "llama2-70b": Workload(
        name="llama2-70b",
        num_layers=80,
        hidden_size=8192,
        ffn_hidden_size=28672,
        num_attention_heads=64,
        num_kv_heads=8,
        tensor_parallelism=8,
        pipeline_parallelism=4,
        zero_stage=1,
        world_size=64,
        checkpoint_folder="checkpoints/llama2_70b",
        **_LLAMA2,
    ),
}


def get_workload(name: str) -> Workload:
    """The catalog workload ``name`` (e.g. ``"llama3-405b"``)."""
    try:
        return CATALOG[name]
    except KeyError:
        raise WorkloadError(f"unknown workload {name!r}; the catalog has {', '.join(CATALOG)}") from None


# --------------------------------------------------------------------------------------------------------------
# The layout
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One tensor of a checkpoint file: DLIO saves flat 1-D tensors."""

    name: str
    """Its key path in the saved dict, keys joined by ``.``: ``"3.1"`` is ``state["3"]["1"]``; ``"2"`` is
    ``state["2"]``. DLIO's keys are strings (layer and tensor indices, or ``"a"``)."""

    numel: int
    """Number of elements."""

    dtype: str
    """DLIO datatype name, one of :data:`DTYPE_BYTES` (``TORCH_DTYPE[dtype]`` names the torch dtype)."""

    @property
    def shape(self) -> tuple[int]:
        """The tensor's shape: ``(numel,)``."""
        return (self.numel,)

    @property
    def nbytes(self) -> int:
        """Bytes of tensor data (numel × element size)."""
        return self.numel * DTYPE_BYTES[self.dtype]

    @property
    def torch_dtype(self) -> str:
        """The torch dtype's attribute name (``"float16"``, ``"bfloat16"``, ...)."""
        return TORCH_DTYPE[self.dtype]


@dataclass(frozen=True)
class FileShare:
    """One file a rank writes per save (and reads per load)."""

    name: str
    """File name as DLIO writes it, inside ``<checkpoint_folder>/global_epoch1_step<k>/``."""

    kind: str
    """``"model"`` (layer tensors), ``"optimizer"`` or ``"model_states"`` (a non-transformer model's bytes)."""

    tensors: tuple[TensorSpec, ...]
    """The tensors, in DLIO's dict insertion order (shared between files of the same content: do not mutate)."""

    empty_dicts: tuple[str, ...] = ()
    """Key paths of nested dicts DLIO saves empty (a layer whose every tensor floored to 0 elements)."""

    separator: str = "."
    """What joins the keys of a tensor's name (Megatron's files use "/": their keys hold dots)."""

    @cached_property
    def nbytes(self) -> int:
        """Tensor bytes of the file (torch.save adds a small pickle and zip overhead on top)."""
        return sum(t.nbytes for t in self.tensors)

    def state_tree(self) -> dict[str, Any]:
        """The file's dict structure with each tensor replaced by its :class:`TensorSpec` (for an engine that
        rebuilds the dict to ``torch.save``), keys in DLIO's insertion order."""
        tree: dict[str, Any] = {}
        for path in self.empty_dicts:
            node = tree
            for key in path.split(self.separator):
                node = node.setdefault(key, {})
        for spec in self.tensors:
            *parents, leaf = spec.name.split(self.separator)
            node = tree
            for key in parents:
                node = node.setdefault(key, {})
            node[leaf] = spec
        if self.empty_dicts and all(key.isdigit() for key in tree):
            # DLIO inserts layers in increasing order, empty ones included
            tree = {key: tree[key] for key in sorted(tree, key=int)}
        return tree


@dataclass(frozen=True)
class RankShare:
    """What one rank holds and writes per save."""

    rank: int
    """Global rank."""

    files: tuple[FileShare, ...]
    """Files it writes each save, in DLIO's order; empty for a rank that writes nothing (ZeRO 0, dp rank > 0)."""

    bytes: int
    """Tensor bytes it writes each save."""

    resident_bytes: int
    """Tensor bytes DLIO keeps allocated on it: ``bytes`` plus, with ZeRO 2 on dp rank > 0, the model it holds
    and does not write."""

    tp_rank: int
    """Tensor-parallel rank (rank % tp)."""

    pp_rank: int
    """Pipeline stage ((rank // tp) % pp)."""

    dp_rank: int
    """Data-parallel rank (rank // (tp·pp))."""

    mp_rank: int
    """Model-parallel rank (rank % (tp·pp)), the ``mp_rank`` of the file names."""

    ep_rank: int = 0
    """Expert-parallel rank (a Megatron MoE's; 0 otherwise)."""


@dataclass(frozen=True)
class RankSpread:
    """Tensor bytes per rank per save over a job: the least, the median (a rank's own value), the most, and
    the rank that writes the most (the lowest such rank)."""

    min: int
    median: int
    max: int
    largest_rank: int


@dataclass(frozen=True)
class Layout:
    """The checkpoint of a workload on a world size: per rank (all of them, or the subset that runs)."""

    workload: Workload
    """The workload laid out."""

    world_size: int
    """Ranks of the whole job."""

    data_parallelism: int
    """world_size // (tp·pp)."""

    ranks: tuple[RankShare, ...]
    """Ranks 0..N-1: all ``world_size`` of them, or the ``subset_ranks`` that run."""

    total_bytes: int
    """Tensor bytes the whole job (all ``world_size`` ranks) writes per save."""

    dlio_reported_bytes: int
    """What DLIO reports as ``checkpoint_size_GB`` (× 2**30) for a run of exactly these ranks: the allocated
    model bytes (including ZeRO-2 copies it does not write; a non-transformer's ``model_size_bytes`` instead,
    once) plus the optimizer bytes, summed over the ranks that run. DLIO divides it by rank 0's duration."""

    parameters: ParameterCounts | None = None
    """The model's total and active parameters (each once), where it is a transformer."""

    job_rank_bytes: tuple[int, ...] = ()
    """Tensor bytes each rank of the whole job writes per save, in rank order."""

    @property
    def spread(self) -> RankSpread:
        """Bytes per rank over the whole job: MoE, pipeline and ZeRO layouts give ranks different shares."""
        written = self.job_rank_bytes
        largest = max(range(len(written)), key=written.__getitem__)
        return RankSpread(min(written), statistics.median_low(written), written[largest], largest)

    @property
    def run_bytes(self) -> int:
        """Tensor bytes written per save by the ranks in :attr:`ranks`."""
        return sum(r.bytes for r in self.ranks)

    @property
    def is_subset(self) -> bool:
        """True when only the first ``len(ranks)`` of ``world_size`` ranks run."""
        return len(self.ranks) < self.world_size

    def files(self, step: int = 1) -> Iterator[tuple[int, str, FileShare]]:
        """(rank, path relative to the checkpoint folder, file) for every file of save number ``step``."""
        folder = checkpoint_dir(step)
        for share in self.ranks:
            for f in share.files:
                yield share.rank, f"{folder}/{f.name}", f


def _layer_range(pp_rank: int, num_layers: int, pp: int) -> tuple[int, int]:
    """DLIO's inclusive layer range of a pipeline stage (0 = embedding, L+1 = lm_head, L+2 = final norm)."""
    per_stage, remainder = divmod(num_layers, pp)
    if pp_rank < remainder:
        start = pp_rank * (per_stage + 1) + 1
        end = start + per_stage
    else:
        start = remainder * (per_stage + 1) + (pp_rank - remainder) * per_stage + 1
        end = start + per_stage - 1
    if pp_rank == pp - 1:
        end = num_layers + 2
    if pp_rank == 0:
        start = 0
    return start, end


def _layer_numels(w: Workload, layer: int, dp: int) -> list[int]:
    """Element counts of one layer's tensors on one rank, DLIO's order and floor divisions."""
    h, tp = w.hidden_size, w.tensor_parallelism
    shard = dp if w.zero_stage == 3 else 1
    if layer == 0 or layer == w.num_layers + 1:  # embedding, lm_head
        return [h * w.vocab_size // tp // shard]
    if layer == w.num_layers + 2:  # final norm
        return [h // shard]
    kv = (h // w.num_attention_heads) * w.num_kv_heads
    f = w.ffn_hidden_size
    return [
        h // shard,  # input norm
        h * (h + 2 * kv) // tp // shard,  # fused QKV
        h * h // tp // shard,  # attention output
        h // shard,  # post-attention norm
        h * 2 * f // tp // shard,  # gated MLP in
        h * f // tp // shard,  # MLP out
    ]


def _layer_tensors(w: Workload, layer: int, dp: int, prefix: str) -> tuple[tuple[TensorSpec, ...], bool]:
    numels = _layer_numels(w, layer, dp)
    specs = tuple(
        TensorSpec(f"{prefix}{index}", numel, w.model_datatype) for index, numel in enumerate(numels) if numel > 0
    )
    return specs, not specs


def _optimizer_tensors(w: Workload, dp: int) -> tuple[TensorSpec, ...]:
    if w.num_layers <= 0:
        return ()
    divisor = dp * w.model_parallelism if w.zero_stage > 0 else w.model_parallelism
    n = num_parameters(w) // divisor
    if n <= 0:
        return ()
    numels = [n, 5 * w.hidden_size] * 3
    return tuple(TensorSpec(str(i), numel, w.optimizer_datatype) for i, numel in enumerate(numels) if numel > 0)


@dataclass
class _Stage:
    """What every rank of one pipeline stage holds: computed once per stage, shared by its ranks."""

    layers: list[int]
    per_layer: list[tuple[tuple[TensorSpec, ...], bool]]  # flat keys ("i"): the per-layer files (ZeRO 1/2, pp > 1)
    nested: tuple[TensorSpec, ...]  # nested keys ("layer.i"): the one-file model
    nested_empty: tuple[str, ...]
    model_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.model_bytes = sum(t.nbytes for t in self.nested)


def _stage(w: Workload, pp_rank: int, dp: int) -> _Stage:
    if w.num_layers <= 0:
        return _Stage([], [], (), ())
    start, end = _layer_range(pp_rank, w.num_layers, w.pipeline_parallelism)
    layers = list(range(start, end + 1))
    per_layer = [_layer_tensors(w, layer, dp, "") for layer in layers]
    nested: list[TensorSpec] = []
    empty: list[str] = []
    for layer in layers:
        specs, is_empty = _layer_tensors(w, layer, dp, f"{layer}.")
        nested.extend(specs)
        if is_empty:
            empty.append(str(layer))
    return _Stage(layers, per_layer, tuple(nested), tuple(empty))


def _refuse_beyond_dlio(workload: Workload) -> None:
    """DLIO's formulas know one dense MLP and standard attention per block: a MoE's experts and router, MLA's
    projections, MTP layers have no honest place in its files, so such a model is refused, not approximated."""
    from ckpt_bench.model.job import TrainingJob

    arch = TrainingJob.from_dict(workload.megatron).architecture
    beyond = [what for what, present in (("experts", arch.moe), ("multi-latent attention", arch.mla),
                                         ("MTP layers", arch.mtp_num_layers)) if present]
    if beyond:
        raise WorkloadError(
            f"workload {workload.name!r} is a {arch.kind} model: DLIO's formulas (the torch-save and dcp engines) "
            f"know one dense MLP and standard attention per block and cannot express its {' and '.join(beyond)}; "
            "use --engine torch_dist or --engine torch (Megatron-LM's own formats)")


def layout(workload: Workload, world_size: int | None = None, subset_ranks: int | None = None) -> Layout:
    """Every rank's files and tensors for one save of ``workload``.

    ``world_size``: ranks of the whole job (default ``workload.world_size``); it must be a multiple of tp·pp.
    ``subset_ranks``: lay out only ranks 0..N-1 of that job, as DLIO's subset mode runs them (they hold what the
    same ranks of the full job hold); :attr:`Layout.total_bytes` still counts the whole job.
    """
    w = workload
    if w.megatron is not None:
        _refuse_beyond_dlio(w)
    world = w.world_size if world_size is None else world_size
    if world is None:
        raise WorkloadError(
            f"workload {w.name!r} has no world size: pass world_size= (DLIO takes it from mpirun -np),"
            f" a multiple of tensor × pipeline parallelism = {w.model_parallelism}"
        )
    if not _is_int(world) or world < 1:
        raise WorkloadError(f"world_size = {world!r} is not valid; it must be a positive integer")
    mp = w.model_parallelism
    if world % mp:
        lower, upper = (world // mp) * mp, (world // mp + 1) * mp
        near = f"{lower} or {upper}" if lower else f"{upper}"
        raise WorkloadError(
            f"world_size = {world} cannot hold workload {w.name!r}: it must be a multiple of tensor × pipeline"
            f" parallelism = {w.tensor_parallelism} × {w.pipeline_parallelism} = {mp} (e.g. {near})"
        )
    count = world if subset_ranks is None else subset_ranks
    if not _is_int(count) or not 1 <= count <= world:
        raise WorkloadError(
            f"subset_ranks = {subset_ranks!r} is not valid for a job of {world} ranks; it must be 1..{world}"
        )

    dp = world // mp
    tp, pp, zero = w.tensor_parallelism, w.pipeline_parallelism, w.zero_stage
    stages = [_stage(w, p, dp) for p in range(pp)]
    optimizer = _optimizer_tensors(w, dp)
    optimizer_bytes = sum(t.nbytes for t in optimizer)
    states = (TensorSpec("a", w.model_size_bytes, "int8"),) if w._writes_model_states else ()
    states_bytes = w.model_size_bytes if states else 0

    def rank_bytes(rank: int) -> tuple[int, int, int, int]:
        """(written, resident, allocated model, optimizer) tensor bytes of ``rank``."""
        if zero == 0 and rank >= mp:
            return 0, 0, 0, 0
        stage = stages[(rank // tp) % pp]
        dp_rank = rank // mp
        holds_model = not (zero == 1 and dp_rank != 0)
        writes_model = dp_rank == 0 if zero in (1, 2) else True
        model = stage.model_bytes if holds_model else 0
        written = states_bytes + (stage.model_bytes if writes_model else 0) + optimizer_bytes
        return written, states_bytes + model + optimizer_bytes, model, optimizer_bytes

    totals = [rank_bytes(r) for r in range(world)]
    total_bytes = sum(t[0] for t in totals)
    run = totals[:count]
    model_reported = states_bytes if states else sum(t[2] for t in run)
    reported = model_reported + sum(t[3] for t in run)

    ranks: list[RankShare] = []
    for rank in range(count):
        tp_rank, pp_rank, dp_rank, mp_rank = rank % tp, (rank // tp) % pp, rank // mp, rank % mp
        written, resident = totals[rank][:2]
        files: list[FileShare] = []
        if not (zero == 0 and rank >= mp):
            stage = stages[pp_rank]
            if states:
                files.append(FileShare(f"model_states-{rank}.pt", "model_states", states))
            if stage.layers:
                if zero in (1, 2):
                    if dp_rank == 0:
                        if pp > 1:
                            for layer, (specs, _) in zip(stage.layers, stage.per_layer, strict=True):
                                files.append(
                                    FileShare(f"layer_{layer}-model_{mp_rank}_model_states.pt", "model", specs)
                                )
                        else:
                            files.append(
                                FileShare(f"model_{mp_rank}_model_states.pt", "model", stage.nested, stage.nested_empty)
                            )
                else:
                    files.append(
                        FileShare(
                            f"zero_pp_rank_{dp_rank}_mp_rank_{mp_rank}_model_states.pt",
                            "model",
                            stage.nested,
                            stage.nested_empty,
                        )
                    )
            if optimizer:
                files.append(
                    FileShare(f"zero_pp_rank_{dp_rank}_mp_rank_{mp_rank}_optim_states.pt", "optimizer", optimizer)
                )
        ranks.append(RankShare(rank, tuple(files), written, resident, tp_rank, pp_rank, dp_rank, mp_rank))

    return Layout(
        workload=w,
        world_size=world,
        data_parallelism=dp,
        ranks=tuple(ranks),
        total_bytes=total_bytes,
        dlio_reported_bytes=reported,
        parameters=ParameterCounts(num_parameters(w), num_parameters(w)) if w.num_layers > 0 else None,
        job_rank_bytes=tuple(t[0] for t in totals),
    )


# --------------------------------------------------------------------------------------------------------------
# DLIO workload YAML
# --------------------------------------------------------------------------------------------------------------

# Keys whose values make the Workload, by dotted path -> Workload field.
_READ: dict[str, str] = {
    "model.name": "name",
    "model.type": "model_type",
    "model.num_layers": "num_layers",
    "model.model_datatype": "model_datatype",
    "model.optimizer_datatype": "optimizer_datatype",
    "model.model_size_bytes": "model_size_bytes",
    "model.parallelism.tensor": "tensor_parallelism",
    "model.parallelism.pipeline": "pipeline_parallelism",
    "model.parallelism.zero_stage": "zero_stage",
    "model.transformer.vocab_size": "vocab_size",
    "model.transformer.hidden_size": "hidden_size",
    "model.transformer.ffn_hidden_size": "ffn_hidden_size",
    "model.transformer.num_attention_heads": "num_attention_heads",
    "model.transformer.num_kv_heads": "num_kv_heads",
    "checkpoint.checkpoint_folder": "checkpoint_folder",
    "checkpoint.num_checkpoints_write": "num_checkpoints_write",
    "checkpoint.num_checkpoints_read": "num_checkpoints_read",
    "checkpoint.time_between_checkpoints": "time_between_checkpoints",
    "checkpoint.fsync": "fsync",
    "checkpoint.rank_sync": "rank_sync",
    "checkpoint.randomize_tensor": "randomize_tensor",
}

# Keys read and checked but not stored as such: the mode they select is the only one ckpt-bench reproduces.
_CHECKED = (
    "framework",  # must be pytorch (DLIO's default is tensorflow: a different checkpoint engine)
    "workflow.checkpoint",  # must be true
    "workflow.train",  # must be false: DLIO's default true trains on data and checkpoints per epoch instead
    "model.parallelism.data",  # subset mode's data-parallel size -> world_size
    "checkpoint.mode",  # default | subset
    "storage.storage_type",  # local_fs only (s3 switches DLIO to its S3 checkpoint engine)
)

# Keys DLIO reads that change neither what a checkpoint-only run writes nor when it is timed: accepted and
# ignored. Data loading, training and evaluation (DLIO skips them when workflow.train is false), outputs,
# profiling, the training-loop checkpoint cadence, KSM page merging (host memory only), ``checkpoint.type``
# (read, used nowhere) and ``checkpoint.recovery_rank_shift`` (DLIO stores it under a misspelt attribute, so
# it never takes effect).
_IGNORED_SECTIONS = {
    "dataset": (
        "record_length_bytes record_length_bytes_stdev record_length_bytes_resize num_files_train num_files_eval"
        " generation_buffer_size num_samples_per_file data_folder num_subfolders_train num_subfolders_eval"
        " enable_chunking chunk_size compression compression_level file_prefix format keep_files"
        " record_element_bytes record_element_type record_dims hdf5.chunk_dims hdf5.num_dset_per_record"
        " hdf5.max_shape"
    ),
    "reader": (
        "dont_use_mmap reader_classname multiprocessing_context data_loader data_loader_classname"
        " data_loader_sampler read_threads computation_threads batch_size batch_size_eval prefetch_size"
        " file_shuffle file_access shuffle_size sample_shuffle read_type transfer_size odirect preprocess_time"
        " preprocess_time_stdev pin_memory transformed_record_dims transformed_record_element_type"
    ),
    "train": "epochs total_training_steps seed_change_epoch computation_time computation_time_stdev seed",
    "evaluation": "eval_time eval_time_stdev eval_after_epoch epochs_between_evals",
    "output": "folder log_file metric.exclude_start_steps metric.exclude_end_steps",
    "profiling": "profiler iostat_devices",
    "metric": "au",
    "workflow": "generate_data evaluation profiling",
    "storage": "storage_root storage_options",
    "checkpoint": (
        "checkpoint_after_epoch epochs_between_checkpoints steps_between_checkpoints type recovery_rank_shift"
        " ksm ksm.madv_mergeable_id ksm.high_ram_trigger ksm.low_ram_exit ksm.await_time"
    ),
}
_IGNORED: set[str] = {f"{section}.{key}" for section, keys in _IGNORED_SECTIONS.items() for key in keys.split()}
_IGNORED |= {f"data_reader.{key}" for key in _IGNORED_SECTIONS["reader"].split()}
# Values that may be mappings of their own (distributions, options): taken whole.
_OPAQUE = {
    "train.computation_time",
    "reader.preprocess_time",
    "data_reader.preprocess_time",
    "evaluation.eval_time",
    "storage.storage_options",
    "checkpoint.time_between_checkpoints",
}

# Keys DLIO reads that ckpt-bench refuses, with the reason.
_REFUSED: dict[str, str] = {
    "model.layer_parameters": "DLIO's legacy fixed layer sizes: every layer then shares one dict of int8 tensors,"
    " which torch.save writes once per file; not reproduced, use model.transformer.*",
    "model.optimization_groups": "DLIO's legacy fixed optimizer groups (int8 'a'/'b' pairs and a 'combined'"
    " tensor); not reproduced, use model.transformer.*",
    "checkpoint.checkpoint_mechanism_classname": "a custom DLIO checkpointing class writes whatever it wants;"
    " only DLIO's own torch.save engine is reproduced",
}

_KNOWN_SECTIONS = ("model", "framework", "workflow", "checkpoint", "storage", *_IGNORED_SECTIONS, "data_reader")


def _flatten(node: Mapping[str, Any], prefix: str, out: dict[str, Any], where: str) -> None:
    for key, value in node.items():
        if not isinstance(key, str):
            raise WorkloadError(f"{where}: key {key!r} under {prefix or 'the top level'} is not a string")
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and path not in _OPAQUE:
            _flatten(value, f"{path}.", out, where)
        else:
            out[path] = value


def _readable_keys(section: str) -> list[str]:
    known = [*_READ, *_CHECKED, *_IGNORED]
    return sorted(k for k in known if k == section or k.startswith(f"{section}."))


def load_dlio_yaml(path: str | Path, *, world_size: int | None = None) -> Workload:
    """The :class:`Workload` of a DLIO workload YAML (the file under DLIO's ``configs/workload/``), unchanged.

    The rule: ckpt-bench reproduces DLIO's checkpoint-only run, so the YAML must say ``workflow.checkpoint: true``
    and ``workflow.train: false`` (DLIO's default for ``train`` is true, which runs a training loop over a data
    set and checkpoints per epoch instead) and ``framework: pytorch``. Given that, every key DLIO reads for data
    loading, training, evaluation, profiling or output (``dataset.*``, ``reader.*``, ``train.*``, ...) is
    accepted and ignored: DLIO does not use them in that run. Every other key must be one DLIO reads for
    checkpointing (``model.*``, ``model.parallelism.*``, ``model.transformer.*``, ``checkpoint.*``); a key DLIO
    does not read at all (``model.model_size``, a typo) raises :class:`WorkloadError` naming it and the keys
    read, and so do the DLIO keys listed in ``_REFUSED``. Keys left out take DLIO's defaults.

    Subset mode (``checkpoint.mode: subset`` with ``model.parallelism.data``) sets ``world_size`` to
    data × tensor × pipeline and ``subset=True``; give the ranks that run to :func:`layout`. ``world_size`` here
    (DLIO: ``mpirun -np``) sets it for the default mode.
    """
    import yaml  # pyyaml; imported here so the module imports with the standard library alone

    where = str(path)
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
    except OSError as exc:
        raise WorkloadError(f"cannot read DLIO workload YAML {where}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise WorkloadError(f"{where} is not valid YAML: {exc}") from exc
    if not isinstance(document, Mapping):
        raise WorkloadError(f"{where}: a DLIO workload YAML is a mapping (model:, checkpoint:, ...), got {document!r}")

    flat: dict[str, Any] = {}
    _flatten(document, "", flat, where)

    for key, value in flat.items():
        if key in _REFUSED:
            raise WorkloadError(f"{where}: {key} is not supported: {_REFUSED[key]}")
        if key in _READ or key in _CHECKED or key in _IGNORED:
            continue
        section = key.split(".")[0]
        if section in _KNOWN_SECTIONS:
            readable = _readable_keys(section)
            if section == "data_reader":
                readable = _readable_keys("reader")
            raise WorkloadError(
                f"{where}: unknown key {key} (= {value!r}): DLIO does not read it, so it would be silently"
                f" ignored. Keys read under {section}: {', '.join(readable)}"
            )
        raise WorkloadError(
            f"{where}: unknown key {key}: DLIO reads no {section!r} section. Sections read:"
            f" {', '.join(sorted(set(_KNOWN_SECTIONS)))}"
        )

    framework = flat.get("framework", "tensorflow")
    if framework != "pytorch":
        raise WorkloadError(
            f"{where}: framework = {framework!r}{' (DLIO default)' if 'framework' not in flat else ''}; only"
            " framework: pytorch (DLIO's torch.save checkpointing) is reproduced"
        )
    if flat.get("workflow.checkpoint") is not True:
        raise WorkloadError(
            f"{where}: workflow.checkpoint = {flat.get('workflow.checkpoint')!r}; a checkpoint workload needs"
            " workflow.checkpoint: True"
        )
    if flat.get("workflow.train", True) is not False:
        shown = f"= {flat['workflow.train']!r}" if "workflow.train" in flat else "is absent (DLIO's default: True)"
        raise WorkloadError(
            f"{where}: workflow.train {shown}: DLIO would train over a data set and checkpoint per epoch;"
            " ckpt-bench reproduces its checkpoint-only run: set workflow.train: False"
        )
    storage = flat.get("storage.storage_type", "local_fs")
    if storage != "local_fs":
        raise WorkloadError(
            f"{where}: storage.storage_type = {storage!r}; only local_fs (DLIO's torch.save to files) is reproduced"
        )

    values: dict[str, Any] = {field_name: flat[key] for key, field_name in _READ.items() if key in flat}
    if isinstance(values.get("time_between_checkpoints"), Mapping):
        raise WorkloadError(
            f"{where}: checkpoint.time_between_checkpoints = {values['time_between_checkpoints']!r}: only a number"
            " of seconds is supported (DLIO also accepts a random distribution)"
        )
    if isinstance(values.get("checkpoint_folder"), str):
        values["checkpoint_folder"] = values["checkpoint_folder"].rstrip("/")
    if isinstance(values.get("time_between_checkpoints"), int) and not isinstance(
        values.get("time_between_checkpoints"), bool
    ):
        values["time_between_checkpoints"] = float(values["time_between_checkpoints"])

    mode = flat.get("checkpoint.mode", "default")
    data = flat.get("model.parallelism.data")
    if mode not in ("default", "subset"):
        raise WorkloadError(f"{where}: checkpoint.mode = {mode!r}; DLIO knows default and subset")
    if mode == "default" and data is not None:
        raise WorkloadError(
            f"{where}: model.parallelism.data = {data!r} with checkpoint.mode default: DLIO refuses it (it derives"
            " the data-parallel size from the number of ranks); set checkpoint.mode: subset or remove it"
        )
    if mode == "subset":
        if not _is_int(data) or data <= 0:
            raise WorkloadError(
                f"{where}: checkpoint.mode subset needs model.parallelism.data, the full job's data-parallel size"
                f" (got {data!r})"
            )
        tp = values.get("tensor_parallelism", 1)
        pp = values.get("pipeline_parallelism", 1)
        if not (_is_int(tp) and _is_int(pp)):
            raise WorkloadError(f"{where}: model.parallelism.tensor/pipeline must be integers (got {tp!r}, {pp!r})")
        if world_size is not None and world_size != data * tp * pp:
            raise WorkloadError(
                f"{where}: world_size = {world_size} contradicts subset mode's data × tensor × pipeline ="
                f" {data} × {tp} × {pp} = {data * tp * pp}"
            )
        values["world_size"] = data * tp * pp
        values["subset"] = True
    elif world_size is not None:
        values["world_size"] = world_size

    try:
        return Workload(**values)
    except WorkloadError as exc:
        raise WorkloadError(f"{where}: {exc}") from None
