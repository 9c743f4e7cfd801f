"""The checkpoint engines a workload is saved and loaded through, one file each, listed once here.

    torch-save   DLIO's own way (MLPerf Storage): every rank `torch.save`s its files, DLIO's names
    torch_dist   megatron-core `dist_checkpointing` (Megatron-LM's default format): sharded tensors,
                 fully-parallel save and load, async, the persistent writer
    torch        Megatron-LM's legacy format: `model_optim_rng.pt` (and `distrib_optim.pt`) per model-parallel
                 rank folder, `torch.save`d (the torch-save engine's code over Megatron's files)
    dcp          PyTorch Distributed Checkpoint: writer threads, async, disk, S3 and fsspec

This module is the launcher's view (no torch): what each engine reads and supports. The worker side of
`NAME` is the module `ENGINES[NAME].module`, whose `ENGINE` class (an `engines.base.Engine`) the ranks use.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineInfo:
    """An engine, as the launcher checks options against it and the report describes it."""

    name: str
    """`--engine NAME`."""
    module: str
    """The worker-side module; its `ENGINE` is the engine's class."""
    writes: str
    """What it writes, in a few words, for --help and the report."""
    state: str
    """Whose tensors it saves: "dlio" (DLIO's per-rank tensors, DLIO's bytes), "megatron" (the sharded tensors
    of a Megatron GPT and its optimizer) or "megatron-torch" (the same model in Megatron-LM's legacy files)."""
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


ENGINES: dict[str, EngineInfo] = {
    info.name: info for info in (
        EngineInfo("torch-save", "ckpt_bench.backends.workload.engines.torch_save",
                   "torch.save of each rank's files with DLIO's names (MLPerf Storage's way)", "dlio",
                   async_save=False, default_threads=None, storage_kinds=("disk", "s3", "fsspec")),
        EngineInfo("torch_dist", "ckpt_bench.backends.workload.engines.torch_dist",
                   "megatron-core dist_checkpointing, torch_dist format, fully-parallel save and load", "megatron",
                   # 2 writer threads a rank: Megatron-LM's default (--ckpt-fully-parallel-save's torch_dist strategy)
                   async_save=True, default_threads=2, storage_kinds=("disk",), async_staging_copies=1,
                   always_fsyncs=True),
        EngineInfo("torch", "ckpt_bench.backends.workload.engines.torch_save",
                   "Megatron-LM's legacy torch format: mp_rank_* folders of model_optim_rng.pt and distrib_optim.pt",
                   "megatron-torch", async_save=False, default_threads=None, storage_kinds=("disk", "s3", "fsspec")),
        EngineInfo("dcp", "ckpt_bench.backends.workload.engines.dcp",
                   "torch.distributed.checkpoint with writer threads", "dlio",
                   async_save=True, default_threads=1, storage_kinds=("disk", "s3", "fsspec"), async_staging_copies=1,
                   # DCP's writer: one file per writer thread a rank (single_file_per_rank), the coordinator's
                   # .metadata beside rank 0's.
                   rank_files="__{rank}_{thread}.distcp", coordinator_files=(".metadata",)),
    )
}


def state_layout(info: EngineInfo, workload, world_size: int, subset_ranks: int | None):
    """The `checkpoint_layout.Layout` of what `info`'s engine saves: DLIO's tensors, or a Megatron GPT's."""
    if info.state == "megatron":
        from ckpt_bench.backends.workload.megatron_shapes import layout as megatron_layout

        return megatron_layout(workload, world_size, subset_ranks)
    if info.state == "megatron-torch":
        from ckpt_bench.backends.workload.megatron_torch import layout as megatron_torch_layout

        return megatron_torch_layout(workload, world_size, subset_ranks)
    from ckpt_bench.backends.workload.dlio_layout import layout

    return layout(workload, world_size, subset_ranks)
