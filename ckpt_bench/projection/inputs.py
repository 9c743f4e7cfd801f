"""The projection's figures, each with its source: given on the command line (`ProjectionOptions`), measured on
the hosts that ran (`measured_clients`: a subset of whole hosts at the job's ranks per host), or unknown.

Rates are GB/s: 10^9 bytes a second (not gigabits). A client figure is per host; a storage figure is the
aggregate the storage absorbs from every host at once; a network figure is per host, for the engines'
collectives (metadata, plans, the exchange of loaded shards, the legacy optimizer gather).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import ClassVar

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.options import Flag, Options
from ckpt_bench.projection.job import JobCheckpoint
from ckpt_bench.projection.rank_costs import DEFAULT_BUDGET_S
from ckpt_bench.projection.units import GB
from ckpt_bench.report.metrics import steady_saves

__all__ = ["Figure", "ProjectionOptions", "measured_clients", "measured_storage"]

#: AWS S3's documented request rates a prefix: PUT/COPY/POST/DELETE 3,500 a second, GET/HEAD 5,500.
S3_PUTS_PER_S, S3_GETS_PER_S = 3500.0, 5500.0
#: s3torchconnector's default multipart part size: an object above it is uploaded in parts, one request each.
S3_PART_BYTES = 8 * 2**20

# The phases of a rank's save (load) that move its bytes (ckpt_bench.core.events.Phase values).
SAVE_IO = ("write", "write+fsync", "fsync", "collect", "plan+write")
LOAD_IO = ("read",)


def _rate(flag: str, what: str) -> Flag:
    return Flag((flag,), what + " In GB/s: 10^9 bytes a second (not gigabits).", type=float, metavar="GB/S")


@dataclass
class ProjectionOptions(Options):
    """The figures a projection of the whole job takes beyond what the run measures."""

    section: ClassVar[str] = "Projection to the whole job (the save and the restart at the job's size)"

    storage_write_gbps: float | None = _rate(
        "--storage-write-gbps", "The storage's aggregate write ceiling, from every host at once: a vendor figure, "
        "or IOR/fio across the fabric.").field()
    storage_read_gbps: float | None = _rate("--storage-read-gbps", "The storage's aggregate read ceiling.").field()
    client_write_gbps: float | None = _rate(
        "--client-write-gbps", "What one host writes at the job's ranks per host (its NIC, page cache, writer "
        "threads). Default: measured by this run's hosts (a --subset of whole hosts, --subset-hosts busiest).").field()
    client_read_gbps: float | None = _rate(
        "--client-read-gbps", "What one host reads (default: measured by this run's cold loads).").field()
    network_gbps: float | None = _rate(
        "--network-gbps", "What one host's network carries for the engines' collectives (metadata, plans, the "
        "exchange of loaded shards, the legacy format's optimizer gather).").field()
    storage_requests_per_s: float | None = Flag(
        ("--storage-requests-per-s",), "Requests a second the storage takes: S3 PUTs (default on AWS: 3,500 a "
        "prefix) or a file system's file creates.", type=float, metavar="N").field()
    host_memory_gb: float | None = Flag(
        ("--host-memory-gb",), "Memory of one training host, in GB (10^9 bytes): a save or restart its hosts cannot "
        "hold is projected as 'cannot run' instead of a time (default: this machine's, said as such).", type=float,
        metavar="GB").field()
    files_limit: int | None = Flag(
        ("--files-limit",), "Files the storage may hold for the job's checkpoints (an inode or object quota): "
        "the checkpoints the experiment keeps are checked against it.", type=int, min=1, metavar="N").field()
    rank_costs_budget: float = Flag(
        ("--rank-costs-budget",), "CPU seconds each of the engine's global steps at the job's size may take to "
        "compute (a step cut short is a lower bound).", type=float, metavar="S", default=DEFAULT_BUDGET_S,
        show_default=True).field(DEFAULT_BUDGET_S)

    @classmethod
    def of(cls, options: Options) -> ProjectionOptions:
        """These options alone, from a config that holds them among others (a backend's)."""
        return cls(**{name: getattr(options, name) for name in cls.flags()})

    @property
    def given(self) -> set[str]:
        """The figures given (the budget and the limits aside)."""
        limits = ("rank_costs_budget", "host_memory_gb", "files_limit")
        return {name for name in self.flags() if name not in limits and getattr(self, name) is not None}

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("storage_write_gbps", "storage_read_gbps", "client_write_gbps", "client_read_gbps",
                     "network_gbps", "storage_requests_per_s", "host_memory_gb", "rank_costs_budget"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"--{name.replace('_', '-')} {value:g}: must be a positive number")


@dataclass(frozen=True)
class Figure:
    """One input of the projection."""

    value: float | None
    """GB/s (requests a second for the request rate); None: unknown."""
    source: str
    at_least: bool = False
    """The value is a lower bound (a ceiling not reached), so a time from it is an upper bound."""

    def as_dict(self) -> dict:
        return {"value": None if self.value is None else round(self.value, 4), "source": self.source,
                "at_least": self.at_least}


def _window(phases: list[dict], names: tuple[str, ...]) -> tuple[float, float] | None:
    spans = [(p["start"], p["start"] + p["seconds"]) for p in phases
             if p.get("phase") in names and isinstance(p.get("start"), (int, float))]
    return (min(a for a, _ in spans), max(b for _, b in spans)) if spans else None


def _host_rate(operations: list[dict], ranks: range, host_bytes: int, names: tuple[str, ...],
               whole: str) -> tuple[float | None, str]:
    """GB/s one host moved: its bytes over the window its ranks' I/O phases spanned (their start offsets are
    from each rank's own start, and the ranks start together), the median over `operations`; without phases, over
    the operation's time (`whole`)."""
    rates, timed_by = [], "its ranks' I/O phases"
    for operation in operations:
        per_rank = {entry["rank"]: entry["phases"] for entry in operation.get("phases_per_rank") or []}
        windows = [w for rank in ranks if (w := _window(per_rank.get(rank, []), names))]
        if windows:
            seconds = max(b for _, b in windows) - min(a for a, _ in windows)
        else:
            seconds, timed_by = operation.get(whole), f"the whole {whole} (no phases recorded)"
        if seconds and host_bytes:
            rates.append(host_bytes / seconds / GB)
    return (statistics.median(rates) if rates else None), timed_by


def measured_clients(report: dict, job: JobCheckpoint) -> tuple[Figure | None, Figure | None, str | None]:
    """(write, read) GB/s per host measured on the run's host that moved the most bytes, and why there is none
    (None, None, why). The run's hosts must be whole hosts of the job at its ranks per host: running host i
    played job host `job.hosts_that_ran[i]`."""
    hosts = job.hosts_that_ran
    if hosts is None:
        return None, None, ("this run is not a subset of whole hosts of the job (--subset with --nproc-per-node "
                            "the job's ranks per host): no client figure measured")
    per = job.ranks_per_node
    saves = report.get("saves") or []
    steady = steady_saves(saves)
    first_left_out = len(steady) < sum(1 for save in saves if save.get("complete"))
    loads = [load for load in report.get("loads") or [report.get("load") or {}] if load.get("complete")]
    index = max(range(len(hosts)), key=lambda i: (sum(job.write_bytes[hosts[i] * per:(hosts[i] + 1) * per]), -i))
    host, running = hosts[index], range(index * per, (index + 1) * per)
    written = sum(job.write_bytes[host * per:(host + 1) * per])
    together = f", {len(hosts)} hosts writing at once" if len(hosts) > 1 else ""
    # A subset rank reads back what it wrote (the engines' subset mode), whatever the full job's load reads.
    write, how = _host_rate(steady, running, written, SAVE_IO, "total_time")
    read, read_how = _host_rate(loads, running, written, LOAD_IO, "time")
    write_figure = None if write is None else Figure(
        write, f"measured: job host {host}, {written / GB:.4g} GB a save over {how}, median of {len(steady)} "
               f"save(s){' after the first' if first_left_out else ''}{together}")
    read_figure = None if read is None else Figure(
        read, f"measured: job host {host}, {written / GB:.4g} GB a load over {read_how}, median of {len(loads)} "
              f"{loads[0].get('cache') or ''} load(s){together}")
    return write_figure, read_figure, None


def measured_storage(report: dict | None) -> tuple[Figure | None, Figure | None]:
    """(write, read) aggregate GB/s the storage baseline measured from several hosts at once
    (`storage_baseline.hosts`, a multi-node run's): its ceiling where the rounds stopped scaling, else a lower bound
    (the storage takes at least the last round's)."""
    hosts = ((report or {}).get("storage_baseline") or {}).get("hosts") or {}
    rounds = hosts.get("rounds") or []
    if not rounds:
        return None, None
    counts = ", ".join(str(r["hosts"]) for r in rounds)
    figures = []
    for direction in ("write", "read"):
        value, reached = hosts.get(f"{direction}_ceiling_gbps"), hosts.get(f"{direction}_ceiling_reached")
        state = "its ceiling" if reached else "not reached: still scaling at the last round, a lower bound"
        figures.append(None if value is None else Figure(
            value, f"measured: the storage baseline from {counts} hosts at once, {state}", at_least=not reached))
    return figures[0], figures[1]
