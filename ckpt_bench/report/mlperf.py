"""MLPerf Storage's checkpointing figures, from the same events as the rest of the report.

Two definitions, both kept because results are compared under each:

* DLIO's own (`summary.json`, `metric.*`): per save, the duration of **rank 0 alone** and
  `checkpoint_size_GB / duration`; their means and standard deviations (`numpy.std`, population); GB is
  2**30 bytes. `checkpoint_size_GB` is what DLIO allocates over the ranks that run (ZeRO-2's unwritten
  model copies included), which the launcher records as `mlperf_checkpoint_bytes`.
* mlpstorage's (MLPerf's submission rules): per save, the duration of the **slowest rank**
  (`mean_of_max_save_duration`) and the throughput from strict times, `checkpoint_size_GB / (latest end -
  earliest start)` over the ranks (`calculated_mean_save_throughput_from_strict_times`), averaged.

Durations are from each rank's own monotonic clock (start after the barrier, end when the engine's call
returned: DLIO's span); strict times need the ranks' wall clocks to agree (one host, or NTP).
"""

from __future__ import annotations

import statistics
from collections import defaultdict

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
