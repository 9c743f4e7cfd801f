"""Whether the job's hosts can hold a save and a restart, before how long they take, and what its checkpoints take
on storage.

Host memory (a lower bound on what the checkpoint adds to a training host's own):
    save     every rank holds what it writes in host memory: megatron-core's and DCP's writers stage it there
             (`FileSystemWriterAsync`'s preload, sync and async alike), and the legacy format gathers the
             distributed optimizer's state onto data-parallel rank 0 in fp32 before `torch.save`s it
             (`get_parameter_state_dp_zero`, distrib_optimizer.py 1010-1036)
    restart  the legacy format and DLIO's `torch.load` whole files onto the host (every rank its model file,
             data-parallel rank 0 the optimizer's; with `auto_detect_ckpt_format` rank 0's model file first,
             checkpointing.py 1507); DCP and torch_dist read into the ranks' tensors, and every rank unpickles
             `.metadata` (at least its file's size each)
Files: one checkpoint's files, and those the retention keeps, against a limit where one is given.
Capacity: the retention the experiment sets (`save_retain_interval`: Megatron-LM keeps every checkpoint without
it; with it, those at its multiples and the latest, checkpointing.py 716-760), and the peak while a save writes
the next one beside them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ckpt_bench.projection.inputs import Figure
from ckpt_bench.projection.job import JobCheckpoint
from ckpt_bench.projection.rank_costs import RankCosts
from ckpt_bench.projection.units import GB, gb, plural

__all__ = ["LOADS_WHOLE_FILES", "Limits", "capacity", "feasibility"]

#: Engines whose restart `torch.load`s whole files into host memory.
LOADS_WHOLE_FILES = ("torch", "torch-save")


@dataclass(frozen=True)
class Limits:
    """What the job's hosts and storage can hold."""

    host_memory: Figure = field(default_factory=lambda: Figure(None, "not given (--host-memory-gb)"))
    """GB (10^9 bytes) of memory a host has."""
    files_limit: int | None = None
    """Files the storage may hold for the job's checkpoints (an inode quota); None: no limit given."""


def _per_host(rank_bytes: tuple[int, ...], per_node: int) -> tuple[int, int]:
    """(host, bytes) of the host whose ranks hold the most."""
    hosts = [sum(rank_bytes[start:start + per_node]) for start in range(0, len(rank_bytes), per_node)]
    host = max(range(len(hosts)), key=lambda h: (hosts[h], -h))
    return host, hosts[host]


def _check(needed: int, host: int, limits: Limits, what: str, operation: str) -> dict:
    memory = limits.host_memory.value
    fits = None if memory is None else needed <= memory * GB
    if fits is False:
        words = (f"cannot run on hosts of {memory:,.0f} GB ({limits.host_memory.source}): host {host} holds at least "
                 f"{gb(needed)} for the {operation} ({what})")
    else:
        words = f"host {host} holds at least {gb(needed)} for the {operation} ({what})"
    return {"host": host, "bytes_needed": needed, "fits": fits, "what": words}


def feasibility(job: JobCheckpoint, costs: RankCosts, limits: Limits) -> dict:
    """Host memory for a save and a restart against `limits.host_memory`, and files against `limits.files_limit`:
    `fits` True, False, or None where the limit is unknown."""
    per = job.ranks_per_node
    host, needed = _per_host(job.write_bytes, per)
    if job.engine == "torch":
        staged = ("data-parallel rank 0 of each group gathers the distributed optimizer's state in fp32 and "
                  "torch.saves it with its model file")
    elif job.engine in LOADS_WHOLE_FILES:
        staged = "each rank's share gathered and serialized by torch.save"
    else:
        staged = "each rank's share staged in host memory by the writer"
    save = _check(needed, host, limits, staged, "save")
    if job.engine in LOADS_WHOLE_FILES:
        host, needed = _per_host(job.read_bytes, per)
        what = "every rank torch.loads the files it reads whole"
        if job.auto_detect_read_bytes:
            what += f", {gb(job.auto_detect_read_bytes)} of them rank 0's model file (auto_detect_ckpt_format)"
    else:
        host, needed = 0, (costs.metadata_file_bytes or 0) * per
        what = "every rank unpickles .metadata"
    load = _check(needed, host, limits, what, "restart")
    if job.engine not in LOADS_WHOLE_FILES and costs.every_rank_reads_metadata and not costs.metadata_file_bytes:
        load |= {"fits": None, "what": "every rank unpickles .metadata, whose size was not computed (the global "
                 "plan's budget ran out): unknown"}
    files = job.save.total_files + (1 if costs.metadata_file_bytes else 0)
    files_check = {"files_a_checkpoint": files, "limit": limits.files_limit, "fits": None}
    if limits.files_limit is not None:
        saves = job.checkpoint_settings.saves_per_run()
        kept = job.checkpoint_settings.kept(saves) if job.settings is not None and saves is not None else None
        total = files * (kept or 1)
        files_check["fits"] = total <= limits.files_limit
        files_check["what"] = (f"{plural(total, 'file')} ({plural(kept or 1, 'checkpoint')} kept) against a limit "
                               f"of {limits.files_limit:,}")
    return {"host_memory_gb": limits.host_memory.as_dict(), "save": save, "load": load, "files": files_check}


def capacity(job: JobCheckpoint, costs: RankCosts) -> dict:
    """The storage the experiment's checkpoints take: one checkpoint, those its retention keeps after its run's
    saves, and the peak while the next one is written beside them."""
    size = job.save.total_bytes + (costs.metadata_file_bytes or 0)
    result: dict = {"checkpoint_bytes": size}
    settings = job.checkpoint_settings
    saves = settings.saves_per_run()
    if job.settings is None or saves is None:
        result["why"] = ("the experiment's train_iters and save_interval are not both known: only one "
                         "checkpoint's bytes" if job.settings is not None else
                         "not a Megatron experiment: no retention to follow, one checkpoint's bytes")
        return result
    kept = settings.kept(saves)
    retained = settings.save_retain_interval is not None
    result |= {
        "saves_per_run": saves,
        "checkpoints_kept": kept,
        "footprint_bytes": kept * size,
        # a save writes the next checkpoint before the retention deletes the previous one
        "peak_bytes": (kept + (1 if retained and saves > 1 else 0)) * size,
        "retention": (f"save_retain_interval {settings.save_retain_interval}: the checkpoints at its multiples "
                      "and the latest" if retained else
                      f"save_retain_interval null: every checkpoint is kept, {gb(size)} more every "
                      f"{settings.save_interval:,} iterations"),
        "what": (f"{plural(saves, 'save')} in {settings.train_iters:,} iterations (save_interval "
                 f"{settings.save_interval:,}), {plural(kept, 'checkpoint')} kept: {gb(kept * size)}"),
    }
    return result
