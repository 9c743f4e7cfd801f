"""What to change: for the job as its experiment runs it, each setting that moves a projected figure (the
binding limit, or a save or restart the hosts cannot hold), projected again with that setting, from the same
computation of the engine's global steps (`schedule` picks the steps each setting runs).

    torch_dist   ckpt_fully_parallel_load (a restart reads each replica once per data-parallel group instead of
                 every rank reading all it holds), ckpt_assume_constant_structure (later saves skip the
                 validation, the distribution and, from the third, the plan), async_save with
                 use_persistent_ckpt_worker (training waits for the steps and the finalize, not the write),
                 ckpt_fully_parallel_save (replicas written once, spread over the data-parallel group)
    torch        ckpt_format torch_dist (every host writes its share instead of data-parallel rank 0's host
                 writing all; no fp32 gather onto one host), auto_detect_ckpt_format off (no rank reads rank 0's
                 model file first)

A change to another format prices its global steps where they were computed before (`--plan --engine
torch_dist` leaves them in the cache); otherwise its times are lower bounds: the transfer alone.
"""

from __future__ import annotations

import dataclasses

from ckpt_bench.model.checkpointing import TORCH_DIST_COORDINATOR_FILES, TORCH_DIST_WRITER_THREADS
from ckpt_bench.projection.feasibility import Limits
from ckpt_bench.projection.job import JobCheckpoint
from ckpt_bench.projection.model import TIMES, Inputs, times
from ckpt_bench.projection.rank_costs import RankCosts, cached_rank_costs

__all__ = ["what_to_change"]

#: The figures a change is judged on, as the summary names them.
FIGURES = {"save": "first save", "steady_save": "later saves", "load": "restart"}


def _files(rank_bytes: tuple[int, ...], threads: int, coordinator: int) -> tuple[int, ...]:
    return tuple((threads if size else 0) + (coordinator if rank == 0 else 0) for rank, size in enumerate(rank_bytes))


def _with(job: JobCheckpoint, **settings) -> JobCheckpoint:
    changed = job.checkpoint_settings.replace(**settings)
    return dataclasses.replace(job, settings=changed.as_dict())


def _torch_dist_changes(job: JobCheckpoint) -> list[tuple[str, JobCheckpoint, str]]:
    settings, changes = job.checkpoint_settings, []
    parallel = job.fully_parallel_bytes
    if not settings.ckpt_fully_parallel_load and parallel is not None:
        reads = tuple(size + job.auto_detect_read_bytes for size in parallel)
        changes.append(("ckpt_fully_parallel_load: true",
                        dataclasses.replace(_with(job, ckpt_fully_parallel_load=True), read_bytes=reads,
                                            read_files=_files(reads, job.thread_count, 0)),
                        "each replicated shard is read once per data-parallel group and exchanged over the network, "
                        "instead of every rank reading every shard it holds"))
    if not settings.ckpt_assume_constant_structure:
        changes.append(("ckpt_assume_constant_structure: true", _with(job, ckpt_assume_constant_structure=True),
                        "a process's later saves skip the sharding validation and the distribution, and from the "
                        "third the global plan (every restart's first save pays them again)"))
    if not job.async_save:
        changes.append(("async_save, use_persistent_ckpt_worker: true",
                        dataclasses.replace(_with(job, async_save=True, use_persistent_ckpt_worker=True),
                                            async_save=True),
                        "training waits for the global steps, the finalize and the staging copy, not the write"))
    if not settings.ckpt_fully_parallel_save and parallel is not None:
        changes.append(("ckpt_fully_parallel_save: true",
                        dataclasses.replace(_with(job, ckpt_fully_parallel_save=True), write_bytes=parallel,
                                            write_files=_files(parallel, job.thread_count,
                                                               len(TORCH_DIST_COORDINATOR_FILES))),
                        "each replicated shard is written once, spread over its data-parallel group"))
    return changes


def _torch_changes(job: JobCheckpoint) -> list[tuple[str, JobCheckpoint, str]]:
    settings, changes = job.checkpoint_settings, []
    if job.fully_parallel_bytes is not None and job.held_bytes is not None:
        reads = job.fully_parallel_bytes if settings.ckpt_fully_parallel_load else job.held_bytes
        threads = TORCH_DIST_WRITER_THREADS
        changes.append(("ckpt_format: torch_dist", dataclasses.replace(
            job, engine="torch_dist", thread_count=threads, write_bytes=job.fully_parallel_bytes,
            write_files=_files(job.fully_parallel_bytes, threads, len(TORCH_DIST_COORDINATOR_FILES)), read_bytes=reads,
            read_files=_files(reads, threads, 0), auto_detect_read_bytes=0),
            "every host writes its share (megatron-core's fully parallel save) instead of data-parallel rank 0's "
            "host writing the whole checkpoint, with no fp32 gather onto one host; the restart reads as "
            f"ckpt_fully_parallel_load ({str(settings.ckpt_fully_parallel_load).lower()}) says"))
    if settings.auto_detect_ckpt_format and job.auto_detect_read_bytes:
        reads = tuple(max(0, size - job.auto_detect_read_bytes) for size in job.read_bytes)
        changes.append(("auto_detect_ckpt_format: false", dataclasses.replace(
            _with(job, auto_detect_ckpt_format=False), read_bytes=reads, auto_detect_read_bytes=0),
            "no rank loads rank 0's model file first to find the format"))
    return changes


def _costs_of(job: JobCheckpoint, base: JobCheckpoint, costs: RankCosts) -> RankCosts:
    """The global steps of `job`: the base's where the engine is the same, else those cached for it (None
    computed here: its times are then lower bounds, the transfer alone)."""
    if job.engine == base.engine:
        return costs
    return cached_rank_costs(job) or RankCosts(job.engine, job.world_size, [], notes=[
        f"the {job.engine} engine's global steps at {job.world_size:,} ranks are not computed for this change "
        f"(--plan --engine {job.engine} computes and caches them): its times are lower bounds"])


def _range(time: dict) -> list:
    return time.get("range_if_it_ran_s") if time.get("feasible") is False else time.get("range_s")


def _effect(key: str, before: dict, after: dict, blocking: bool) -> dict | None:
    field = "block_range_s" if blocking else "range_s"
    old, new = before.get(field) or [None, None], after.get(field) or [None, None]
    if before.get("feasible") is not False and old == new and before.get("binding") == after.get("binding"):
        return None
    return {"figure": FIGURES[key] + (" (training blocked)" if blocking else ""),
            "before": {"range_s": old if before.get("feasible") is not False else _range(before),
                       "binding": before.get("binding"), "feasible": before.get("feasible")},
            "after": {"range_s": new if after.get("feasible") is not False else _range(after),
                      "binding": after.get("binding"), "feasible": after.get("feasible")}}


def _gain(effects: list[dict]) -> float:
    """Seconds saved on the figure that moves most (a figure made feasible first)."""
    best = 0.0
    for effect in effects:
        if effect["before"]["feasible"] is False and effect["after"]["feasible"] is not False:
            return float("inf")
        old, new = effect["before"]["range_s"][0], effect["after"]["range_s"][0]
        if old is not None and new is not None:
            best = max(best, old - new)
    return best


def what_to_change(job: JobCheckpoint, costs: RankCosts, inputs: Inputs, part_bytes: int | None, limits: Limits,
                   section: dict) -> list[dict]:
    """Each change that moves a figure of `section` (the job's own projection), with the figures before and
    after, the most effective first."""
    if job.state not in ("megatron", "megatron_fsdp2"):
        return []
    candidates = _torch_dist_changes(job) if job.engine == "torch_dist" else (
        _torch_changes(job) if job.engine == "torch" else [])
    results = []
    for change, changed, why in candidates:
        changed_costs = _costs_of(changed, job, costs)
        after = times(changed, changed_costs, inputs, part_bytes, limits)
        effects = [effect for key, _ in TIMES if key in FIGURES
                   if (effect := _effect(key, section[key], after[key], False))]
        if changed.async_save and not job.async_save:
            effects.append(_effect("steady_save", section["steady_save"], after["steady_save"], True))
        effects = [effect for effect in effects if effect]
        if _gain(effects) <= 0:  # advice only: a change that moves nothing for the better is not one
            continue
        results.append({"change": change, "why": why, "effects": effects,
                        "steps_computed": bool(changed_costs.steps) or not costs.steps,
                        "notes": list(changed_costs.notes) if changed_costs is not costs else []})
    return sorted(results, key=lambda result: -_gain(result["effects"]))

