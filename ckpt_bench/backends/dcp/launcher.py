"""The PyTorch DCP backend, launcher side: the s3torchbenchmarking DCP scenario as a validated plan.

A named model's state is saved `--save-calls` times with `torch.distributed.checkpoint` (sync or
`async_save`) to a local folder or, through s3torchconnector, to an S3 prefix; then every
checkpoint is loaded back and verified. The ranks run `ckpt_bench.backends.dcp.worker`.

Everything that can be refused is refused here, before anything is created or launched: an unknown
model or dtype (`DcpConfig`), nccl without GPUs, a state that cannot fit in this host's memory, S3
settings that cannot work (the bucket itself is checked by the lifecycle right after).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ckpt_bench.backends.comms.launcher import PreflightOptions
from ckpt_bench.backends.dcp import models
from ckpt_bench.backends.dcp.spec import DcpSpec
from ckpt_bench.core.environment import gpu_count
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.options import Flag
from ckpt_bench.core.units import GIB
from ckpt_bench.launcher.base import (
    ASYNC_SAVE,
    DIST_BACKEND,
    SAVE_CALLS,
    SYNC_FILES,
    THREAD_COUNT,
    Backend,
    CheckpointOptions,
    Plan,
    WorkerPass,
)
from ckpt_bench.launcher.config import LaunchConfig
from ckpt_bench.launcher.resources import check_host_memory, default_dist_backend
from ckpt_bench.launcher.run_info import Ranks, RunInfo, SaveConfig, fsynced
from ckpt_bench.storage import StorageOptions, storage_for

WORKER = "ckpt_bench.backends.dcp.worker"  # the ranks' module
_PROGRESS = re.compile(r"^(saving|saved|loading|loaded) checkpoint")



@dataclass
class DcpConfig(CheckpointOptions, PreflightOptions, StorageOptions):
    """The DCP backend's options."""

    model: str = Flag(("--model",), "Named checkpoint shape: " + ", ".join(models.MODELS) + ".").field("vit-base")
    dtype: str = Flag(("--dtype",), "Parameter dtype (float32, bfloat16, float16).").field("float32")
    thread_count: int = THREAD_COUNT.field(1)
    sync_files: bool | None = SYNC_FILES.field()
    save_calls: int = SAVE_CALLS.field(3)
    async_save: bool = ASYNC_SAVE.field(False)
    dist_backend: str | None = DIST_BACKEND.field()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.model not in models.MODELS:
            raise ConfigError(f"--model {self.model!r} is not known: use one of {', '.join(models.MODELS)}")
        try:
            self.dtype = models.canonical_dtype(self.dtype)
        except KeyError:
            raise ConfigError(f"--dtype {self.dtype!r} is not supported: use one of "
                              f"{', '.join(models.DTYPES)} (or fp32, bf16, fp16)") from None


def check_dist_backend(name: str, nproc_per_node: int) -> None:
    if name != "nccl":
        return
    gpus = gpu_count()
    if gpus == 0:
        raise ConfigError("--dist-backend nccl needs CUDA GPUs and none is visible here; use --dist-backend gloo")
    if nproc_per_node > gpus:
        raise ConfigError(f"--dist-backend nccl: --nproc-per-node {nproc_per_node} is more than the {gpus} GPU(s) "
                          "of this host")


def check_memory(model: str, dtype: str, copies_per_rank: int, ranks_per_host: int) -> int:
    """Refuse a state that cannot fit in this host's available memory; returns its bytes.

    Every rank holds the whole state (replicated, as under DDP) and `async_save` stages a second copy.
    """
    state = models.estimate_bytes(model, dtype)
    check_host_memory(
        state * copies_per_rank * ranks_per_host,
        f"--model {model} in {dtype} is {state / GIB:.1f} GiB per copy; {ranks_per_host} rank(s) x "
        f"{copies_per_rank} cop{'ies' if copies_per_rank > 1 else 'y'}",
        "use a smaller model, a 16-bit --dtype or fewer ranks")
    return state


@dataclass(kw_only=True)
class DcpRunInfo(RunInfo):
    """A DCP run: its model's state and how it was written."""

    model: str
    model_parameters: int
    model_state_bytes: int
    """One copy of the state (every rank holds it, as under DDP)."""
    dtype: str
    dist_backend: str
    thread_count: int
    save_calls: int


def run_info(config: DcpConfig, spec: DcpSpec, state_bytes: int, launch: LaunchConfig) -> DcpRunInfo:
    return DcpRunInfo(
        backend="dcp",
        ranks=Ranks.of(launch.topology),
        saves=SaveConfig(
            data_parallel_size=launch.topology.world_size,  # the state is replicated on every rank, as under DDP
            ckpt_format="torch_dcp",
            async_save=config.async_save,
            params_dtype=f"torch.{config.dtype}",
            sync_files=spec.sync_files,
            fsync=fsynced(spec.sync_files, spec.storage),
        ),
        storage=spec.storage,
        model=config.model,
        model_parameters=models.parameter_count(config.model),
        model_state_bytes=state_bytes,
        dtype=config.dtype,
        dist_backend=spec.dist_backend,
        thread_count=config.thread_count,
        save_calls=config.save_calls,
    )


class DcpBackend(Backend[DcpConfig]):
    name = "dcp"
    title = "DCP backend (--backend dcp): torch.distributed.checkpoint of a named model's state"
    Config = DcpConfig

    def plan(self, launch: LaunchConfig[DcpConfig]) -> Plan:
        config = launch.options
        storage = storage_for(config.save_dir, config)  # validates the S3 settings; no I/O
        sync_files = True if config.sync_files is None else config.sync_files
        if storage.kind != "disk":
            if config.sync_files:
                raise ConfigError(f"--sync-files applies to a local --save-dir only: the {storage.kind} writer "
                                  "never fsyncs (an upload is durable once the store acknowledges it)")
            sync_files = False
        dist_backend = config.dist_backend or default_dist_backend()
        check_dist_backend(dist_backend, launch.topology.nproc_per_node)
        state_bytes = check_memory(config.model, config.dtype, 2 if config.async_save else 1,
                                   launch.topology.nproc_per_node)
        spec = DcpSpec(model=config.model, dtype=config.dtype, save_calls=config.save_calls,
                       thread_count=config.thread_count, sync_files=sync_files, async_save=config.async_save,
                       dist_backend=dist_backend, storage=storage.describe(), seed=1234)
        return Plan(
            name=f"dcp-{config.model}",
            worker_module=WORKER,
            resolved_config={DcpSpec.section: spec.section_json(), "save_dir": config.save_dir},
            spec=spec,
            run_info=run_info(config, spec, state_bytes, launch),
            passes=[*config.preflight_passes(dist_backend), WorkerPass("save", ["--phase", "save"]),
                    WorkerPass("load", ["--phase", "load"])],
            # Every save is kept until the run ends: one copy of the (replicated, deduplicated) state each.
            checkpoints=config.checkpoints(storage, writers_per_rank=config.thread_count,
                                           expected_bytes=state_bytes * config.save_calls),
            show_progress=lambda line: bool(_PROGRESS.search(line.strip())),
        )
