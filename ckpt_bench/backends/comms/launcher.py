"""The comms backend and the `--preflight` pass: collective bandwidth, no checkpoint.

`--backend comms` runs one pass of `ckpt_bench.backends.comms.worker` (the full sweep, 1 KiB ... 256 MiB); its
report is the sweep's results. `--preflight` (an option of every checkpointing backend) runs a short
sweep before that backend's passes and records it in its report (`report["preflight"]`): a
fully-parallel save or load moves shards between ranks, and a slow fabric explains a slow checkpoint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.options import Flag, Options
from ckpt_bench.launcher.base import DIST_BACKEND, Backend, CheckpointOptions, Plan, WorkerPass
from ckpt_bench.launcher.config import LaunchConfig
from ckpt_bench.launcher.run_info import Ranks, RunInfo

WORKER = "ckpt_bench.backends.comms.worker"
# Results of a pass named P are written to <run>/comms/P.json (see RunDir.comms_results).
RESULTS = "comms/{name}.json"
# The preflight: 6 sizes (64 KiB ... 64 MiB), 5 timed iterations: seconds, not minutes.
PREFLIGHT_ARGS = {"min_size": 64 << 10, "max_size": 64 << 20, "iters": 5, "warmup": 2}
FULL_ARGS = {"min_size": 1 << 10, "max_size": 256 << 20, "iters": 20, "warmup": 5}

_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:i?B)?\s*$", re.IGNORECASE)

COMMS_MAX_SIZE = Flag(("--comms-max-size",), "Largest message of the comms sweep or the --preflight, e.g. 64KiB "
                      "(default: 256MiB for the comms backend, 64MiB for the preflight).", metavar="SIZE")


def parse_size(text: str | int | None, flag: str = "--comms-max-size") -> int | None:
    """`65536`, `64K`, `64KiB`, `256M`, `1G` -> bytes (binary units)."""
    if text is None or isinstance(text, int):
        return text
    match = _SIZE.match(text)
    if not match or int(match[1]) < 1:
        raise ConfigError(f"{flag} {text!r}: expected a size such as 65536, 64KiB or 256MiB")
    return int(match[1]) << {"": 0, "K": 10, "M": 20, "G": 30}[match[2].upper()]


@dataclass
class SweepSize(Options):
    """The largest message of a collective sweep."""

    comms_max_size: str | None = COMMS_MAX_SIZE.field()

    def __post_init__(self) -> None:
        super().__post_init__()
        parse_size(self.comms_max_size)

    def worker_args(self, name: str, sweep: dict, dist_backend: str | None) -> list[str]:
        """Arguments of `ckpt_bench.backends.comms.worker` for a pass named `name` (after `--spec`)."""
        max_size = parse_size(self.comms_max_size)
        sweep = {**sweep, "max_size": min(sweep["max_size"], max_size or sweep["max_size"])}
        sweep["min_size"] = min(sweep["min_size"], sweep["max_size"])
        args = ["--out", RESULTS.format(name=name)]
        for key, value in sweep.items():
            args += [f"--{key.replace('_', '-')}", str(value)]
        if dist_backend:
            args += ["--dist-backend", dist_backend]
        return args


@dataclass
class Preflight(SweepSize):
    """`--preflight`: a short comms sweep before the benchmark's own passes."""

    section: ClassVar[str] = CheckpointOptions.section  # --help: beside the other options of every saving backend

    preflight: bool = Flag(("--preflight",), "Measure collective bandwidth (a short comms sweep) before the "
                           "benchmark and record it in its report.", type=bool).field(False)

    def preflight_passes(self, dist_backend: str | None = None) -> list[WorkerPass]:
        """The short sweep run before a benchmark's passes, on the benchmark's own distributed backend
        (None: the worker's default); [] without --preflight."""
        if not self.preflight:
            return []
        return [WorkerPass("preflight", self.worker_args("preflight", PREFLIGHT_ARGS, dist_backend), module=WORKER,
                           show_progress=show_progress)]


@dataclass
class PreflightOptions(Preflight):
    """The preflight options of a checkpoint benchmark: there --comms-max-size sizes the preflight alone."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.comms_max_size is not None and not self.preflight:
            raise ConfigError("--comms-max-size applies to --backend comms or --preflight; add --preflight")


def show_progress(line: str) -> bool:
    from ckpt_bench.backends.comms.worker import PROGRESS  # the worker imports torch: only once a pass runs

    return bool(PROGRESS.match(line))


@dataclass
class CommsConfig(Preflight):
    """The comms backend's options."""

    dist_backend: str | None = DIST_BACKEND.field()


class CommsBackend(Backend[CommsConfig]):
    name = "comms"
    title = "Comms backend (--backend comms): collective bandwidth, no checkpoint"
    Config = CommsConfig

    def plan(self, launch: LaunchConfig[CommsConfig]) -> Plan:
        config = launch.options
        args = config.worker_args("comms", FULL_ARGS, config.dist_backend)
        return Plan(
            name="comms",
            worker_module=WORKER,
            resolved_config={"comms": {"worker": WORKER, "args": args}},
            run_info=RunInfo(backend=self.name, ranks=Ranks.of(launch.topology)),
            passes=[*config.preflight_passes(config.dist_backend), WorkerPass("comms", args)],
            checkpoints=None,
            show_progress=show_progress,
        )
