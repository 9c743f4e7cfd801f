"""What one save and one restart of the whole job move, rank by rank and host by host: the projection's input,
taken from a plan at the job's full size (`JobCheckpoint.of_layout`). Plain Python.

Ranks sit on hosts in order (`rank // ranks_per_node`), as torchrun numbers them. A host's bytes are its ranks'
bytes summed: what its client (NIC, page cache, writer threads) has to move.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from ckpt_bench.model.checkpointing import CheckpointSettings

__all__ = ["HostLoad", "JobCheckpoint", "Traffic"]


@dataclass(frozen=True)
class HostLoad:
    """One direction (save or load) of one checkpoint, per host."""

    host: int
    bytes: int
    files: int
    ranks: int
    """Its ranks that move any bytes."""


@dataclass(frozen=True)
class Traffic:
    """What one save (or one load) moves to (from) storage: per rank, and summed per host and over the job."""

    rank_bytes: tuple[int, ...]
    rank_files: tuple[int, ...]
    ranks_per_node: int

    @property
    def total_bytes(self) -> int:
        return sum(self.rank_bytes)

    @property
    def total_files(self) -> int:
        return sum(self.rank_files)

    @property
    def active_ranks(self) -> int:
        """Ranks that move any bytes."""
        return sum(1 for size in self.rank_bytes if size)

    def hosts(self) -> list[HostLoad]:
        per = self.ranks_per_node
        return [HostLoad(host, sum(self.rank_bytes[start:start + per]), sum(self.rank_files[start:start + per]),
                         sum(1 for size in self.rank_bytes[start:start + per] if size))
                for host, start in enumerate(range(0, len(self.rank_bytes), per))]

    @property
    def active_hosts(self) -> int:
        """Hosts whose ranks move any bytes."""
        return sum(1 for host in self.hosts() if host.bytes)

    def busiest(self) -> HostLoad:
        """The host that moves the most bytes (the lowest among equals)."""
        return max(self.hosts(), key=lambda host: (host.bytes, -host.host))

    def as_dict(self) -> dict[str, Any]:
        hosts = self.hosts()
        busiest = self.busiest()
        host_bytes = [host.bytes for host in hosts]
        return {
            "bytes": self.total_bytes,
            "files": self.total_files,
            "ranks_moving_bytes": self.active_ranks,
            "hosts_moving_bytes": self.active_hosts,
            "rank_bytes": {"min": min(self.rank_bytes), "median": statistics.median_low(self.rank_bytes),
                           "max": max(self.rank_bytes)},
            "host_bytes": {"min": min(host_bytes), "median": statistics.median_low(host_bytes),
                           "max": max(host_bytes)},
            "busiest_host": {"host": busiest.host, "bytes": busiest.bytes, "files": busiest.files,
                             "ranks_moving_bytes": busiest.ranks},
        }


@dataclass(frozen=True)
class JobCheckpoint:
    """A job's checkpoint as the projection needs it: what each rank writes and reads, where the ranks sit, which
    engine (whose rank-count costs apply, `projection.rank_costs`) and which storage. JSON-serializable."""

    engine: str
    """The engine that saves it (`--engine`): torch_dist, dcp, torch (Megatron's legacy format), torch-save."""
    world_size: int
    ranks_per_node: int
    write_bytes: tuple[int, ...]
    """Tensor bytes each rank of the job writes per save."""
    write_files: tuple[int, ...]
    """Files (objects) each rank creates per save."""
    read_bytes: tuple[int, ...]
    """Tensor bytes each rank reads per restart."""
    read_files: tuple[int, ...]
    storage: str
    """The storage kind: disk (a file system), s3, fsspec."""
    thread_count: int
    """Writer threads (files) per rank."""
    async_save: bool
    workload: dict
    """The workload's fields (`layout.workload.Workload`): the state the rank-count costs rebuild."""
    state: str
    """Whose state the engine saves: "megatron" (a Megatron GPT's sharded state) or "dlio" (DLIO's tensors)."""
    storage_endpoint: str | None = None
    """An S3-compatible endpoint (None on AWS, or not S3): AWS's request rates apply only on AWS."""
    storage_part_bytes: int | None = None
    """S3's multipart part size the run uses (None: the client's default)."""
    hosts_that_ran: tuple[int, ...] | None = None
    """The job's hosts the run's hosts played, in order (a subset of whole hosts); None: all, or not a run."""
    notes: tuple[str, ...] = field(default=())
    settings: dict | None = None
    """The Megatron job's checkpoint settings, each with its source (`CheckpointSettings.as_dict()`); None: not a
    Megatron job (DLIO's tensors), or Megatron-LM's defaults."""
    fully_parallel_bytes: tuple[int, ...] | None = None
    """A Megatron job's tensor bytes each rank writes (and reads) under megatron-core's fully parallel save (load)
    in torch_dist, whatever this job's engine and settings: what another setting or format would move."""
    held_bytes: tuple[int, ...] | None = None
    """A Megatron job's tensor bytes each rank holds (its shards, replicas included): what a torch_dist restart
    without the fully parallel load reads."""
    auto_detect_read_bytes: int = 0
    """Bytes every rank reads first at a restart to find the format (`auto_detect_ckpt_format`: rank 0's common
    state; the legacy format's whole model file), included in `read_bytes`."""
    host_held_bytes: tuple[int, ...] | None = None
    """A Megatron job's tensor bytes each host's ranks hold, a shard its ranks share as replicas once
    (`layout.megatron_shapes.host_held_bytes`): what a torch_dist restart without the fully parallel load reads
    from a file system whose page cache serves each host a replica once."""
    legacy_host_read_bytes: tuple[int, ...] | None = None
    """Megatron's legacy `torch` format: each host's restart reads with a model file its ranks share read once (a
    model-parallel folder's data-parallel replicas read the same `model_optim_rng.pt`), auto-detect's aside."""
    legacy_host_detect_bytes: tuple[int, ...] | None = None
    """What `auto_detect_ckpt_format` adds to `legacy_host_read_bytes`: rank 0's model file, on a host none of whose
    ranks reads it anyway (0 on the others)."""

    def __post_init__(self) -> None:
        if self.world_size % self.ranks_per_node:
            raise ValueError(f"a job of {self.world_size} ranks is not whole hosts of {self.ranks_per_node}")
        for name in ("write_bytes", "write_files", "read_bytes", "read_files", "fully_parallel_bytes", "held_bytes"):
            value = getattr(self, name)
            if value is not None and len(value) != self.world_size:
                raise ValueError(f"{name}: {len(value)} ranks, the job has {self.world_size}")
        for name in ("host_held_bytes", "legacy_host_read_bytes", "legacy_host_detect_bytes"):
            value = getattr(self, name)
            if value is not None and len(value) != self.nodes:
                raise ValueError(f"{name}: {len(value)} hosts, the job has {self.nodes}")

    @property
    def checkpoint_settings(self) -> CheckpointSettings:
        """The settings it runs with: its experiment's, else Megatron-LM's defaults."""
        return CheckpointSettings() if self.settings is None else CheckpointSettings.from_dict(self.settings)

    @property
    def nodes(self) -> int:
        return self.world_size // self.ranks_per_node

    @property
    def save(self) -> Traffic:
        return Traffic(self.write_bytes, self.write_files, self.ranks_per_node)

    @property
    def load(self) -> Traffic:
        return Traffic(self.read_bytes, self.read_files, self.ranks_per_node)

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "world_size": self.world_size, "ranks_per_node": self.ranks_per_node,
                "write_bytes": list(self.write_bytes), "write_files": list(self.write_files),
                "read_bytes": list(self.read_bytes), "read_files": list(self.read_files), "storage": self.storage,
                "thread_count": self.thread_count, "async_save": self.async_save, "workload": self.workload,
                "state": self.state, "storage_endpoint": self.storage_endpoint,
                "storage_part_bytes": self.storage_part_bytes,
                "hosts_that_ran": None if self.hosts_that_ran is None else list(self.hosts_that_ran),
                "notes": list(self.notes), "settings": self.settings,
                "fully_parallel_bytes": None if self.fully_parallel_bytes is None else list(self.fully_parallel_bytes),
                "held_bytes": None if self.held_bytes is None else list(self.held_bytes),
                "auto_detect_read_bytes": self.auto_detect_read_bytes,
                "host_held_bytes": None if self.host_held_bytes is None else list(self.host_held_bytes),
                "legacy_host_read_bytes": None if self.legacy_host_read_bytes is None
                else list(self.legacy_host_read_bytes),
                "legacy_host_detect_bytes": None if self.legacy_host_detect_bytes is None
                else list(self.legacy_host_detect_bytes)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobCheckpoint:
        values = dict(data)
        for name in ("write_bytes", "write_files", "read_bytes", "read_files"):
            values[name] = tuple(values[name])
        for name in ("hosts_that_ran", "fully_parallel_bytes", "held_bytes", "host_held_bytes",
                     "legacy_host_read_bytes", "legacy_host_detect_bytes"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        values["notes"] = tuple(values.get("notes") or ())
        return cls(**values)

