"""--storage-baseline across hosts: the storage's aggregate ceiling, measured from 1, 2, 4 ... hosts at once.

One host's baseline is its client's ceiling as much as the storage's. In a multi-node run every node takes part:
in round k, hosts 0..k-1 each write their share of the last checkpoint's files (every nnodes-th file, as many
writers at once as its ranks had) at the same moment, then read them back cold; the round's aggregate is all
their bytes over the slowest host's time (they start together, on the wall clock). While the aggregate still
grows with the hosts (by at least `SCALING` of the linear), the ceiling is "not reached": the storage takes at
least the last round's aggregate (a lower bound); where it stops growing, the largest round is its ceiling.

The nodes meet in the shared run directory, as their passes do (`launcher.nodes`): node 0 writes the shape and
each round's start, every host its result of each round it takes part in.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ckpt_bench.core.rundir import RunDir, write_atomic
from ckpt_bench.launcher.nodes import JOIN_TIMEOUT_S, wait_for
from ckpt_bench.storage.base import CheckpointStorage
from ckpt_bench.storage.baseline import IOShape

__all__ = ["SCALING", "end_rounds", "follow_rounds", "host_counts", "lead_rounds"]

SCALING = 0.8  # a round still scales while its aggregate is at least this share of the linear step from the last
START_AFTER_S = 1.0  # a round's start: this far ahead of its announcement, so that every host is waiting for it
WAIT_S = JOIN_TIMEOUT_S  # how long a host waits for the shape, a round's start or a peer's result


def host_counts(nnodes: int) -> list[int]:
    """The rounds' host counts: 1, 2, 4 ... and all of them."""
    counts, k = [], 1
    while k < nnodes:
        counts.append(k)
        k *= 2
    return [*counts, nnodes]


def _folder(run: RunDir) -> Path:
    return run.path / "nodes" / "baseline"


def _wait(path: Path) -> dict | None:
    """`path`'s content once it is written; None if node 0 ended the rounds first (`end_rounds`) or it never came."""
    return json.loads(path.read_text()) if wait_for(path, WAIT_S, unless=path.parent / "end.json") else None


def _take_part(run: RunDir, storage: CheckpointStorage, node: int, hosts: int, shape: IOShape) -> None:
    """This host's part of the round of `hosts` hosts: start with the others, measure, publish."""
    start = _wait(_folder(run) / f"round-{hosts}.json")
    if start is None:
        return
    time.sleep(max(0.0, start["start_at"] - time.time()))
    try:
        result = storage.baseline(f"storage-baseline-host-{node}").measure(shape)
        part = {"bytes": result["bytes"], "write_time": result["write_time"], "read_time": result["read_time"]}
    except Exception as error:  # the storage failed here: node 0 hears it rather than waiting
        part = {"error": f"host {node}: {type(error).__name__}: {error}"}
    write_atomic(_folder(run) / f"round-{hosts}-host-{node}.json", json.dumps(part))


def _share(sizes: list[int], node: int, nnodes: int, writers: int, fsync: bool) -> IOShape:
    return IOShape.of(sizes[node::nnodes] or sizes[:1], writers, fsync)


def lead_rounds(run: RunDir, storage: CheckpointStorage, sizes: list[int], nnodes: int, writers_per_host: int,
                fsync: bool) -> dict:
    """Node 0: the rounds, their aggregates (GB/s, 10^9 bytes a second) and the ceiling found."""
    folder = _folder(run)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "shape.json", json.dumps({"sizes": sizes, "writers": writers_per_host, "fsync": fsync}))
    rounds = []
    for hosts in host_counts(nnodes):
        write_atomic(folder / f"round-{hosts}.json", json.dumps({"start_at": time.time() + START_AFTER_S}))
        _take_part(run, storage, 0, hosts, _share(sizes, 0, nnodes, writers_per_host, fsync))
        results = [_wait(folder / f"round-{hosts}-host-{node}.json") for node in range(hosts)]
        if any(result is None for result in results):
            return {"error": f"a host did not report its part of the round of {hosts} hosts within {WAIT_S:.0f} s",
                    "rounds": rounds}
        failed = [result["error"] for result in results if "error" in result]
        if failed:
            return {"error": f"the round of {hosts} hosts failed: {failed[0]}", "rounds": rounds}
        total = sum(r["bytes"] for r in results)
        rounds.append({"hosts": hosts, "bytes": total,
                       "write_gbps": round(total / max(r["write_time"] for r in results) / 1e9, 4),
                       "read_gbps": round(total / max(r["read_time"] for r in results) / 1e9, 4)})
    return {"rounds": rounds, **_ceiling(rounds, "write"), **_ceiling(rounds, "read"),
            "method": f"every host writes every {nnodes}-th file of the last checkpoint with {writers_per_host} "
                      "writers at once, then reads them back cold; a round's aggregate is its bytes over its slowest "
                      f"host's time; the ceiling is not reached while a round gains at least {SCALING:.0%} of the "
                      "linear step"}


def _ceiling(rounds: list[dict], direction: str) -> dict:
    key = f"{direction}_gbps"
    best = max(rounds, key=lambda r: r[key])
    last, before = rounds[-1], rounds[-2] if len(rounds) > 1 else None
    scaling = before is None or last[key] >= SCALING * before[key] * last["hosts"] / before["hosts"]
    return {f"{direction}_ceiling_gbps": best[key], f"{direction}_ceiling_reached": not scaling}


def end_rounds(run: RunDir) -> None:
    """Node 0 is done (or measures none: the run failed, the storage failed): no host waits for a round more."""
    folder = _folder(run)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "end.json", json.dumps({"ended_at": time.time()}))


def follow_rounds(run: RunDir, storage: CheckpointStorage, node: int, nnodes: int) -> None:
    """Node R > 0: its part of every round with more than R hosts (nothing where node 0 measures none)."""
    shape = _wait(_folder(run) / "shape.json")
    if shape is None:
        return
    for hosts in host_counts(nnodes):
        if node < hosts:
            _take_part(run, storage, node, hosts, _share(shape["sizes"], node, nnodes, shape["writers"],
                                                         shape["fsync"]))
