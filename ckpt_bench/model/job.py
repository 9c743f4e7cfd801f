"""A Megatron training job's checkpoint-relevant description: its model, its parallel sizes, its optimizer.

`TrainingJob.from_megatron_args` reads Megatron-LM's arguments (a Primus/Megatron experiment's merged
arguments); the world size is given when the job is laid out (`parallelism(world_size)`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ckpt_bench.model.architecture import Architecture, ArchitectureError
from ckpt_bench.model.parallel import ParallelError, Parallelism, megatron_parallel_sizes

__all__ = ["CKPT_FORMATS", "TrainingJob"]

#: Megatron-LM's `--ckpt-format` values we write, and its default.
CKPT_FORMATS = ("torch_dist", "torch")
DEFAULT_CKPT_FORMAT = "torch_dist"


@dataclass(frozen=True)
class TrainingJob:
    """The model, the parallel sizes (all but the world size), the optimizer and the checkpoint format."""

    architecture: Architecture
    tp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int | None = None
    cp: int = 1
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    stage_layer_counts: tuple[int, ...] | None = None
    virtual_stages: int | None = None
    """Model chunks per pipeline rank (Megatron-LM's virtual pipeline stages); None: one."""
    pipeline_layout: str | None = None
    """`pipeline_model_parallel_layout`, as given."""
    account_for_embedding: bool = False
    account_for_loss: bool = False
    distributed_optimizer: bool = True
    overlap_param_gather_with_optimizer_step: bool = False
    """Megatron-LM's `--overlap-param-gather-with-optimizer-step` (virtual stages, legacy format only): the first
    model chunk's dense parameters get a distributed optimizer of their own, and no chunk is bucketed."""
    overlap_grad_reduce: bool = False
    """DDP splits each gradient buffer into buckets (`--overlap-grad-reduce`): the optimizer saves per bucket."""
    ddp_bucket_size: int | None = None
    """`--ddp-bucket-size` (elements); None: megatron-core's max(40 M, 1 M x data-parallel size)."""
    optimizer_dtype: str = "fp32"
    """The optimizer's state (Adam's moments, the main parameters): fp32 in Megatron-LM unless asked otherwise."""
    ckpt_format: str = DEFAULT_CKPT_FORMAT
    """What the experiment saves with (`ckpt_format`)."""
    pp_before_dp: bool = False
    """`--use-tp-pp-dp-mapping`: ranks numbered tp-cp-ep-pp-dp (see `Parallelism`)."""

    def parallelism(self, world_size: int) -> Parallelism:
        return Parallelism(world_size=world_size, num_layers=self.architecture.num_layers, tp=self.tp, pp=self.pp,
                           ep=self.ep, etp=self.etp, cp=self.cp, first_stage_layers=self.first_stage_layers,
                           last_stage_layers=self.last_stage_layers, stage_layer_counts=self.stage_layer_counts,
                           virtual_stages=self.virtual_stages, pipeline_layout=self.pipeline_layout,
                           account_for_embedding=self.account_for_embedding, account_for_loss=self.account_for_loss,
                           mtp_num_layers=self.architecture.mtp_num_layers, pp_before_dp=self.pp_before_dp)

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "architecture": self.architecture.as_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainingJob:
        values = dict(data)
        values["architecture"] = Architecture.from_dict(values["architecture"])
        if values.get("stage_layer_counts") is not None:
            values["stage_layer_counts"] = tuple(values["stage_layer_counts"])
        return cls(**values)

    @classmethod
    def from_megatron_args(cls, args: Mapping[str, Any]) -> TrainingJob:
        """The job Megatron-LM runs for `args`; raises ArchitectureError (virtual pipeline arguments Megatron-LM
        refuses included; how the layers split is checked once the job is laid out, `parallelism`)."""
        fmt = str(args.get("ckpt_format") or DEFAULT_CKPT_FORMAT)
        if fmt not in CKPT_FORMATS:
            raise ArchitectureError(f"ckpt_format {fmt!r}: we write {' and '.join(CKPT_FORMATS)}")

        bucket = args.get("ddp_bucket_size")
        architecture = Architecture.from_megatron_args(args)
        try:
            sizes = megatron_parallel_sizes(args)
        except ParallelError as error:
            raise ArchitectureError(str(error)) from None
        sizes.pop("mtp_num_layers")  # the architecture's
        overlap_with_step = bool(args.get("overlap_param_gather_with_optimizer_step"))
        if overlap_with_step and not (args.get("use_distributed_optimizer") and args.get("overlap_param_gather")
                                      and sizes["virtual_stages"] and fmt == "torch"):
            raise ArchitectureError("overlap_param_gather_with_optimizer_step: Megatron-LM takes it only with "
                                    "use_distributed_optimizer, overlap_param_gather, virtual pipeline stages and "
                                    "ckpt_format torch")
        return cls(architecture=architecture, **sizes,
                   distributed_optimizer=bool(args.get("use_distributed_optimizer")),
                   overlap_param_gather_with_optimizer_step=overlap_with_step,
                   overlap_grad_reduce=bool(args.get("overlap_grad_reduce")),
                   ddp_bucket_size=None if bucket is None else int(bucket), ckpt_format=fmt)
