"""A checkpoint workload: a model's shape, its parallel layout and the save/load schedule, with DLIO's
defaults and checks; the parameter count DLIO's formulas give. Plain Python (no torch).

The fields are DLIO's (``model.*``, ``checkpoint.*``), so a DLIO workload YAML (`dlio_yaml`), a catalog entry
(`catalog`) and a Primus/Megatron experiment (`sources`, with its Megatron job in ``Workload.megatron``) are
all one `Workload`; the layouts (`dlio_layout`, `megatron_shapes`, `megatron_torch`) derive what each rank
writes from it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DLIO_APPLIES_FSYNC",
    "DLIO_DATATYPES",
    "DTYPE_BYTES",
    "TORCH_DTYPE",
    "TRANSFORMER",
    "Workload",
    "WorkloadError",
    "is_int",
    "num_parameters",
]

#: The datatype names DLIO accepts (``model.model_datatype``, ``model.optimizer_datatype``).
DLIO_DATATYPES = ("int8", "uint8", "fp16", "bf16", "fp32", "fp64")

#: Bytes per element of each datatype name: DLIO's, and int16 (megatron-core's bf16 main-parameter remainders).
DTYPE_BYTES: dict[str, int] = {"int8": 1, "uint8": 1, "fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8, "int16": 2}

#: The torch dtype attribute for each datatype name (``getattr(torch, TORCH_DTYPE[name])``).
TORCH_DTYPE: dict[str, str] = {
    "int8": "int8",
    "uint8": "uint8",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "fp64": "float64",
    "int16": "int16",
}

#: Whether DLIO (commit e1919d7) fsyncs its checkpoint files when a workload asks for it: it does not. Its config
#: reader stores ``checkpoint.fsync`` as ``args.checkpoint_sync`` while the save passes ``args.checkpoint_fsync``
#: (default False), so every MLPerf llama3 run, all of which set ``fsync: True``, writes without fsync.
DLIO_APPLIES_FSYNC = False

#: DLIO's ``model.type`` for the formula-driven transformer layout.
TRANSFORMER = "transformer"


class WorkloadError(ValueError):
    """A workload, a DLIO YAML or a layout request that DLIO's checkpointing cannot run as given."""


def is_int(value: object) -> bool:
    """An int that is not a bool (YAML's ``true`` is no layer count)."""
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
    """Datatype of the model tensors (``model.model_datatype``): one of :data:`DLIO_DATATYPES`."""

    optimizer_datatype: str = "fp32"
    """Datatype of the optimizer tensors (``model.optimizer_datatype``): one of :data:`DLIO_DATATYPES`."""

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
    N run (``mpirun -np N``); pass ``run_ranks=range(N)`` to :func:`layout`."""

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
    of the fields above. DLIO's formulas describe a dense model only, so the torch-save engine refuses a job
    whose model is not one (``dlio_layout.layout``); dcp saves this job's sharded state (:attr:`state`)."""

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
            if not is_int(getattr(self, attr)):
                raise bad(attr, getattr(self, attr), "it must be an integer")
        for attr in ("model_datatype", "optimizer_datatype"):
            if getattr(self, attr) not in DLIO_DATATYPES:
                raise bad(attr, getattr(self, attr), f"use one of {', '.join(DLIO_DATATYPES)}")
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
            if not is_int(self.world_size) or self.world_size < 1:
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
    def state(self) -> str:
        """Whose checkpoint state the workload describes: "megatron", the sharded state of the Megatron job it
        holds (`megatron`: an experiment's; "megatron_fsdp2" where it trains under FSDP2), or "dlio", DLIO's
        per-rank tensors (a DLIO YAML, the catalog).
        An engine that can save either saves this one (`engines.saved_state`)."""
        if self.megatron is None:
            return "dlio"
        return "megatron_fsdp2" if self.megatron.get("fsdp") == "torch_fsdp2" else "megatron"

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
