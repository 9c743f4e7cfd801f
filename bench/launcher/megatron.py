"""The Megatron backend, launcher side: a Primus experiment in, a validated plan of two passes out.

The save pass trains `train_iters` iterations and saves every `save_interval`; the load pass loads
the last checkpoint into a freshly built model and verifies it. The ranks run `bench.megatron.worker`.
"""

from __future__ import annotations

import re

from bench.config import DEFAULT_EXPERIMENT, ConfigError, Experiment, deep_merge, load_experiment
from bench.launcher.base import LaunchSettings, Plan, WorkerPass

CKPT_FORMATS = ("torch_dist", "torch")
ASYNC_FORMATS = ("torch_dist",)  # megatron-core's async queue serves the sharded format only

PROGRESS = re.compile(
    r"\biteration\s+\d+/\s*\d+|saving checkpoint|scheduled an async|successfully saved|"
    r"loading (distributed )?checkpoint|successfully loaded|verif"
)

_DTYPE_NAMES = {"fp32": "torch.float32", "fp16": "torch.float16", "bf16": "torch.bfloat16", "fp8": "fp8"}


def _positive_int(args: dict, key: str, flag: str) -> int:
    value = args.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{flag} {value!r}: must be a positive integer")
    return value


def validate(args: dict, world_size: int) -> dict:
    """Megatron's own consistency rules, checked before anything starts. Returns derived sizes."""
    tp = _positive_int(args, "tensor_model_parallel_size", "--tp")
    pp = _positive_int(args, "pipeline_model_parallel_size", "--pp")
    ep = _positive_int(args, "expert_model_parallel_size", "--ep")
    cp = _positive_int(args, "context_parallel_size", "--cp")
    train_iters = _positive_int(args, "train_iters", "--train-iters")
    save_interval = _positive_int(args, "save_interval", "--save-interval")

    if world_size % (tp * pp * cp):
        raise ConfigError(
            f"world size {world_size} is not divisible by TP x PP x CP = {tp * pp * cp} "
            f"(TP={tp}, PP={pp}, CP={cp}); choose sizes whose product divides {world_size}"
        )
    dp = world_size // (tp * pp * cp)
    if (dp * cp) % ep:
        raise ConfigError(f"--ep {ep}: expert parallel size must divide DP x CP = {dp * cp} (DP={dp}, CP={cp})")
    num_experts = args.get("num_experts")
    if ep > 1 and not num_experts:
        raise ConfigError(f"--ep {ep}: expert parallelism needs an MoE model (e.g. --set num_experts=4)")
    if num_experts and num_experts % ep:
        raise ConfigError(f"--ep {ep}: must divide num_experts={num_experts}")
    if save_interval > train_iters:
        raise ConfigError(
            f"--save-interval {save_interval} is larger than --train-iters {train_iters}: no checkpoint would "
            f"be saved; use a save interval of at most {train_iters}"
        )
    fmt = args.get("ckpt_format")
    if fmt not in CKPT_FORMATS:
        raise ConfigError(f"--ckpt-format {fmt!r} is not supported: use one of {', '.join(CKPT_FORMATS)}")
    if args.get("async_save") and fmt not in ASYNC_FORMATS:
        raise ConfigError(
            f"--async-save needs --ckpt-format {' or '.join(ASYNC_FORMATS)} (got {fmt!r}); "
            "use --no-async-save or --ckpt-format torch_dist"
        )
    heads = _positive_int(args, "num_attention_heads", "num_attention_heads")
    if heads % tp:
        raise ConfigError(f"--tp {tp}: must divide num_attention_heads={heads}")
    groups = args.get("num_query_groups") if args.get("group_query_attention") else None
    if groups and groups % tp:
        raise ConfigError(f"--tp {tp}: must divide num_query_groups={groups}")
    layers = _positive_int(args, "num_layers", "num_layers")
    if layers % pp:
        raise ConfigError(f"--pp {pp}: must divide num_layers={layers}")
    seq = _positive_int(args, "seq_length", "seq_length")
    if cp > 1 and seq % (2 * cp):
        raise ConfigError(f"--cp {cp}: seq_length={seq} must be divisible by 2 x CP = {2 * cp}")
    micro = _positive_int(args, "micro_batch_size", "micro_batch_size")
    global_batch = _positive_int(args, "global_batch_size", "global_batch_size")
    if global_batch % (micro * dp):
        raise ConfigError(
            f"global_batch_size={global_batch} must be a multiple of micro_batch_size x DP = {micro * dp}; "
            f"e.g. --set global_batch_size={micro * dp}"
        )
    return {"tp": tp, "pp": pp, "ep": ep, "cp": cp, "dp": dp}


def shows_progress(line: str) -> bool:
    """Rank 0's Megatron log lines worth showing while a pass runs (iterations, saves, loads)."""
    return bool(PROGRESS.search(line))


def resolve(settings: LaunchSettings, runner: str) -> tuple[Experiment, dict, dict]:
    """The experiment, its trainer arguments with the command line's overrides, validated, and the
    parallel sizes. `runner` names what will run it, for the error about a non-Megatron experiment."""
    experiment = load_experiment(settings.config or DEFAULT_EXPERIMENT)
    if experiment.framework != "megatron":
        raise ConfigError(f"{experiment.path}: framework {experiment.framework!r} cannot be run by {runner}: "
                          "only Megatron experiments can")
    args = deep_merge(experiment.args, settings.overrides)
    return experiment, args, validate(args, settings.topology.world_size)


def _params_dtype(args: dict) -> str:
    if args.get("bf16"):
        return "torch.bfloat16"
    if args.get("fp16"):
        return "torch.float16"
    return "torch.float32"


def run_info(args: dict, sizes: dict, settings: LaunchSettings) -> dict:
    """The report's configuration keys, with the types the Primus tool's report has."""
    return {
        "world_size": settings.topology.world_size,
        "data_parallel_size": sizes["dp"],
        "ckpt_format": args["ckpt_format"],
        "ckpt_fully_parallel_save": bool(args.get("ckpt_fully_parallel_save")),
        "ckpt_fully_parallel_load": bool(args.get("ckpt_fully_parallel_load")),
        "async_save": bool(args.get("async_save")),
        "save_interval": args["save_interval"],
        "optimizer": args.get("optimizer", "adam"),
        "use_distributed_optimizer": bool(args.get("use_distributed_optimizer")),
        "params_dtype": _params_dtype(args),
        "main_params_dtype": _DTYPE_NAMES.get(args.get("main_params_dtype", "fp32"), args.get("main_params_dtype")),
        "exp_avg_dtype": _DTYPE_NAMES.get(args.get("exp_avg_dtype", "fp32"), args.get("exp_avg_dtype")),
        "exp_avg_sq_dtype": _DTYPE_NAMES.get(args.get("exp_avg_sq_dtype", "fp32"), args.get("exp_avg_sq_dtype")),
        # Beyond the Primus keys: what a reader needs to compare runs.
        "backend": "megatron",
        "tensor_model_parallel_size": sizes["tp"],
        "pipeline_model_parallel_size": sizes["pp"],
        "expert_model_parallel_size": sizes["ep"],
        "context_parallel_size": sizes["cp"],
        "nnodes": settings.topology.nnodes,
        "nproc_per_node": settings.topology.nproc_per_node,
        "train_iters": args["train_iters"],
        "model": {
            key: args.get(key)
            for key in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                        "num_query_groups", "seq_length", "vocab_size", "num_experts")
        },
    }


def _check_worker_accepts(args: dict, world_size: int, checkpoint_parent) -> None:
    """What the built-in worker itself cannot run (e.g. CP without Transformer Engine), refused now
    rather than after torchrun has started: the worker's own spec rules, applied to this plan."""
    from bench.megatron.spec import SpecError, WorkerSpec

    placeholder = str(checkpoint_parent or "checkpoints")
    try:
        WorkerSpec(megatron=args, events_dir="", integrity_dir="", checkpoint_dir=placeholder).megatron_args(
            world_size
        )
    except SpecError as error:
        raise ConfigError(f"the megatron worker cannot run this: {error}") from None


class MegatronBackend:
    name = "megatron"

    def plan(self, settings: LaunchSettings) -> Plan:
        experiment, args, sizes = resolve(settings, "the built-in worker")
        # Primus skips saving when `save` is null: we always save, by default inside the run directory.
        checkpoint_parent = settings.save_dir or args.get("save")
        args["save"] = args["load"] = None  # the runner creates the run's own checkpoint folder
        _check_worker_accepts(args, settings.topology.world_size, checkpoint_parent)
        experiment.args = args
        return Plan(
            name=experiment.exp_name,
            worker_module="bench.megatron.worker",
            resolved_config={**experiment.to_yaml_dict(), "exp_root": str(experiment.exp_root)},
            spec={"megatron": args},
            run_info=run_info(args, sizes, settings),
            passes=[WorkerPass("save", ["--phase", "save"]), WorkerPass("load", ["--phase", "load"])],
            checkpoint_parent=str(checkpoint_parent) if checkpoint_parent else None,
            show_progress=shows_progress,
        )
