"""The checkpoint engines a workload is saved and loaded through, one file each, listed once here.

    torch-save   DLIO's own way (MLPerf Storage): every rank `torch.save`s its files, DLIO's names
    torch_dist   megatron-core `dist_checkpointing` (Megatron-LM's default format): sharded tensors,
                 fully-parallel save and load, async, the persistent writer
    torch        Megatron-LM's legacy format: `model_optim_rng.pt` (and `distrib_optim.pt`) per model-parallel
                 rank folder, `torch.save`d (the torch-save engine's code over Megatron's files)
    dcp          PyTorch Distributed Checkpoint: writer threads, async, disk, S3 and fsspec; DLIO's tensors
                 or a Megatron GPT's sharded state, whichever the workload describes

This module is the launcher's view (no torch): what each engine reads and supports, and which state it saves
for a workload (`saved_state`, the one place that decides it). The worker side of `NAME` is the module
`ENGINES[NAME].module`, whose `ENGINE` (an `engines.base.Engine` class, or a function of the same arguments that
returns one) the ranks use.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass

from ckpt_bench.layout.checkpoint_layout import Layout
from ckpt_bench.layout.workload import Workload, WorkloadError
from ckpt_bench.model.checkpointing import TORCH_DIST_COORDINATOR_FILES

_WORKLOAD = "ckpt_bench.backends.workload"
_LAYOUT = "ckpt_bench.layout"  # what each state looks like, rank by rank


@dataclass(frozen=True)
class EngineInfo:
    """An engine, as the launcher checks options against it and the report describes it."""

    name: str
    """`--engine NAME`."""
    module: str
    """The worker-side module; its `ENGINE` is the engine's class."""
    writes: str
    """What it writes, in a few words, for --help and the report."""
    layouts: dict[str, str]
    """The states it saves (`Workload.state`: "dlio", DLIO's per-rank tensors; "megatron", a Megatron GPT's
    sharded state with its optimizer), each with the module whose `layout` gives what every rank writes of it
    through this engine. The first is the one it saves of a workload whose own state it cannot save."""
    async_save: bool
    """Whether it has an asynchronous save (`--async-save`)."""
    default_threads: int | None
    """Writer threads per rank without `--thread-count` (its own default); None: it reads no `--thread-count`."""
    storage_kinds: tuple[str, ...]
    """The storages it writes to (`CheckpointStorage.kind`)."""
    async_staging_copies: int = 0
    """Extra copies of a rank's state an async save holds while it writes (for the memory check)."""
    always_fsyncs: bool = False
    """Whether its writer fsyncs whatever --sync-files says (megatron-core's has no switch)."""
    fully_parallel: bool = False
    """Whether it follows Megatron-LM's ckpt_fully_parallel_save and -load (megatron-core's strategy wrappers)."""
    rank_files: str | None = None
    """The names of the files a rank writes, one per writer thread (`{rank}`, `{thread}`); None: the state's
    own file names (DLIO's, or megatron-core's as `state_layout` gives them)."""
    coordinator_files: tuple[str, ...] = ()
    """Files rank 0 writes beside its own (with `rank_files`)."""

    def files_written(self, rank: int, state_files: list[str], threads: int) -> list[str]:
        """What rank `rank` writes for one save (`--plan`), given its state's file names and its writer threads."""
        if self.rank_files is None:
            return state_files
        own = [self.rank_files.format(rank=rank, thread=thread) for thread in range(threads)]
        return own + list(self.coordinator_files) if rank == 0 else own


_DLIO = {"dlio": f"{_LAYOUT}.dlio_layout"}
_FSDP2 = f"{_LAYOUT}.megatron_fsdp2"  # a Megatron job under FSDP2: sized for --plan (its engines save DDP's state)

ENGINES: dict[str, EngineInfo] = {
    info.name: info for info in (
        EngineInfo("torch-save", f"{_WORKLOAD}.engines.torch_save",
                   "torch.save of each rank's files with DLIO's names (MLPerf Storage's way)", _DLIO,
                   async_save=False, default_threads=None, storage_kinds=("disk", "s3", "fsspec", "msc")),
        EngineInfo("torch_dist", f"{_WORKLOAD}.engines.torch_dist",
                   "megatron-core dist_checkpointing, torch_dist format, fully parallel save and load as the "
                   "experiment sets them (Megatron-LM's defaults: save on, load off)",
                   {"megatron": f"{_LAYOUT}.megatron_shapes", "megatron_fsdp2": _FSDP2},
                   # 2 writer threads a rank: Megatron-LM's default (--ckpt-fully-parallel-save's torch_dist strategy)
                   async_save=True, default_threads=2, storage_kinds=("disk",), async_staging_copies=1,
                   always_fsyncs=True, fully_parallel=True,
                   # megatron-core's FileSystemWriterAsync: a file per writer thread a rank; rank 0's own beside
                   rank_files="__{rank}_{thread}.distcp", coordinator_files=TORCH_DIST_COORDINATOR_FILES),
        EngineInfo("torch", f"{_WORKLOAD}.engines.torch_save",
                   "Megatron-LM's legacy torch format: mp_rank_* folders of model_optim_rng.pt and distrib_optim.pt",
                   {"megatron": f"{_LAYOUT}.megatron_torch"}, async_save=False, default_threads=None,
                   storage_kinds=("disk", "s3", "fsspec", "msc")),
        EngineInfo("dcp", f"{_WORKLOAD}.engines.dcp",
                   "torch.distributed.checkpoint with writer threads, of DLIO's tensors or a Megatron GPT's sharded "
                   "state (whichever the workload describes)",
                   {**_DLIO, "megatron": f"{_LAYOUT}.megatron_dcp", "megatron_fsdp2": _FSDP2},
                   async_save=True, default_threads=1, storage_kinds=("disk", "s3", "fsspec", "msc"),
                   async_staging_copies=1,
                   # DCP's writer: one file per writer thread a rank (single_file_per_rank), the coordinator's
                   # .metadata beside rank 0's.
                   rank_files="__{rank}_{thread}.distcp", coordinator_files=(".metadata",)),
        EngineInfo("torch_dcp", f"{_WORKLOAD}.engines.dcp",
                   "Megatron-LM's torch_dcp format: DCP of an FSDP2 model's and optimizer's DTensors (--plan only)",
                   {"megatron_fsdp2": _FSDP2}, async_save=False, default_threads=1,
                   storage_kinds=("disk", "s3", "fsspec", "msc"),
                   rank_files="__{rank}_{thread}.distcp", coordinator_files=(".metadata",)),
    )
}


def saved_state(info: EngineInfo, workload: Workload) -> str:
    """Whose tensors `info`'s engine saves of `workload`: the workload's own state where the engine saves it
    (a Megatron experiment's sharded state through dcp), else the engine's first (torch_dist lays a DLIO
    workload out as the llama GPT DLIO counts; torch-save lays a dense Megatron experiment out with DLIO's
    formulas, which refuse a MoE). A job under FSDP2 is sized only by the engines that lay it out."""
    if workload.state == "megatron_fsdp2" and workload.state not in info.layouts:
        raise WorkloadError(f"the {info.name} engine does not lay out a job trained with use_torch_fsdp2 (every "
                            "parameter sharded over the data-parallel ranks): use --engine torch_dist or dcp")
    return workload.state if workload.state in info.layouts else next(iter(info.layouts))


def state_layout(info: EngineInfo, workload: Workload, world_size: int,
                 run_ranks: Sequence[int] | None = None) -> Layout:
    """What every rank writes when `info`'s engine saves `workload` on a job of `world_size` ranks (those of
    `run_ranks` running, in that order; None: all)."""
    module = importlib.import_module(info.layouts[saved_state(info, workload)])
    return module.layout(workload, world_size, run_ranks)
