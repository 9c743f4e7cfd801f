"""The whole job's save and restart, term by term, and the limit that binds.

A save (a restart) is the engine's global steps one after the other -- each its CPU on the busiest rank
(computed at the job's size, `rank_costs`) plus its collective's bytes on the busiest host over the network
figure -- and the transfer of the bytes, which three limits bound at once, so the slowest of them sets it:

    client    the busiest host's bytes / what one host moves (GB/s)
    storage   the job's bytes / what the storage absorbs from every host at once (GB/s)
    requests  the job's files (objects, parts) / the requests a second the storage takes

    time = sum(global steps) + max(client, storage, requests) + the metadata file (written by one host)

Each term is a range (low, high): equal where its inputs are measured or given; open where an input is a bound
(a storage ceiling not reached: the storage term is at most its bytes over that figure) or unknown (high None).
The binding limit is the term whose low is largest; terms that could still exceed it are named beside it.
Which global steps a save runs depends on the experiment's settings and on how many saves its process has
made (`schedule`): a process's first save (every restart's), its second, and its third and later each get their
own time. An async save blocks training for its global steps and its finalize (and its staging copy, not
projected: the block time is a lower bound); its total is the save's. Where the hosts cannot hold a save or a
restart (`feasibility`) it has no time, only what it would take if it ran.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ckpt_bench.projection.feasibility import Limits, capacity, feasibility
from ckpt_bench.projection.inputs import S3_GETS_PER_S, S3_PART_BYTES, S3_PUTS_PER_S, Figure
from ckpt_bench.projection.job import JobCheckpoint, Traffic
from ckpt_bench.projection.rank_costs import RankCosts, Step
from ckpt_bench.projection.rank_costs.base import CHECK_SPREAD
from ckpt_bench.projection.schedule import load_steps, save_steps
from ckpt_bench.projection.units import GB, gb, plural

__all__ = ["TIMES", "Inputs", "Term", "fit_span", "gb", "page_cached_reads", "plural", "project", "times"]


@dataclass(frozen=True)
class Inputs:
    client_write: Figure
    client_read: Figure
    storage_write: Figure
    storage_read: Figure
    network: Figure
    write_requests: Figure
    read_requests: Figure
    host_phases: tuple[tuple[str, float, str], ...] = ()
    """(phase, seconds, source) a host pays in each save around its writes, measured on the hosts that ran
    (`inputs.measured_host_phases`: torch_dist's staging copy)."""

    def as_dict(self) -> dict:
        return {"client_write_gbps": self.client_write.as_dict(), "client_read_gbps": self.client_read.as_dict(),
                "storage_write_gbps": self.storage_write.as_dict(), "storage_read_gbps": self.storage_read.as_dict(),
                "network_gbps": self.network.as_dict(), "write_requests_per_s": self.write_requests.as_dict(),
                "read_requests_per_s": self.read_requests.as_dict(),
                "host_phases": [{"phase": name, "seconds": round(seconds, 4), "source": source}
                                for name, seconds, source in self.host_phases]}


@dataclass
class Term:
    name: str
    kind: str
    """"step" (one after another) or "transfer" (at once: the slowest counts)."""
    low: float | None
    high: float | None
    what: str

    def as_dict(self) -> dict:
        exact = self.low is not None and self.high is not None and math.isclose(self.low, self.high)
        return {"name": self.name, "kind": self.kind, "seconds": _r(self.low) if exact else None,
                "range_s": [_r(self.low), _r(self.high)], "what": self.what}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _over(amount: float, figure: Figure, unit: float = GB) -> tuple[float | None, float | None]:
    """(low, high) seconds to move `amount` at `figure`: exact for a value, [0, amount / value] for a lower
    bound on the rate, unknown without one."""
    if not amount:
        return 0.0, 0.0
    if figure.value is None:
        return 0.0, None
    seconds = amount / unit / figure.value
    return (0.0, seconds) if figure.at_least else (seconds, seconds)


def _cpu_range(step: Step) -> tuple[float, float | None]:
    """(low, high) CPU seconds of a step: a point where computed over every rank at the job's size, the fit's
    range where extrapolated (a factor either way: CPU / (1 + error) to CPU x (1 + error); open above where its error
    is unknown), the sample's (CPU x (1 +- error)) where computed over a sample of
    the ranks, at least the CPU spent where cut short."""
    cpu = step.cpu_s or 0.0
    if not step.complete:
        return cpu, None
    if step.extrapolated:  # a power law's error is a factor, either way
        error = step.extrapolated.get("error")
        return (cpu, None) if error is None else (cpu / (1 + error), cpu * (1 + error))
    if step.rank_sample:
        error = step.rank_sample["error"]
        return cpu * max(0.0, 1 - error), cpu * (1 + error)
    if _checks_counted(step):  # at the job's size, its checks priced at a sample's time a check
        return cpu / (1 + CHECK_SPREAD), cpu * (1 + CHECK_SPREAD)
    return cpu, cpu


def fit_span(error: float) -> str:
    """A fit's error as the range it gives a figure: "-44 %/+80 %" for a factor of 1.8 either way."""
    return f"-{error / (1 + error):.0%}/+{error:.0%}"


def _checks_counted(step: Step) -> bool:
    return bool(step.pairwise) and step.pairwise.get("check_s") is not None


def _step_term(label: str, step: Step, network: Figure) -> Term:
    """A global step: its CPU (a lower bound at the CPU it spent where cut short, the fit's range where
    extrapolated) and its collective's bytes over the network."""
    sent_low, sent_high = _over(step.host_bytes or 0, network)
    if step.cpu_s is None and step.host_bytes is None:
        return Term(label, "step", 0.0, None, f"{step.what}: {step.why or 'not computed'}")
    cpu_low, cpu_high = _cpu_range(step)
    high = None if sent_high is None or cpu_high is None else cpu_high + sent_high
    how = "computed here"
    if step.extrapolated:
        error = step.extrapolated.get("error")
        how = ("extrapolated from copies of the job with fewer layers, "
               + (f"fit error {fit_span(error)}" if error is not None else "fit error unknown"))
    elif step.rank_sample:
        how = (f"computed here over {step.rank_sample['ranks']} of its {step.rank_sample['of']:,} ranks' plans and "
               f"scaled, +-{step.rank_sample['error']:.0%}")
    if _checks_counted(step):
        pairwise = step.pairwise
        how += (f"; its validation's {pairwise['checks']:,} pairwise overlap checks counted, "
                + (f"{pairwise['timed']:,} of them run" if pairwise["timed"] else "those of the copies sampled")
                + f" at {pairwise['check_s'] * 1e6:.2f} us a check")
    if step.assignment:
        how += (f"; its greedy assignment timed over {step.assignment['timed']:,} of its {step.assignment['shards']:,} "
                "shards and scaled")
    parts = [f"{'at least ' if not step.complete else ''}{step.cpu_s:.3g} s CPU ({how})"
             if step.cpu_s is not None else None,
             f"{gb(step.host_bytes)} on the busiest host's network" if step.host_bytes else None]
    return Term(label, "step", cpu_low + (sent_low or 0.0), high,
                f"{step.what}: " + ", ".join(p for p in parts if p) + ("" if step.complete else f" ({step.why})"))


def _requests(traffic: Traffic, part_bytes: int | None) -> int:
    """Requests one save (load) makes: a request a file, or a part (multipart objects) on S3."""
    total = 0
    for size, files in zip(traffic.rank_bytes, traffic.rank_files, strict=True):
        if files:
            per_file = size / files
            total += files * (max(1, math.ceil(per_file / part_bytes)) if part_bytes else 1)
    return total


def _transfer(traffic: Traffic, client: Figure, storage: Figure, requests: Figure,
              part_bytes: int | None, verb: str, cached: list[int] | None = None) -> list[Term]:
    """The three transfer limits of a save (`verb` "write") or a load ("read"); `cached`: each host's bytes where
    its page cache serves what several of its ranks read once, the low end of the client and storage terms (the
    high end: every rank's reads from storage)."""
    busiest = traffic.busiest()
    count = _requests(traffic, part_bytes)
    if requests.value is None:  # no known limit: not a term (its count is in the traffic)
        limit = Term("requests", "transfer", None, None, f"{plural(count, 'request')} "
                     f"({plural(traffic.total_files, 'file')}): not projected, {requests.source}")
    else:
        limit = Term("requests", "transfer", *_over(count, requests, unit=1),
                     f"{plural(count, 'request')} ({plural(traffic.total_files, 'file')}"
                     f"{', in parts' if part_bytes else ''}) at {requests.value:,.0f} a second ({requests.source})")
    client_range, storage_range = _over(busiest.bytes, client), _over(traffic.total_bytes, storage)
    client_once = storage_once = ""
    if cached is not None:
        host = max(range(len(cached)), key=lambda h: (cached[h], -h))
        client_range = (_over(cached[host], client)[0], client_range[1])
        storage_range = (_over(sum(cached), storage)[0], storage_range[1])
        which = "" if host == busiest.host else f"host {host} the most, "
        client_once = f" ({which}{gb(cached[host])} with its page cache serving its ranks' shared replicas once)"
        storage_once = f" ({gb(sum(cached))} with each host's page cache serving its ranks' shared replicas once)"
    return [
        Term("client", "transfer", *client_range,
             f"the busiest host (host {busiest.host}, {plural(busiest.ranks, 'rank')} {verb.removesuffix('e')}ing) "
             f"{verb}s {gb(busiest.bytes)}{client_once} at {_figure(client)} a host"),
        Term("storage", "transfer", *storage_range,
             f"the job {verb}s {gb(traffic.total_bytes)}{storage_once} from {plural(traffic.active_hosts, 'host')} "
             f"at {_figure(storage)} in all"),
        limit,
    ]


def _figure(figure: Figure) -> str:
    if figure.value is None:
        return "an unknown rate"
    return f"{'at least ' if figure.at_least else ''}{figure.value:.4g} GB/s"


def _combine(all_terms: list[Term]) -> dict:
    """The time of a save or load from its terms (those projected), the binding limit, and what could still
    bind."""
    terms = [t for t in all_terms if not (t.low is None and t.high is None)]
    steps = [t for t in terms if t.kind == "step"]
    transfer = [t for t in terms if t.kind == "transfer"]
    low = sum(t.low or 0.0 for t in steps) + max((t.low or 0.0 for t in transfer), default=0.0)
    highs = [t.high for t in terms]
    high = None if any(h is None for h in highs) else (
        sum(t.high for t in steps) + max((t.high for t in transfer), default=0.0))
    groups = [*transfer, Term("rank-count steps", "step", sum(t.low or 0.0 for t in steps),
                              None if any(t.high is None for t in steps) else sum(t.high for t in steps), "")]
    binding = max(groups, key=lambda t: t.low or 0.0)
    others = [t.name for t in groups if t is not binding and (t.high is None or t.high > (binding.low or 0.0))]
    exact = high is not None and math.isclose(low, high)
    return {"seconds": _r(low) if exact else None, "range_s": [_r(low), _r(high)], "binding": binding.name,
            "could_also_bind": others, "terms": [t.as_dict() for t in all_terms]}


def _save(job: JobCheckpoint, costs: RankCosts, inputs: Inputs, part_bytes: int | None, nth: int) -> dict:
    """The `nth` save of a process (1, 2, 3: the third and later) at the job's settings."""
    settings = job.checkpoint_settings
    terms = [_step_term(label, step, inputs.network) for label, step in save_steps(costs, settings, nth)]
    terms += [Term(f"{name} (measured)", "step", seconds, seconds, f"each host's {name} phase around its writes: "
                   f"{seconds:.3g} s, {source}") for name, seconds, source in inputs.host_phases]
    terms += _transfer(job.save, inputs.client_write, inputs.storage_write, inputs.write_requests, part_bytes,
                       "write")
    if costs.metadata_file_bytes:
        terms.append(Term("metadata file", "step", *_over(costs.metadata_file_bytes, inputs.client_write),
                          f"rank 0 writes the {gb(costs.metadata_file_bytes)} .metadata after every "
                          "rank's write (its host's client rate)"))
    result = _combine(terms)
    if job.async_save:
        # The write goes on in the background; the steps before it and the finalize (at a later iteration, in the
        # training loop: async_utils.py 602-607) block training, and so does the staging copy, not projected.
        blocking = [t for t in terms if t.kind == "step"]
        result["block_range_s"] = [_r(sum(t.low or 0.0 for t in blocking)), None]
        result["block_note"] = ("an async save blocks training for its global steps before the write, its finalize "
                                "at a later iteration (write results gathered, .metadata written) and its staging "
                                "copy (device to host), which is not projected: a lower bound")
    else:
        result["block_range_s"] = result["range_s"]
    return result


def _load(job: JobCheckpoint, costs: RankCosts, inputs: Inputs, part_bytes: int | None) -> dict:
    traffic = job.load
    reads = 2 if job.engine == "torch_dist" and job.checkpoint_settings.ckpt_fully_parallel_load else 1
    metadata = reads * costs.metadata_file_bytes if costs.every_rank_reads_metadata and costs.metadata_file_bytes else 0
    if metadata:
        # every rank reads .metadata (twice under the fully parallel load): its bytes join each rank's reads
        traffic = Traffic(tuple(size + metadata for size in traffic.rank_bytes),
                          tuple(files + 1 for files in traffic.rank_files), traffic.ranks_per_node)
    cached = page_cached_reads(job)
    terms = [_step_term(label, step, inputs.network) for label, step in load_steps(costs, job.checkpoint_settings)]
    terms += _transfer(traffic, inputs.client_read, inputs.storage_read, inputs.read_requests, part_bytes, "read",
                       None if cached is None else [size + metadata for size in cached])
    return _combine(terms)


def page_cached_reads(job: JobCheckpoint) -> list[int] | None:
    """Each host's restart reads with its page cache serving bytes its ranks share once, where that can differ from
    every rank's own, from a file system: a torch_dist restart without the fully parallel load (each rank reads
    every shard it holds, its data-parallel replicas' too), or the legacy format's (a model-parallel folder's
    replicas read its model file). None elsewhere: an object store's reads are each a request of their own, and
    the fully parallel load reads each shard once in a group."""
    if job.storage != "disk":
        return None
    if job.engine == "torch_dist" and not job.checkpoint_settings.ckpt_fully_parallel_load and job.host_held_bytes:
        once = [held + job.auto_detect_read_bytes for held in job.host_held_bytes]
    elif job.engine == "torch" and job.legacy_host_read_bytes:
        detects = job.legacy_host_detect_bytes if job.auto_detect_read_bytes else None
        once = [size + (detects[host] if detects else 0) for host, size in enumerate(job.legacy_host_read_bytes)]
    else:
        return None
    counted = [host.bytes for host in job.load.hosts()]
    cached = [min(count, host) for count, host in zip(counted, once, strict=True)]
    return None if cached == counted else cached


def default_requests(job: JobCheckpoint, given: float | None) -> tuple[Figure, Figure, int | None]:
    """(write, read) request rates and the multipart part size: given, or AWS S3's per-prefix rates for an s3://
    checkpoint on AWS; unknown elsewhere (a file system's create rate, another object store's limits)."""
    part = (job.storage_part_bytes or S3_PART_BYTES) if job.storage == "s3" else None
    if given is not None:
        figure = Figure(given, "--storage-requests-per-s")
        return figure, figure, part
    if job.storage == "s3" and job.storage_endpoint is None:
        return (Figure(S3_PUTS_PER_S, "AWS S3's PUT rate a prefix (every file of a save shares the checkpoint's)"),
                Figure(S3_GETS_PER_S, "AWS S3's GET rate a prefix"), part)
    unknown = Figure(None, "not given (--storage-requests-per-s): the request limit is not projected")
    return unknown, unknown, part


def project(job: JobCheckpoint, costs: RankCosts, inputs: Inputs, part_bytes: int | None,
            limits: Limits | None = None) -> dict:
    """The projection section: the job, its settings, what a save and a restart move, the inputs, each time with
    its terms, whether the hosts can hold it, and the storage it takes."""
    return {
        "job": {"ranks": job.world_size, "nodes": job.nodes, "ranks_per_node": job.ranks_per_node,
                "engine": job.engine, "storage": job.storage, "async_save": job.async_save,
                "hosts_that_ran": None if job.hosts_that_ran is None else list(job.hosts_that_ran)},
        "settings": settings_section(job),
        "save_traffic": job.save.as_dict(),
        "load_traffic": _load_traffic(job),
        "inputs": inputs.as_dict(),
        **times(job, costs, inputs, part_bytes, limits or Limits()),
        "capacity": capacity(job, costs),
        "rank_costs": costs.as_dict(),
        "units": {"bytes": "bytes", "rates": "GB/s = 10^9 bytes a second", "seconds": "s"},
        "notes": list(job.notes) + list(costs.notes) + _page_cache_note(job),
    }


def _load_traffic(job: JobCheckpoint) -> dict:
    traffic = job.load.as_dict()
    cached = page_cached_reads(job)
    if cached is not None:
        traffic["page_cached"] = {"bytes": sum(cached), "busiest_host_bytes": max(cached)}
    return traffic


def _page_cache_note(job: JobCheckpoint) -> list[str]:
    """Where a host's page cache may serve its ranks' shared replicas once (`page_cached_reads`): the restart's
    transfer is then a range (docs/projection.md)."""
    cached = page_cached_reads(job)
    if cached is None:
        return []
    what = ("every rank's reads of the shards it holds (no ckpt_fully_parallel_load)" if job.engine == "torch_dist"
            else "every rank's read of its model-parallel folder's model file")
    return [f"the restart reads {gb(sum(job.read_bytes))} counting {what}, {gb(sum(cached))} with each host's page "
            "cache serving the replicas its ranks share once: its transfer is the range between the two (a file "
            "system's client cache; docs/projection.md)"]


#: The projected times of a section, and whether each is a save (or the restart).
TIMES = (("save", "save"), ("second_save", "save"), ("steady_save", "save"), ("load", "load"))


def times(job: JobCheckpoint, costs: RankCosts, inputs: Inputs, part_bytes: int | None, limits: Limits) -> dict:
    """A process's first, second and later saves and the restart, each marked infeasible (no time, and what it
    would take if it ran) where the hosts cannot hold it (`feasibility`)."""
    result = {key: _save(job, costs, inputs, part_bytes, nth)
              for nth, key in enumerate(("save", "second_save", "steady_save"), start=1)}
    result["load"] = _load(job, costs, inputs, part_bytes)
    result["feasibility"] = feasibility(job, costs, limits)
    for key, operation in TIMES:
        check = result["feasibility"][operation]
        result[key]["feasible"] = check["fits"]
        if check["fits"] is False:
            result[key]["cannot_run"] = check["what"]
            result[key]["range_if_it_ran_s"] = result[key]["range_s"]
            result[key]["seconds"], result[key]["range_s"] = None, [None, None]
            result[key]["block_range_s"] = [None, None]
    return result


def settings_section(job: JobCheckpoint) -> list[dict] | None:
    """The checkpoint settings each figure assumed, each with its source; None for a job that is not Megatron's."""
    if job.state not in ("megatron", "megatron_fsdp2"):
        return None
    described = job.checkpoint_settings.described()
    if job.settings is None:
        for entry in described:
            entry["source"] = "Megatron-LM's default (the workload names no experiment)"
    return described
