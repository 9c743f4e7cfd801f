"""The comms backend and the `--preflight` pass: collective bandwidth, no checkpoint.

`--backend comms` runs one pass of `bench.comms.worker` (the full sweep, 1 KiB ... 256 MiB); its
report is the sweep's results. `--preflight` runs a short sweep before any benchmark's passes and
records it in that benchmark's report (`report["preflight"]`): a fully-parallel save or load moves
shards between ranks, and a slow fabric explains a slow checkpoint.
"""

from __future__ import annotations

import re

from bench.config import ConfigError
from bench.launcher.base import LaunchSettings, Plan, WorkerPass

WORKER = "bench.comms.worker"
# Results of a pass named P are written to <run>/comms/P.json (see RunDir.comms_results).
RESULTS = "comms/{name}.json"
# The preflight: 6 sizes (64 KiB ... 64 MiB), 5 timed iterations: seconds, not minutes.
PREFLIGHT_ARGS = {"min_size": 64 << 10, "max_size": 64 << 20, "iters": 5, "warmup": 2}
FULL_ARGS = {"min_size": 1 << 10, "max_size": 256 << 20, "iters": 20, "warmup": 5}

_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:i?B)?\s*$", re.IGNORECASE)


def parse_size(text: str | int | None, flag: str = "--comms-max-size") -> int | None:
    """`65536`, `64K`, `64KiB`, `256M`, `1G` -> bytes (binary units)."""
    if text is None or isinstance(text, int):
        return text
    match = _SIZE.match(text)
    if not match or int(match[1]) < 1:
        raise ConfigError(f"{flag} {text!r}: expected a size such as 65536, 64KiB or 256MiB")
    return int(match[1]) << {"": 0, "K": 10, "M": 20, "G": 30}[match[2].upper()]


def worker_args(name: str, settings: LaunchSettings, sweep: dict) -> list[str]:
    """Arguments of `bench.comms.worker` for a pass named `name` (after `--spec`)."""
    max_size = parse_size(settings.options.get("comms_max_size"))
    sweep = {**sweep, "max_size": min(sweep["max_size"], max_size or sweep["max_size"])}
    sweep["min_size"] = min(sweep["min_size"], sweep["max_size"])
    args = ["--out", RESULTS.format(name=name)]
    for key, value in sweep.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    if settings.options.get("dist_backend"):
        args += ["--dist-backend", settings.options["dist_backend"]]
    return args


def show_progress(line: str) -> bool:
    from bench.comms.worker import PROGRESS  # the worker imports torch: only once a pass runs

    return bool(PROGRESS.match(line))


def preflight_pass(settings: LaunchSettings) -> WorkerPass | None:
    """The short sweep `--preflight` runs before a benchmark's passes, or None without the flag."""
    if not settings.options.get("preflight"):
        return None
    return WorkerPass("preflight", worker_args("preflight", settings, PREFLIGHT_ARGS))


class CommsBackend:
    name = "comms"

    def plan(self, settings: LaunchSettings) -> Plan:
        topology = settings.topology
        args = worker_args("comms", settings, FULL_ARGS)
        return Plan(
            name="comms",
            worker_module=WORKER,
            resolved_config={"comms": {"worker": WORKER, "args": args}},
            spec={},
            run_info={"backend": self.name, "world_size": topology.world_size, "nnodes": topology.nnodes,
                      "nproc_per_node": topology.nproc_per_node},
            passes=[WorkerPass("comms", args)],
            checkpoint_parent=None,
            show_progress=show_progress,
            checkpoints=False,
        )
