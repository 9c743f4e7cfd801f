"""A Megatron training job's checkpoint-relevant description: its model, its parallel sizes, its optimizer.

`TrainingJob.from_megatron_args` reads Megatron-LM's arguments (a Primus/Megatron experiment's merged
arguments); the world size is given when the job is laid out (`parallelism(world_size)`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ckpt_bench.model.architecture import Architecture, ArchitectureError
from ckpt_bench.model.checkpointing import CheckpointSettings
from ckpt_bench.model.parallel import ParallelError, Parallelism, megatron_parallel_sizes

__all__ = ["CKPT_FORMATS", "PrecisionAwareOptimizer", "TrainingJob"]

#: Megatron-LM's `--ckpt-format` values we write (torch_dcp: under FSDP2 only), and its default.
CKPT_FORMATS = ("torch_dist", "torch", "torch_dcp")
DEFAULT_CKPT_FORMAT = "torch_dist"

#: Megatron-LM's choices for the precision-aware optimizer's dtypes (`--main-grads-dtype`, ...).
_PRECISION_DTYPES = {"main_grads_dtype": ("fp32", "bf16"), "main_params_dtype": ("fp32", "fp16"),
                     "exp_avg_dtype": ("fp32", "fp16", "bf16", "fp8"),
                     "exp_avg_sq_dtype": ("fp32", "fp16", "bf16", "fp8")}


@dataclass(frozen=True)
class PrecisionAwareOptimizer:
    """Megatron-LM's `--use-precision-aware-optimizer`: Transformer Engine's FusedAdam keeps Adam's moments (and
    the main parameters) in the dtypes asked for; what a checkpoint holds of them is `TrainingJob.
    distributed_states`."""

    exp_avg_dtype: str = "fp32"
    exp_avg_sq_dtype: str = "fp32"
    main_params_dtype: str = "fp32"
    fused_adam_main_params: bool = True
    """FusedAdam holds the main parameters (megatron-core's `use_precision_aware_optimizer_no_fp8_or_ds_fp8`:
    main_params_dtype other than fp32, or no fp8 recipe but delayed scaling); else megatron-core keeps them in
    fp32 and FusedAdam only the moments."""


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
    precision_aware_optimizer: PrecisionAwareOptimizer | None = None
    """`--use-precision-aware-optimizer`'s dtypes; None without it."""
    grad_dtype: str | None = None
    """The gradient buffers' dtype (the second of the optimizer's `dtype_(param, grad)` keys); None: Megatron-LM's
    default for the weights' dtype."""
    ckpt_format: str = DEFAULT_CKPT_FORMAT
    """What the experiment saves with (`ckpt_format`)."""
    pp_before_dp: bool = False
    """`--use-tp-pp-dp-mapping`: ranks numbered tp-cp-ep-pp-dp (see `Parallelism`)."""
    fsdp: str | None = None
    """"torch_fsdp2" (`--use-torch-fsdp2`: every parameter and its optimizer state sharded over the data-parallel
    ranks, `layout/megatron_fsdp2.py`); None: megatron-core's DDP."""
    checkpointing: CheckpointSettings = dataclasses.field(default_factory=CheckpointSettings)
    """How it saves and restarts (fully parallel save and load, constant structure, async, retention), each
    setting with its source."""

    def parallelism(self, world_size: int) -> Parallelism:
        return Parallelism(world_size=world_size, num_layers=self.architecture.num_layers, tp=self.tp, pp=self.pp,
                           ep=self.ep, etp=self.etp, cp=self.cp, first_stage_layers=self.first_stage_layers,
                           last_stage_layers=self.last_stage_layers, stage_layer_counts=self.stage_layer_counts,
                           virtual_stages=self.virtual_stages, pipeline_layout=self.pipeline_layout,
                           account_for_embedding=self.account_for_embedding, account_for_loss=self.account_for_loss,
                           mtp_num_layers=self.architecture.mtp_num_layers, pp_before_dp=self.pp_before_dp)

    @property
    def distributed_states(self) -> tuple[tuple[str, str], ...]:
        """(state, dtype) of what the distributed optimizer's `torch_dist` save holds per buffer, in megatron-core's
        order (`_get_main_param_and_optimizer_states`, core_v0.16.1 distrib_optimizer.py 883-909, saved by
        `sharded_param_state_dp_reshardable` in each tensor's own dtype). With FusedAdam holding the main
        parameters its `get_unscaled_state` returns the moments in fp32 whatever they are kept in, and bf16
        weights' fp32 main parameters as the int16 remainder their bf16 copy lacks (`store_param_remainders`,
        megatron-core's default with Transformer Engine 2.1 or later, used for fp32 main parameters only);
        with megatron-core holding them, FusedAdam's moments are saved as kept. The legacy format's
        `distrib_optim.pt` gathers every state into fp32 buffers (`get_parameter_state_dp_zero`)."""
        precision = self.precision_aware_optimizer
        if precision is None:
            return tuple((state, self.optimizer_dtype) for state in ("param", "exp_avg", "exp_avg_sq"))
        if not precision.fused_adam_main_params:
            return (("param", "fp32"), ("exp_avg", precision.exp_avg_dtype),
                    ("exp_avg_sq", precision.exp_avg_sq_dtype))
        remainders = self.architecture.params_dtype == "bf16" and precision.main_params_dtype == "fp32"
        return ("exp_avg", "fp32"), ("exp_avg_sq", "fp32"), ("param", "int16" if remainders else "fp32")

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "architecture": self.architecture.as_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainingJob:
        values = dict(data)
        values["architecture"] = Architecture.from_dict(values["architecture"])
        if values.get("stage_layer_counts") is not None:
            values["stage_layer_counts"] = tuple(values["stage_layer_counts"])
        if values.get("precision_aware_optimizer") is not None:
            values["precision_aware_optimizer"] = PrecisionAwareOptimizer(**values["precision_aware_optimizer"])
        if values.get("checkpointing") is not None:
            values["checkpointing"] = CheckpointSettings.from_dict(values["checkpointing"])
        return cls(**values)

    @classmethod
    def from_megatron_args(cls, args: Mapping[str, Any],
                           origin: Callable[[str], str | None] = lambda key: None) -> TrainingJob:
        """The job Megatron-LM runs for `args` (`origin(key)`: the file that set an argument, for the checkpoint
        settings' sources); raises ArchitectureError (virtual pipeline arguments Megatron-LM
        refuses included; how the layers split is checked once the job is laid out, `parallelism`)."""
        fmt = str(args.get("ckpt_format") or DEFAULT_CKPT_FORMAT)
        fsdp = _fsdp(args, fmt)
        if fmt not in CKPT_FORMATS:
            raise ArchitectureError(f"ckpt_format {fmt!r}: we write {', '.join(CKPT_FORMATS)}")

        bucket = args.get("ddp_bucket_size")
        architecture = Architecture.from_megatron_args(args)
        try:
            sizes = megatron_parallel_sizes(args)
        except ParallelError as error:
            raise ArchitectureError(str(error)) from None
        sizes.pop("mtp_num_layers")  # the architecture's
        refused = expert_bias_refusal(architecture.moe is not None, architecture.add_bias_linear,
                                      sizes["etp"] or sizes["tp"])
        if refused:
            raise ArchitectureError(refused)
        overlap_with_step = bool(args.get("overlap_param_gather_with_optimizer_step"))
        if overlap_with_step and not (args.get("use_distributed_optimizer") and args.get("overlap_param_gather")
                                      and sizes["virtual_stages"] and fmt == "torch"):
            raise ArchitectureError("overlap_param_gather_with_optimizer_step: Megatron-LM takes it only with "
                                    "use_distributed_optimizer, overlap_param_gather, virtual pipeline stages and "
                                    "ckpt_format torch")
        precision = _precision_aware_optimizer(args)
        return cls(architecture=architecture, **sizes,
                   distributed_optimizer=bool(args.get("use_distributed_optimizer")),
                   precision_aware_optimizer=precision,
                   grad_dtype=_grad_dtype(args, architecture.params_dtype),
                   overlap_param_gather_with_optimizer_step=overlap_with_step,
                   overlap_grad_reduce=bool(args.get("overlap_grad_reduce")),
                   ddp_bucket_size=None if bucket is None else int(bucket), ckpt_format=fmt, fsdp=fsdp,
                   checkpointing=_checkpointing(args, origin))


def _checkpointing(args: Mapping[str, Any], origin: Callable[[str], str | None]) -> CheckpointSettings:
    try:
        return CheckpointSettings.from_megatron_args(args, origin)
    except (ValueError, TypeError) as error:
        raise ArchitectureError(str(error)) from None


def _fsdp(args: Mapping[str, Any], fmt: str) -> str | None:
    """Which fully sharded data parallelism `args` train with, as Megatron-LM 0.16.1's validate_args takes it
    (arguments.py 605-617, 671-691, 1041-1050); Megatron-FSDP's checkpoint is refused, never sized as another."""
    if args.get("use_megatron_fsdp") or fmt == "fsdp_dtensor":
        raise ArchitectureError("use_megatron_fsdp (ckpt_format fsdp_dtensor): Megatron-FSDP's checkpoint (its flat, "
                                "bucketed DTensor buffers) is not modelled, so it is not sized rather than sized as "
                                "another layout")
    if args.get("use_torch_fsdp2"):
        if fmt not in ("torch_dist", "torch_dcp"):
            raise ArchitectureError(f"use_torch_fsdp2 with ckpt_format {fmt!r}: Megatron-LM takes torch_dist or "
                                    "torch_dcp with it")
        return "torch_fsdp2"
    if fmt == "torch_dcp":
        raise ArchitectureError("ckpt_format torch_dcp: Megatron-LM takes it only with use_torch_fsdp2")
    return None


def expert_bias_refusal(moe: bool, add_bias_linear: bool, expert_tp: int) -> str | None:
    """Why megatron-core's TransformerConfig refuses biases in experts at this expert tensor parallel size (it
    asserts "Bias in Moe is only supported when ETP==1"); None where it takes them."""
    if not (moe and add_bias_linear and expert_tp > 1):
        return None
    return (f"num_experts with add_bias_linear (Megatron-LM's default) at expert tensor parallel size {expert_tp} "
            "(expert_tensor_parallel_size, default TP): megatron-core takes biases in experts only at 1; set "
            "add_bias_linear=false, as MoE models do, or expert_tensor_parallel_size=1")


def _precision_aware_optimizer(args: Mapping[str, Any]) -> PrecisionAwareOptimizer | None:
    """The precision-aware optimizer `args` ask for, refused where megatron-core 0.16.1 refuses it
    (`OptimizerConfig.__post_init__`, optimizer_config.py 375-426; validate_args, arguments.py 717) or where
    what it saves is not modelled; None without it."""
    dtypes = {name: str(args.get(name) or "fp32") for name in _PRECISION_DTYPES}
    for name, value in dtypes.items():
        if value not in _PRECISION_DTYPES[name]:
            raise ArchitectureError(f"{name} {value!r}: Megatron-LM takes {', '.join(_PRECISION_DTYPES[name])}")
    if not args.get("use_precision_aware_optimizer"):
        lowered = [name for name, value in dtypes.items() if value != "fp32"]
        if lowered:
            raise ArchitectureError(f"{lowered[0]} {dtypes[lowered[0]]}: megatron-core takes a dtype other than "
                                    "fp32 only with use_precision_aware_optimizer")
        return None
    optimizer = str(args.get("optimizer") or "adam")
    if optimizer != "adam":
        raise ArchitectureError(f"use_precision_aware_optimizer with optimizer {optimizer!r}: megatron-core "
                                "takes it only with adam")
    if not args.get("use_distributed_optimizer"):
        raise ArchitectureError("use_precision_aware_optimizer: megatron-core takes it only with "
                                "use_distributed_optimizer")
    if args.get("optimizer_cpu_offload"):
        raise ArchitectureError("use_precision_aware_optimizer with optimizer_cpu_offload: the offloaded "
                                "optimizer's checkpoint state is not modelled; set optimizer_cpu_offload false")
    fused_main = dtypes["main_params_dtype"] != "fp32" or args.get("fp8_recipe") in (None, "delayed")
    if not fused_main and "fp8" in (dtypes["exp_avg_dtype"], dtypes["exp_avg_sq_dtype"]):
        raise ArchitectureError(f"exp_avg_dtype fp8 with fp8_recipe {args.get('fp8_recipe')!r}: megatron-core "
                                "saves FusedAdam's fp8 moments as they are kept, which is not modelled; use bf16")
    return PrecisionAwareOptimizer(exp_avg_dtype=dtypes["exp_avg_dtype"],
                                   exp_avg_sq_dtype=dtypes["exp_avg_sq_dtype"],
                                   main_params_dtype=dtypes["main_params_dtype"], fused_adam_main_params=fused_main)


def _grad_dtype(args: Mapping[str, Any], params_dtype: str) -> str:
    """The gradient buffers' dtype: fp32 with `accumulate_allreduce_grads_in_fp32`, which validate_args turns on
    for bf16 weights unless `grad_reduce_in_bf16` or bf16 `main_grads_dtype` (arguments.py 711-724), else the
    weights' own."""
    accumulate = bool(args.get("accumulate_allreduce_grads_in_fp32"))
    main_grads = str(args.get("main_grads_dtype") or "fp32")
    if params_dtype == "bf16":
        if accumulate and main_grads != "fp32":
            raise ArchitectureError(f"main_grads_dtype {main_grads} with accumulate_allreduce_grads_in_fp32: "
                                    "Megatron-LM takes only fp32 main gradients then")
        accumulate = not args.get("grad_reduce_in_bf16") and (accumulate or main_grads == "fp32")
    return "fp32" if accumulate else params_dtype
