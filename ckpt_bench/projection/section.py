"""The projection section: the whole job's save and restart priced from its checkpoint (`JobCheckpoint`), the
figures given or measured (`ProjectionOptions`, a run's report) and its engine's rank-count costs; what to change,
the hosts' measured floor and the purchase table. Its names are the package's (`ckpt_bench.projection`)."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import psutil

from ckpt_bench.projection.changes import what_to_change
from ckpt_bench.projection.feasibility import Limits
from ckpt_bench.projection.inputs import (
    Figure,
    ProjectionOptions,
    measured_clients,
    measured_host_phases,
    measured_storage,
)
from ckpt_bench.projection.job import JobCheckpoint
from ckpt_bench.projection.model import Inputs, default_requests, project, times
from ckpt_bench.projection.rank_costs import rank_costs
from ckpt_bench.projection.units import GB
from ckpt_bench.report.metrics import steady_saves

__all__ = ["PROJECTION_FILE", "add_projection", "projection", "projection_inputs", "purchase"]

#: A run directory's projection inputs: the job's checkpoint and the figures given.
PROJECTION_FILE = "projection.json"


def _given_or(value: float | None, flag: str, measured: Figure | None, missing: str) -> Figure:
    if value is not None:
        return Figure(value, flag)
    return measured or Figure(None, missing)


def projection(job: JobCheckpoint, options: ProjectionOptions, report: dict | None = None) -> dict:
    """The projection section of `job` with `options`' figures and what `report`'s hosts measured."""
    write, read, why = measured_clients(report, job) if report is not None else (None, None, "no run: --plan")
    client_missing = (f"not given (--client-{{}}-gbps) and not measured: "
                      f"{why or 'the run has no complete {} with its bytes timed'}")
    storage_missing = ("not given (--storage-{}-gbps) nor measured (--storage-baseline on several nodes): the "
                       "storage's ceiling is unknown, so the storage term is not projected")
    write_requests, read_requests, part = default_requests(job, options.storage_requests_per_s)
    storage_write, storage_read = measured_storage(report)
    inputs = Inputs(
        client_write=_given_or(options.client_write_gbps, "--client-write-gbps", write,
                               client_missing.format("write", "save")),
        client_read=_given_or(options.client_read_gbps, "--client-read-gbps", read,
                              client_missing.format("read", "load")),
        storage_write=_given_or(options.storage_write_gbps, "--storage-write-gbps", storage_write,
                                storage_missing.format("write")),
        storage_read=_given_or(options.storage_read_gbps, "--storage-read-gbps", storage_read,
                               storage_missing.format("read")),
        network=_given_or(options.network_gbps, "--network-gbps", None,
                          "not given (--network-gbps): the collectives' bytes are not priced"),
        write_requests=write_requests, read_requests=read_requests,
        host_phases=measured_host_phases(report, job) if report is not None else ())
    try:
        costs = rank_costs(job, options.rank_costs_budget, options.rank_costs_exact, options.rank_costs_time)
    except RuntimeError as error:
        return {"error": str(error), "job": {"ranks": job.world_size, "engine": job.engine}}
    limits = Limits(_host_memory(options.host_memory_gb), options.files_limit)
    section = project(job, costs, inputs, part, limits)
    # What to change compares the model's figures before and after; the hosts' measured floor is a fact of the
    # settings they ran, not of a change's.
    section["what_to_change"] = what_to_change(job, costs, inputs, part, limits, section)
    floor = measured_save_floor(report, job) if report is not None else (None, "")
    floor_saves(section, *floor)
    if options.storage_ceilings:
        section["purchase"] = purchase(job, costs, inputs, part, limits, options.storage_ceilings, floor)
    return section


def measured_save_floor(report: dict, job: JobCheckpoint) -> tuple[float | None, str]:
    """The seconds the hosts that ran took for a steady save (the median over the saves after each process's
    first; a save's time is its slowest rank's): the whole job's save, which those hosts are part of, takes at
    least that. None where the ranks that ran are not whole hosts of the job."""
    if job.hosts_that_ran is None:
        return None, ""
    times = [save["total_time"] for save in steady_saves(report.get("saves") or [])
             if isinstance(save.get("total_time"), (int, float))]
    if not times:
        return None, ""
    median = statistics.median(times)
    return median, (f"the hosts that ran (job host(s) {', '.join(map(str, job.hosts_that_ran))}) measured "
                    f"{median:.3g} s a steady save (median of {len(times)}): the whole job's save takes at least that")


def floor_saves(section: dict, floor: float | None, what: str) -> None:
    """Raise each projected save below `floor` (what its hosts measured) to it, naming the floor as the binding
    limit: the model leaves out what a host pays around its writes (megatron-core's stage, collect and finalize
    phases), which the measurement holds."""
    if floor is None:
        return
    for key in ("save", "second_save", "steady_save"):
        time = section.get(key) or {}
        low, high = (time.get("range_s") or [None, None])[:2]
        if time.get("feasible") is False or low is None or low >= floor:
            continue
        time["range_s"] = [round(floor, 3), None if high is None else round(max(high, floor), 3)]
        time["seconds"] = round(floor, 3) if time["range_s"][1] == time["range_s"][0] else None
        time["could_also_bind"] = sorted({*time.get("could_also_bind", []), time.get("binding")} - {None})
        time["binding"] = "the hosts' measured save"
        time["floor"] = {"seconds": round(floor, 3), "what": what}
        if not time.get("block_note"):  # a synchronous save blocks for all of it
            time["block_range_s"] = time["range_s"]


def purchase(job: JobCheckpoint, costs, inputs: Inputs, part: int | None, limits: Limits,
             ceilings, floor: tuple[float | None, str] = (None, "")) -> list[dict]:
    """What each storage buys: the first save, the later saves and the restart at each (write, read) ceiling,
    from the one computation of the global steps (`costs`), each save at least what the hosts that ran measured
    (`floor`); a ceiling not given keeps the projection's figure."""
    rows = []
    for write, read in ceilings:
        priced = dataclasses.replace(
            inputs,
            storage_write=inputs.storage_write if write is None else Figure(write, "--storage-write-gbps"),
            storage_read=inputs.storage_read if read is None else Figure(read, "--storage-read-gbps"))
        projected = times(job, costs, priced, part, limits)
        floor_saves(projected, *floor)
        rows.append({"storage_write_gbps": write, "storage_read_gbps": read,
                     **{key: {name: projected[key].get(name) for name in
                              ("seconds", "range_s", "block_range_s", "binding", "feasible", "could_also_bind")}
                        for key in ("save", "steady_save", "load")}})
    return rows


def _host_memory(given: float | None) -> Figure:
    """GB a training host has: given, or this machine's (said as such: a login node is rarely a training host)."""
    if given is not None:
        return Figure(given, "--host-memory-gb")
    total = psutil.virtual_memory().total / GB
    return Figure(total, f"this machine's {total:,.0f} GB (give the training hosts' with --host-memory-gb)")


def projection_inputs(job: JobCheckpoint, options: ProjectionOptions) -> dict:
    """What a run's report projects from (its run directory's PROJECTION_FILE)."""
    return {"job": job.as_dict(), "options": dataclasses.asdict(options)}


def add_projection(report: dict, run_dir: Path, given: dict | None = None) -> dict:
    """`report` with its `projection` (in place; returned too) where its run directory has projection inputs;
    `given` (option values, e.g. ckpt_report.py's) replaces the run's own figures."""
    path = Path(run_dir) / PROJECTION_FILE
    if not path.exists():
        return report
    inputs = json.loads(path.read_text())
    values = {**inputs["options"], **{k: v for k, v in (given or {}).items() if v is not None}}
    report["projection"] = projection(JobCheckpoint.from_dict(inputs["job"]), ProjectionOptions(**values), report)
    return report
