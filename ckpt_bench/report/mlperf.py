"""MLPerf Storage's checkpointing figures, from the same events as the rest of the report.

Two definitions, both kept because results are compared under each:

* DLIO's own (`summary.json`, `metric.*`): per save, the duration of **rank 0 alone** and
  `checkpoint_size_GB / duration`; their means and standard deviations (`numpy.std`, population); GB is
  2**30 bytes. `checkpoint_size_GB` is DLIO's all-reduced sum of what each rank that ran writes a save (for
  DLIO's own formulas, exactly DLIO's figure: ZeRO-2's unwritten model copies included), which the launcher
  records as `mlperf_checkpoint_bytes` (`Layout.mlperf_checkpoint_bytes`).
* mlpstorage's (MLPerf's submission rules): per save, the duration of the **slowest rank**
  (`mean_of_max_save_duration`) and the throughput from strict times, `checkpoint_size_GB / (latest end -
  earliest start)` over the ranks (`calculated_mean_save_throughput_from_strict_times`), averaged.

`comparability` says whether a run could stand beside a published MLPerf Storage checkpointing result, check
by check, from MLPerf Storage's rules (mlcommons/storage Rules.md, section 4: checkpointing).

Durations are from each rank's own monotonic clock (start after the barrier, end when the engine's call
returned: DLIO's span); strict times need the ranks' wall clocks to agree (one host, or NTP).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass

from ckpt_bench.core.units import GIB
from ckpt_bench.report.engine import Operation


def _mean_stdev(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), statistics.pstdev(values)


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


def _figures(kind: str, operations: list[Operation], size_gb: float) -> dict:
    """DLIO's and mlpstorage's figures for every complete `kind` ("save" | "load") operation."""
    by_call: dict[int | None, list[Operation]] = defaultdict(list)
    for op in operations:
        if op.kind == kind and op.complete:
            by_call[op.iteration].append(op)
    rank0 = [op.block_s() if kind == "save" else op.total_s() for call in by_call.values() for op in call
             if op.rank == 0]
    rank0 = [seconds for seconds in rank0 if seconds]
    durations = []
    strict = []
    for ops in by_call.values():
        spans = [op.block_s() if kind == "save" else op.total_s() for op in ops]
        if not all(spans):
            continue
        durations.append(max(spans))
        starts = [op.start.wall_ns for op in ops]
        ends = [op.start.wall_ns + span * 1e9 for op, span in zip(ops, spans, strict=True)]
        if all(start is not None for start in starts):
            strict.append(size_gb / ((max(ends) - min(starts)) / 1e9))
    duration_mean, duration_stdev = _mean_stdev(rank0)
    io_mean, io_stdev = _mean_stdev([size_gb / seconds for seconds in rank0])
    return {
        f"{kind}_checkpoint_duration_mean_seconds": _round(duration_mean),
        f"{kind}_checkpoint_duration_stdev_seconds": _round(duration_stdev),
        f"{kind}_checkpoint_io_mean_GB_per_second": _round(io_mean),
        f"{kind}_checkpoint_io_stdev_GB_per_second": _round(io_stdev),
        f"mean_of_max_{kind}_duration": _round(statistics.fmean(durations)) if durations else None,
        f"calculated_mean_{kind}_throughput_from_strict_times": _round(statistics.fmean(strict)) if strict else None,
    }


def mlperf_section(operations: list[Operation], checkpoint_bytes: int) -> dict:
    """The report's `mlperf` section: DLIO's `metric.*` names and mlpstorage's, for saves and loads."""
    size_gb = checkpoint_bytes / GIB
    saves, loads = _figures("save", operations, size_gb), _figures("load", operations, size_gb)
    dlio = {key: value for key, value in {**saves, **loads}.items() if not key.startswith(("mean_of", "calculated"))}
    mlpstorage = {key: value for key, value in {**saves, **loads}.items() if key.startswith(("mean_of", "calculated"))}
    return {
        "dlio": {"checkpoint_size_GB": _round(size_gb), **dlio},
        "mlpstorage": mlpstorage,
        "definitions": {
            "GB": "2**30 bytes, as DLIO computes it",
            "dlio": "rank 0's duration of each call (DLIO's summary.json); io = checkpoint_size_GB / that duration",
            "mlpstorage": "mean_of_max: the slowest rank's duration, averaged over calls; strict times: "
                          "checkpoint_size_GB / (latest end - earliest start over the ranks), averaged",
            "stdev": "population standard deviation (numpy.std: divided by n), as DLIO computes it; the report's "
                     "stats.*.stdev is the sample one (divided by n - 1), larger for the same saves",
            "duration": "from the barrier to the end of the engine's call (DLIO's span); for an async save, "
                        "until the save was scheduled: see save_total_time for durable",
        },
    }


def dlio_summary(section: dict, report: dict) -> dict:
    """A DLIO-style `summary.json` of a workload run, for tools that read MLPerf results."""
    config = report.get("config") or {}
    return {
        "workload": config.get("workload"),
        "engine": config.get("engine"),
        "num_accelerators": report.get("world_size"),
        "metric": section["dlio"],
        "mlpstorage": section["mlpstorage"],
        "note": "written by ckpt-bench; metric.* follow DLIO's definitions (rank 0's durations), mlpstorage.* "
                "the slowest rank's",
    }


# --- comparability with published results (mlcommons/storage Rules.md, section 4) ---------------------

# MLPerf's four checkpointing models and the processes CLOSED requires of each (Rules.md 4.3.3, 4.6.1, Table 2).
MLPERF_PROCESSES = {"llama3-8b": 8, "llama3-70b": 64, "llama3-405b": 512, "llama3-1t": 1024}
SUBSET_MODEL = "llama3-8b"  # subset mode is defined for 8B alone (4.3.5; mlcommons/storage #841)
CHECKPOINTS = 10  # writes and reads (4.3.2, 4.6 Table 3)
MIN_PROCESSES_PER_HOST = 4  # 4.6.2, Table 3: "minimal 4"
CACHE_RATIO = 3  # 4.3.1: written per host above 3x its memory, else the cache is cleared before reads
DLIO_ENGINE = "torch-save"  # CLOSED changes only checkpoint_folder (4.6.3): DLIO's own torch.save
# A check's outcome, best first; the verdict is the worst of them.
CLOSED, OPEN, NOT_COMPARABLE = "CLOSED", "OPEN", "not comparable"
RANK = {CLOSED: 0, OPEN: 1, NOT_COMPARABLE: 2}


@dataclass
class Check:
    """One rule a run meets or not: `outcome` is the best division it allows (CLOSED, OPEN, not comparable)."""

    rule: str
    outcome: str
    detail: str


def _gib(nbytes: float) -> str:
    return f"{nbytes / GIB:,.1f} GiB"


def comparability(report: dict) -> dict:
    """`mlperf.comparable` of a workload run's report: {verdict, reasons, checks, rules}. The verdict is the
    best division every check allows: CLOSED (could stand beside CLOSED results), OPEN (beside OPEN results,
    its differences disclosed), or not comparable; `reasons` are the checks that kept it from CLOSED."""
    config = report.get("config") or {}
    workload, engine = config.get("workload"), config.get("engine")
    world, nnodes = report.get("world_size") or 0, config.get("nnodes") or 1
    per_host, subset = config.get("nproc_per_node") or world, config.get("subset")
    saves = [save for save in report.get("saves") or [] if save.get("complete")]
    loads = [load for load in report.get("loads") or ([report["load"]] if report.get("load") else [])
             if load.get("complete", True)]
    measurement = report.get("measurement") or {}
    fsync, cache = measurement.get("fsync", config.get("fsync")), measurement.get("load_cache")
    required = MLPERF_PROCESSES.get(workload)
    checks = [Check("4.3.3 checkpointModelConfigurationReq", CLOSED if required else NOT_COMPARABLE,
                    f"{workload}: one of MLPerf's four models" if required else
                    f"{workload} is not one of MLPerf's four models ({', '.join(MLPERF_PROCESSES)})")]
    if subset:
        valid = workload == SUBSET_MODEL and world == MLPERF_PROCESSES[SUBSET_MODEL]
        checks.append(Check("4.3.5 checkpointSubsetRunValidation", CLOSED if valid else NOT_COMPARABLE,
                            f"subset of {world} of the job's {config.get('job_world_size')} processes: "
                            + ("valid (8B on exactly 8)" if valid else
                               f"valid only for {SUBSET_MODEL} on exactly 8 processes (mlcommons/storage #841)")))
    elif required:
        checks.append(Check("4.6.1 checkpointClosedMpiProcesses", CLOSED if world == required else OPEN,
                            f"the whole job, {world} processes" + ("" if world == required else
                                                                    f" (CLOSED requires {required})")))
    checks.append(Check("4.6.2 checkpointClosedAcceleratorsPerHost",
                        CLOSED if per_host >= MIN_PROCESSES_PER_HOST else NOT_COMPARABLE,
                        f"{per_host} processes per host (at least {MIN_PROCESSES_PER_HOST})"))
    counted = f"{len(saves)} saves and {len(loads)} loads"
    checks.append(Check("4.6 Table 3 --num-checkpoints-write/read",
                        CLOSED if len(saves) == CHECKPOINTS and len(loads) == CHECKPOINTS else OPEN,
                        counted + (" (as CLOSED requires)" if len(saves) == len(loads) == CHECKPOINTS else
                                   f" (CLOSED: {CHECKPOINTS} each; OPEN may change them)")))
    checks.append(Check("4.3.2 checkpointFsyncVerification",
                        {True: CLOSED, False: NOT_COMPARABLE}.get(fsync, OPEN),
                        {True: "every file fsynced before a save counted (DLIO itself never fsyncs: "
                               "docs/workloads.md)",
                         False: "saves were not fsynced (--no-sync-files); every checkpoint write must end in fsync"}
                        .get(fsync, "object storage: no fsync; the rules define no object-store checkpointing "
                                    "(4.5)")))
    checks.append(_cache_check(report, saves, loads, cache, nnodes))
    checks.append(Check("4.6.3 checkpointClosedCheckpointParameters", CLOSED if engine == DLIO_ENGINE else OPEN,
                        f"engine {engine}" + (": DLIO's torch.save" if engine == DLIO_ENGINE else
                                              ": CLOSED runs DLIO's torch.save alone; another engine is an OPEN "
                                              "change, to be disclosed")))
    if report.get("async_save"):
        checks.append(Check("4.6.3 checkpointClosedCheckpointParameters", OPEN,
                            "async saves: DLIO saves synchronously; an OPEN change"))
    verdict = max((check.outcome for check in checks), key=RANK.__getitem__)
    return {
        "verdict": verdict,
        "reasons": [check.detail for check in checks if check.outcome != CLOSED],
        "checks": [asdict(check) for check in checks],
        "rules": "mlcommons/storage Rules.md, section 4 (checkpointing): CLOSED changes only the checkpoint "
                 "folder; OPEN allows other changes, disclosed",
    }


def _cache_check(report: dict, saves: list[dict], loads: list[dict], cache: str | None, nnodes: int) -> Check:
    """4.3.1 / 4.7.1: reads come from storage -- the page cache cleared before them, unless each host wrote
    more than 3x its memory (the cache cannot then hold the checkpoint)."""
    rule = "4.3.1 checkpointDataSizeRatio / 4.7.1 checkpointCacheFlushValidation"
    per_save = report.get("iter_folder_size") or (report.get("config") or {}).get("tensor_bytes_per_save")
    memory = (report.get("environment") or {}).get("memory_bytes")
    written = per_save * len(saves) / nnodes if per_save else None
    ratio = (f"{_gib(written)} written per host against {_gib(memory)} of memory ({written / memory:.2f}x)"
             if written and memory else "the bytes written per host or its memory are not known")
    if not loads:
        return Check(rule, CLOSED, f"no loads; {ratio}")
    if cache == "cold":
        return Check(rule, CLOSED, f"cold loads (the checkpoint evicted from the page cache before each; DLIO's "
                                   f"own loads are warm); {ratio}")
    if written and memory and written > CACHE_RATIO * memory:
        return Check(rule, CLOSED, f"warm loads, but {ratio}: above {CACHE_RATIO}x, the cache cannot hold it")
    return Check(rule, NOT_COMPARABLE, f"warm loads (--warm-load) with {ratio}: below {CACHE_RATIO}x the page "
                                       "cache must be cleared before the reads (drop --warm-load)")
