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
from ckpt_bench.projection.rank_costs import DEFAULT_BUDGET_S, DEFAULT_TIME_S, EXACT_UP_TO
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


def _ceilings(flag: str, what: str) -> Flag:
    return Flag((flag,), what + " In GB/s: 10^9 bytes a second (not gigabits). Several, comma-separated "
                "(100,200,400,1000): the purchase table prices each from one computation of the global steps.",
                type=str, metavar="GB/S[,GB/S...]")


def _parse_ceilings(name: str, value) -> tuple[float, ...]:
    """GB/s figures from `value` (a number, or numbers comma-separated); one clear line for a bad one."""
    if value is None:
        return ()
    texts = str(value).split(",")  # a number as it is (str keeps every digit of a float)
    figures = []
    for text in texts:
        try:
            figure = float(text)
        except ValueError:
            raise ConfigError(f"--{name.replace('_', '-')} {value}: {text.strip()!r} is not a number (GB/s, "
                              "several comma-separated: 100,200,400)") from None
        if not (math.isfinite(figure) and figure > 0):
            raise ConfigError(f"--{name.replace('_', '-')} {text.strip()}: must be a positive number")
        figures.append(figure)
    return tuple(figures)


@dataclass
class ProjectionOptions(Options):
    """The figures a projection of the whole job takes beyond what the run measures."""

    section: ClassVar[str] = "Projection to the whole job (the save and the restart at the job's size)"

    storage_write_gbps: float | None = _ceilings(
        "--storage-write-gbps", "The storage's aggregate write ceiling, from every host at once: a vendor figure, "
        "or IOR/fio across the fabric.").field()
    storage_read_gbps: float | None = _ceilings(
        "--storage-read-gbps", "The storage's aggregate read ceiling (several: one a write ceiling, or one for "
        "all).").field()
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
    rank_costs_exact: bool = Flag(
        ("--rank-costs-exact",), "Compute the engine's global steps at the job's own size over every rank (minutes "
        "at 1,024 ranks for a large model; cached) instead of on copies of it with fewer layers, fitted to its depth, "
        f"a sum over the ranks over a sample of them (the default above {EXACT_UP_TO} ranks).",
        type=bool).field(False)
    rank_costs_time: float = Flag(
        ("--rank-costs-time",), "CPU seconds the fitted computation of the global steps may take (three copies of the "
        "job are computed whatever it says, at once, one process a core; deeper ones one after another).", type=float,
        metavar="S", default=DEFAULT_TIME_S, show_default=True).field(DEFAULT_TIME_S)

    @classmethod
    def of(cls, options: Options) -> ProjectionOptions:
        """These options alone, from a config that holds them among others (a backend's)."""
        return cls(**{name: getattr(options, name) for name in [*cls.flags(), "storage_ceilings"]})

    @property
    def given(self) -> set[str]:
        """The figures given (the budget and the limits aside)."""
        limits = ("rank_costs_budget", "rank_costs_exact", "rank_costs_time", "host_memory_gb", "files_limit")
        return {name for name in self.flags() if name not in limits and getattr(self, name) is not None}

    storage_ceilings: tuple[tuple[float | None, float | None], ...] = ()
    """(write, read) storage ceilings of the purchase table, where several were given (the first is the
    projection's own)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        writes = _parse_ceilings("storage_write_gbps", self.storage_write_gbps)
        reads = _parse_ceilings("storage_read_gbps", self.storage_read_gbps)
        if len(writes) > 1 and len(reads) > 1 and len(reads) != len(writes):
            raise ConfigError(f"--storage-read-gbps {self.storage_read_gbps}: {len(reads)} ceilings for "
                              f"{len(writes)} write ceilings; give one a write ceiling, or one for all")
        rows = max(len(writes), len(reads))
        if rows > 1 and not self.storage_ceilings:
            self.storage_ceilings = tuple(
                (writes[i if len(writes) > 1 else 0] if writes else None,
                 reads[i if len(reads) > 1 else 0] if reads else None) for i in range(rows))
        self.storage_write_gbps = writes[0] if writes else None
        self.storage_read_gbps = reads[0] if reads else None
        for name in ("client_write_gbps", "client_read_gbps",
                     "network_gbps", "storage_requests_per_s", "host_memory_gb", "rank_costs_budget",
                     "rank_costs_time"):
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
        return {"value": None if self.value is None else float(f"{self.value:.6g}"), "source": self.source,
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
    against = _what_was_measured(job)
    write_figure = None if write is None else Figure(
        write, f"measured: job host {host}, {written / GB:.4g} GB a save over {how}, median of {len(steady)} "
               f"save(s){' after the first' if first_left_out else ''}{together}, {against}")
    read_figure = None if read is None else Figure(
        read, f"measured: job host {host}, {written / GB:.4g} GB a load over {read_how}, median of {len(loads)} "
              f"{loads[0].get('cache') or ''} load(s){together}, {against}")
    return write_figure, read_figure, None


#: The phases of a save a host pays around its writes that the client rate (SAVE_IO's window) leaves out and no
#: rank-count step holds: megatron-core's staging copy of each rank's share into host memory (torch_dist's
#: `stage`), per host, the same at the job's size as on the hosts that ran (each holds its own ranks' shares).
HOST_PHASES = ("stage",)


def measured_host_phases(report: dict, job: JobCheckpoint) -> tuple[tuple[str, float, str], ...]:
    """(phase, seconds, where from) of each of `HOST_PHASES` the hosts that ran paid a steady save: the slowest
    rank's, the median over the saves after each process's first; () where the ranks are not whole hosts."""
    if job.hosts_that_ran is None:
        return ()
    steady = steady_saves(report.get("saves") or [])
    found = []
    for name in HOST_PHASES:
        seconds = []
        for save in steady:
            per_rank = [sum(p.get("seconds") or 0.0 for p in entry["phases"] if p.get("phase") == name)
                        for entry in save.get("phases_per_rank") or []]
            if any(per_rank):
                seconds.append(max(per_rank))
        if seconds:
            found.append((name, statistics.median(seconds),
                          f"measured on the hosts that ran: the slowest rank's {name} phase, median of "
                          f"{len(seconds)} steady save(s)"))
    return tuple(found)


def _what_was_measured(job: JobCheckpoint) -> str:
    """What a host's measured rate is a rate of: the storage the run wrote to, said plainly (a local folder is this
    host's own disk, not the job's shared storage)."""
    if job.storage == "s3":
        return f"to the S3 endpoint {job.storage_endpoint or 'of AWS'}"
    if job.storage == "disk":
        return ("to the file system of --save-dir (a local folder: this host's own disk, not the job's shared "
                "storage; run on that storage to measure it)")
    return f"to the {job.storage} storage of --save-dir"


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
