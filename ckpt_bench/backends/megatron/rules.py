"""Megatron's consistency rules, in one place: the launcher checks them before anything starts (with
the command line's spelling of each setting), the worker checks them on its spec (with Megatron-LM's
argument names). No torch here: the launcher imports this before deciding to launch anything.

    sizes = check(args, world_size, name=flag_names.get)   # raises ConfigError at the first problem
    check_worker_limits(args, name)                        # what the built-in worker cannot run

`name(key)` names a Megatron-LM argument for the message as where its value came from (`--tp` typed on the
command line, `glm5-BF16-pretrain.yaml's pipeline_model_parallel_size`, `tensor_model_parallel_size` in a
spec); None falls back to the argument's own name. The value follows the name: `--pp 8: ...`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.model.job import expert_bias_refusal
from ckpt_bench.model.parallel import ParallelError, Parallelism, megatron_parallelism, pipeline_settings
from ckpt_bench.model.pipeline_layout import PipelineLayout

CKPT_FORMATS = ("torch_dist", "torch", "torch_dcp", "fsdp_dtensor")  # what Megatron-LM's --ckpt-format takes
# What the built-in worker saves: its model is DDP-wrapped megatron-core; torch_dcp saves a model wrapped
# in torch FSDP2 (Megatron-LM's --use-torch-fsdp2), fsdp_dtensor one wrapped in Megatron FSDP.
WORKER_FORMATS = ("torch_dist", "torch")
ASYNC_FORMATS = ("torch_dist",)  # megatron-core's async queue serves the sharded format only


def writers_per_rank(args: Mapping) -> int:
    """Files a rank writes at once: megatron-core's torch_dist strategy writes with 2 threads per rank
    (TorchDistSaveShardedStrategy's thread_count); the legacy format is one torch.save per rank."""
    return 2 if args.get("ckpt_format", "torch_dist") == "torch_dist" else 1

Namer = Callable[[str], "str | None"]


def _spell(name: Namer, key: str) -> str:
    return name(key) or key


# Megatron-LM's defaults of the parallel sizes: an argument left unset (absent, or YAML's null) is one.
PARALLEL_SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size",
                  "context_parallel_size")


def _positive_int(args: Mapping, key: str, name: Namer) -> int:
    value = args.get(key)
    if value is None and key in PARALLEL_SIZES:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{_spell(name, key)} {value!r}: must be a positive integer")
    return value


def check(args: Mapping, world_size: int, name: Namer = lambda key: None) -> dict:
    """Megatron's own rules, true for the built-in worker and for Megatron-LM alike. Returns the
    parallel sizes {tp, pp, ep, cp, dp}."""
    n = lambda key: _spell(name, key)  # noqa: E731 - short local spelling helper
    tp = _positive_int(args, "tensor_model_parallel_size", name)
    pp = _positive_int(args, "pipeline_model_parallel_size", name)
    ep = _positive_int(args, "expert_model_parallel_size", name)
    cp = _positive_int(args, "context_parallel_size", name)
    train_iters = _positive_int(args, "train_iters", name)
    save_interval = _positive_int(args, "save_interval", name)

    if world_size % (tp * pp * cp):
        raise ConfigError(
            f"world size {world_size} is not divisible by TP x PP x CP = {tp * pp * cp} "
            f"({n('tensor_model_parallel_size')} {tp}, {n('pipeline_model_parallel_size')} {pp}, "
            f"{n('context_parallel_size')} {cp}), i.e. not a multiple of it; choose sizes whose product divides "
            f"{world_size}"
        )
    dp = world_size // (tp * pp * cp)
    if (dp * cp) % ep:
        raise ConfigError(f"{n('expert_model_parallel_size')} {ep}: expert parallel size must divide DP x CP = "
                          f"{dp * cp} (DP={dp}, CP={cp})")
    num_experts = args.get("num_experts")
    if ep > 1 and not num_experts:
        raise ConfigError(f"{n('expert_model_parallel_size')} {ep}: expert parallelism needs an MoE model "
                          "(e.g. num_experts=4)")
    if num_experts and num_experts % ep:
        raise ConfigError(f"{n('expert_model_parallel_size')} {ep}: must divide num_experts={num_experts}")
    refused = expert_bias_refusal(bool(num_experts), bool(args.get("add_bias_linear", True)),
                                  args.get("expert_tensor_parallel_size") or tp)
    if refused:
        raise ConfigError(refused)
    if save_interval > train_iters:
        raise ConfigError(
            f"{n('save_interval')} {save_interval} is larger than {n('train_iters')} {train_iters}: no checkpoint "
            f"would be saved; use a save interval of at most {train_iters}"
        )
    fmt = args.get("ckpt_format")
    if fmt not in CKPT_FORMATS:
        raise ConfigError(f"{n('ckpt_format')} {fmt!r} is not supported: use one of {', '.join(CKPT_FORMATS)}")
    if args.get("async_save") and fmt not in ASYNC_FORMATS:
        raise ConfigError(
            f"{n('async_save')} needs {n('ckpt_format')} {' or '.join(ASYNC_FORMATS)} (got {fmt!r}): "
            "megatron-core's async queue serves the sharded format only"
        )
    heads = _positive_int(args, "num_attention_heads", name)
    if heads % tp:
        raise ConfigError(f"{n('tensor_model_parallel_size')} {tp}: must divide num_attention_heads={heads}")
    if args.get("group_query_attention"):
        groups = args.get("num_query_groups")
        if not groups or groups % tp:
            raise ConfigError(f"{n('tensor_model_parallel_size')} {tp}: group_query_attention needs "
                              f"num_query_groups (got {groups!r}), a multiple of the tensor parallel size")
        if heads % groups:
            raise ConfigError(f"num_query_groups={groups} must divide num_attention_heads={heads}: each group "
                              "serves the same number of heads")
    hidden = _positive_int(args, "hidden_size", name)
    if hidden % heads and not args.get("kv_channels"):
        raise ConfigError(f"hidden_size={hidden} is not divisible by num_attention_heads={heads}: Megatron-LM "
                          "makes each head hidden_size / num_attention_heads wide (unless kv_channels is set)")
    _positive_int(args, "num_layers", name)
    try:  # how the layers fall on the pipeline stages, as Megatron-LM's validate_args and megatron-core check it
        megatron_parallelism({**args, "pipeline_model_parallel_size": pp}, world_size, name)
    except ParallelError as error:
        raise ConfigError(str(error)) from None
    seq = _positive_int(args, "seq_length", name)
    if cp > 1 and seq % (2 * cp):
        raise ConfigError(f"{n('context_parallel_size')} {cp}: seq_length={seq} must be divisible by 2 x CP = "
                          f"{2 * cp}")
    micro = _positive_int(args, "micro_batch_size", name)
    global_batch = _positive_int(args, "global_batch_size", name)
    if global_batch % (micro * dp):
        raise ConfigError(
            f"global_batch_size={global_batch} must be a multiple of micro_batch_size x DP = {micro * dp}; "
            f"e.g. global_batch_size={micro * dp}"
        )
    if args.get("bf16") and args.get("fp16"):
        raise ConfigError("bf16 and fp16 are exclusive: set one")
    return {"tp": tp, "pp": pp, "ep": ep, "cp": cp, "dp": dp}


def check_worker_limits(args: Mapping, name: Namer = lambda key: None) -> None:
    """What the built-in worker (megatron-core without Transformer Engine, local files) cannot run,
    though Megatron-LM could."""
    n = lambda key: _spell(name, key)  # noqa: E731
    refused = fsdp_on_cpu_refusal(args)
    if refused:
        raise ConfigError(f"the built-in worker wraps its model in megatron-core's DDP, not in fully sharded data "
                          f"parallelism; {refused}; --workload EXPERIMENT --plan sizes its checkpoint")
    if args.get("ckpt_format") not in WORKER_FORMATS:
        raise ConfigError(
            f"{n('ckpt_format')} {args.get('ckpt_format')} saves a model wrapped in "
            f"{'torch FSDP2 (--use-torch-fsdp2)' if args.get('ckpt_format') == 'torch_dcp' else 'Megatron FSDP'}, "
            f"which the built-in worker (a DDP-wrapped megatron-core model) does not build: use one of "
            f"{', '.join(WORKER_FORMATS)}, or run Megatron-LM itself (--framework megatron-lm)")
    if args.get("ckpt_format") == "torch" and args.get("use_distributed_optimizer"):
        raise ConfigError(
            f"{n('ckpt_format')} torch with {n('use_distributed_optimizer')} is not supported by the built-in "
            "worker (Megatron-LM gathers that optimizer state into a separate distrib_optim.pt); use torch_dist")
    if args.get("kv_channels") and args["hidden_size"] % args["num_attention_heads"]:
        raise ConfigError(f"hidden_size={args['hidden_size']} is not divisible by num_attention_heads="
                          f"{args['num_attention_heads']}: the built-in worker does not read kv_channels and makes "
                          "each head hidden_size / num_attention_heads wide")
    check_local_experts(args)
    if (args.get("context_parallel_size") or 1) > 1:
        raise ConfigError(
            "context_parallel_size > 1 needs Transformer Engine's attention; the built-in worker's local layer "
            "spec (megatron-core without Transformer Engine) supports no context parallelism")
    check_non_persistent(args, n)
    for key in ("save", "load"):
        location = str(args.get(key) or "")
        if "://" in location and not (location.startswith("msc://") and args.get("ckpt_format") == "torch_dist"):
            raise ConfigError(f"{key} {args[key]}: megatron-core writes a file system path, or torch_dist through "
                              "multi-storage-client to msc://PROFILE/PATH (msc://BUCKET/PREFIX reaches an S3 bucket)")


def fsdp_on_cpu_refusal(args: Mapping) -> str | None:
    """Why megatron-core 0.16.1 cannot train `args`' fully sharded data parallelism on CPU ranks, or None: its
    `TorchFullyShardedDataParallel` builds FSDP2's device mesh on "cuda" (and with torch 2.13 fails inside
    fully_shard even on a CPU mesh), Megatron-FSDP runs on CUDA streams."""
    if args.get("use_torch_fsdp2"):
        return ("use_torch_fsdp2: megatron-core 0.16.1's TorchFullyShardedDataParallel builds FSDP2's device mesh on "
                "CUDA, which CPU ranks do not have; run it on GPUs with --framework megatron-lm")
    if args.get("use_megatron_fsdp"):
        return ("use_megatron_fsdp: Megatron-FSDP runs on CUDA devices and streams, which CPU ranks do not have; run "
                "it on GPUs with --framework megatron-lm")
    return None


def check_non_persistent(args: Mapping, n: Callable[[str], str]) -> None:
    """What the built-in worker runs of Megatron-LM's non-persistent checkpoints and retention: `global` (torch_dist
    into `<save>/non_persistent`, the older ones removed as Megatron-LM does) and `local` (nvidia-resiliency-ext's
    LocalCheckpointManager into `<save>/non_persistent_local`, with replication), synchronous, on a file system;
    `save_retain_interval` on a file system."""
    kind, interval = args.get("non_persistent_ckpt_type"), args.get("non_persistent_save_interval")
    if interval and kind is None:
        raise ConfigError(f"{n('non_persistent_save_interval')} {interval} needs non_persistent_ckpt_type global or "
                          "local (--set non_persistent_ckpt_type=global|local): Megatron-LM raises NotImplementedError "
                          "at the first such save without it")
    if kind not in (None, "global", "local"):
        raise ConfigError(f"{n('non_persistent_ckpt_type')} {kind}: Megatron-LM 0.16.1 saves global or local "
                          "non-persistent checkpoints (it raises NotImplementedError for in_memory)")
    if kind and not interval:
        raise ConfigError(f"{n('non_persistent_ckpt_type')} {kind} needs {n('non_persistent_save_interval')} N: "
                          "how often to save a non-persistent checkpoint")
    for folder in ("non_persistent_global_ckpt_dir", "non_persistent_local_ckpt_dir"):
        if args.get(folder):
            raise ConfigError(f"{n(folder)} {args[folder]}: the built-in worker keeps non-persistent checkpoints "
                              "inside the run's checkpoint folder (--save-dir), which it removes after the run")
    remote = "://" in str(args.get("save") or "")
    if kind and (args.get("ckpt_format") != "torch_dist" or remote or args.get("async_save")):
        raise ConfigError(f"{n('non_persistent_ckpt_type')} {kind}: the built-in worker saves non-persistent "
                          "checkpoints synchronously, torch_dist's sharded state, to a file system (Megatron-LM "
                          "removes the older ones with shutil)")
    if kind == "local":
        import importlib.util

        if importlib.util.find_spec("nvidia_resiliency_ext") is None:
            raise ConfigError(f"{n('non_persistent_ckpt_type')} local needs nvidia-resiliency-ext's "
                              "LocalCheckpointManager: pip install nvidia-resiliency-ext (ckpt-bench's extra: "
                              "pip install -e '.[nvrx]')")
        if args.get("dist_ckpt_optim_fully_reshardable"):
            raise ConfigError(f"{n('non_persistent_ckpt_type')} local with dist_ckpt_optim_fully_reshardable: "
                              "Megatron-LM refuses fully reshardable optimizer state in local checkpoints")
    if args.get("replication"):
        if kind != "local" or not args.get("replication_jump"):
            raise ConfigError(f"{n('replication')} needs {n('non_persistent_ckpt_type')} local and "
                              f"{n('replication_jump')} J (Megatron-LM asserts both)")
        world = args.get("world_size")
        group = args["replication_jump"] * (args.get("replication_factor") or 2)
        if world is not None and world % group:
            raise ConfigError(f"{n('replication_jump')} {args['replication_jump']} x {n('replication_factor')} "
                              f"{args.get('replication_factor') or 2} = {group} must divide the world size {world}: "
                              "nvidia-resiliency-ext groups the ranks into cliques of that span")
    if args.get("save_retain_interval") and remote:
        raise ConfigError(f"{n('save_retain_interval')}: Megatron-LM deletes old checkpoints with shutil, on a file "
                          f"system only (on {args['save']} its deletion fails and is logged); drop it or save locally")


def worker_pipeline(args: Mapping, world_size: int) -> tuple[PipelineLayout, PipelineLayout | None]:
    """The pipeline Megatron-LM makes of `args` (checked by `check`), and the one the built-in worker builds: one
    model chunk per pipeline rank, the layers split evenly (megatron-core's default: it acts on none of the uneven
    or virtual pipeline arguments); None where it cannot split them evenly."""
    megatron = megatron_parallelism(args, world_size).pipeline
    try:
        even = Parallelism(world_size=world_size, num_layers=args["num_layers"],
                           pp=args.get("pipeline_model_parallel_size") or 1).pipeline
    except ParallelError:
        even = None
    return megatron, even


def worker_pipeline_refusal(args: Mapping, world_size: int, name: Namer = lambda key: None) -> str | None:
    """Why the built-in worker cannot run the pipeline of `args` at all (`worker_pipeline`: no even split of its
    layers); None where it can (where that is not Megatron-LM's layout, the arguments it does not act on are
    named as any other: `arguments.not_acted_on`)."""
    megatron, even = worker_pipeline(args, world_size)
    if even is not None:
        return None
    return (f"Megatron-LM lays this job out as {describe(megatron)} (from {pipeline_settings(args, name)}); the "
            "built-in worker builds one model chunk per pipeline rank with the layers split evenly (it does not act "
            "on uneven or virtual pipeline arguments), which these layers do not allow; --framework megatron-lm runs "
            "Megatron-LM itself, --workload writes this job's checkpoint at its size")


def describe(pipeline: PipelineLayout) -> str:
    """A pipeline layout in a few words: its layers per stage, and its model chunks per rank where several."""
    chunks = f", in {pipeline.vp} model chunks (virtual pipeline stages) per rank" if pipeline.vp > 1 else ""
    return f"layers per pipeline stage {list(pipeline.layers_per_rank)}{chunks}"


def check_local_experts(args: Mapping) -> None:
    """What megatron-core's local layer spec (no Transformer Engine: the built-in worker, and Megatron-LM with
    `--transformer-impl local`) cannot train of an MoE."""
    unsplit = all((args.get(key) or 1) == 1 for key in ("tensor_model_parallel_size", "expert_model_parallel_size"))
    if args.get("num_experts") and args.get("add_bias_linear", True) and not args.get("moe_grouped_gemm") and unsplit:
        # Without TP or EP the local experts' row-parallel layer hands its input back through a custom autograd
        # Function, and megatron-core 0.16.1 adds each expert's bias to it in place (mlp.py): autograd refuses that
        # at the first step ("Output 0 of _ReduceFromModelParallelRegion is a view and is being modified inplace").
        raise ConfigError("num_experts with add_bias_linear (Megatron-LM's default) at TP 1 and EP 1: megatron-core "
                          "0.16.1's local experts add their bias in place to a tensor autograd protects, and the first "
                          "step fails; set add_bias_linear=false, as MoE models do, or --ep 2 or more")
