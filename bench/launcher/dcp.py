"""The PyTorch DCP backend, launcher side: the s3torchbenchmarking DCP scenario as a validated plan.

A named model's state is saved `--save-calls` times with `torch.distributed.checkpoint` (sync or
`async_save`) to a local folder or, through s3torchconnector, to an S3 prefix; then every
checkpoint is loaded back and verified. The ranks run `bench.dcp.worker`.

Everything that can be refused is refused here, before anything is created or launched: an unknown
model or dtype, nccl without GPUs, a state that cannot fit in this host's memory, S3 settings that
cannot work (the bucket itself is checked by `bench.storage` right after).
"""

from __future__ import annotations

import re

from bench.config import ConfigError
from bench.dcp import models
from bench.launcher.base import LaunchSettings, Plan, WorkerPass
from bench.storage import storage_for

DEFAULTS = {
    "model": "vit-base",
    "dtype": "float32",
    "thread_count": 1,  # torch's FileSystemWriter default
    "save_calls": 3,
    "async_save": False,
    "sync_files": True,  # torch's FileSystemWriter default; S3 uploads are never fsynced
}

_PROGRESS = re.compile(r"^(saving|saved|loading|loaded) checkpoint")

GIB = 1 << 30


def _option(options: dict, key: str):
    value = options.get(key)
    return DEFAULTS[key] if value is None else value


def default_dist_backend() -> str:
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def check_dist_backend(name: str, nproc_per_node: int) -> None:
    if name != "nccl":
        return
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        raise ConfigError("--dist-backend nccl needs CUDA GPUs and none is visible here; use --dist-backend gloo")
    if nproc_per_node > gpus:
        raise ConfigError(f"--dist-backend nccl: --nproc-per-node {nproc_per_node} is more than the {gpus} GPU(s) "
                          "of this host")


def check_memory(model: str, dtype: str, copies_per_rank: int, ranks_per_host: int) -> int:
    """Refuse a state that cannot fit in this host's available memory; returns its bytes.

    Every rank holds the whole state (replicated, as under DDP) and `async_save` stages a second copy.
    """
    import psutil

    state = models.estimate_bytes(model, dtype)
    needed = state * copies_per_rank * ranks_per_host
    available = psutil.virtual_memory().available
    if needed > available:
        raise ConfigError(
            f"--model {model} in {dtype} is {state / GIB:.1f} GiB per copy; {ranks_per_host} rank(s) x "
            f"{copies_per_rank} cop{'ies' if copies_per_rank > 1 else 'y'} need {needed / GIB:.1f} GiB but "
            f"{available / GIB:.1f} GiB is available: use a smaller model, a 16-bit --dtype or fewer ranks"
        )
    return state


def resolve(settings: LaunchSettings) -> dict:
    """The DCP settings of a run, validated; raises ConfigError with one line."""
    options = settings.options
    model = _option(options, "model")
    if model not in models.MODELS:
        raise ConfigError(f"--model {model!r} is not known: use one of {', '.join(models.MODELS)}")
    try:
        dtype = models.canonical_dtype(_option(options, "dtype"))
    except KeyError:
        raise ConfigError(f"--dtype {options.get('dtype')!r} is not supported: use one of "
                          f"{', '.join(models.DTYPES)} (or fp32, bf16, fp16)") from None
    storage = storage_for(settings.save_dir, options)  # validates the S3 settings; no I/O
    sync_files = _option(options, "sync_files")
    if storage.kind == "s3":
        if options.get("sync_files"):
            raise ConfigError("--sync-files applies to a local --save-dir only: s3torchconnector's S3StorageWriter "
                              "never fsyncs (an upload is durable once S3 acknowledges it)")
        sync_files = False
    dist_backend = options.get("dist_backend") or default_dist_backend()
    check_dist_backend(dist_backend, settings.topology.nproc_per_node)
    async_save = bool(_option(options, "async_save"))
    state_bytes = check_memory(model, dtype, 2 if async_save else 1, settings.topology.nproc_per_node)
    return {
        "model": model,
        "dtype": dtype,
        "save_calls": _option(options, "save_calls"),
        "thread_count": _option(options, "thread_count"),
        "sync_files": bool(sync_files),
        "async_save": async_save,
        "dist_backend": dist_backend,
        "storage": storage.describe(),
        "seed": 1234,
        "_state_bytes": state_bytes,
    }


def run_info(dcp: dict, settings: LaunchSettings) -> dict:
    world_size = settings.topology.world_size
    return {
        "world_size": world_size,
        "data_parallel_size": world_size,  # the state is replicated on every rank, as under DDP
        "ckpt_format": "torch_dcp",
        "ckpt_fully_parallel_save": None,
        "ckpt_fully_parallel_load": None,
        "async_save": dcp["async_save"],
        "save_interval": None,
        "optimizer": None,
        "use_distributed_optimizer": None,
        "params_dtype": f"torch.{dcp['dtype']}",
        "main_params_dtype": None,
        "exp_avg_dtype": None,
        "exp_avg_sq_dtype": None,
        # Beyond the Primus keys.
        "backend": "dcp",
        "model": dcp["model"],
        "model_parameters": models.parameter_count(dcp["model"]),
        "model_state_bytes": dcp["_state_bytes"],
        "dtype": dcp["dtype"],
        "dist_backend": dcp["dist_backend"],
        "thread_count": dcp["thread_count"],
        "sync_files": dcp["sync_files"],
        "save_calls": dcp["save_calls"],
        "nnodes": settings.topology.nnodes,
        "nproc_per_node": settings.topology.nproc_per_node,
        **dcp["storage"],
    }


class DcpBackend:
    name = "dcp"

    def plan(self, settings: LaunchSettings) -> Plan:
        dcp = resolve(settings)
        spec = {key: value for key, value in dcp.items() if not key.startswith("_")}
        return Plan(
            name=f"dcp-{dcp['model']}",
            worker_module="bench.dcp.worker",
            resolved_config={"dcp": spec, "save_dir": settings.save_dir},
            spec={"dcp": spec},
            run_info=run_info(dcp, settings),
            passes=[WorkerPass("save", ["--phase", "save"]), WorkerPass("load", ["--phase", "load"])],
            checkpoint_parent=settings.save_dir,
            show_progress=lambda line: bool(_PROGRESS.search(line.strip())),
        )
