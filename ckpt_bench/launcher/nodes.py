"""A run across nodes: one run directory on storage all nodes share, one report, written by node 0.

Every node runs `ckpt_launch.py` with the same options and the same `--run-id`, each with its own
`--node-rank` (the Slurm and Kubernetes templates do exactly that). The nodes meet in two places:

* torchrun's rendezvous (`--master-addr/--master-port`, or c10d's `--rdzv-endpoint`), which makes
  the ranks of all nodes one world; ranks write their events by global rank into the shared
  `events/`, and each node's torchrun keeps its per-rank logs in `logs/<pass>/node-<R>/`;
* the run directory `<runs-dir>/<run-id>`: node 0 creates it and everything in it (the worker spec,
  the checkpoint folder); the other nodes wait for it and run the same passes from node 0's spec.

After each pass every node writes its pass result to `nodes/<pass>/node-<R>.json` and waits for all
the others'. So the next pass starts only once every node's torchrun of this one has exited (no
agent can meet a rendezvous store left from the pass before), a failure on any node stops every
node, and node 0 builds the one report knowing every node is done and its events are on disk.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.rundir import RUN_FILE, RunDir, write_atomic  # several nodes read what one writes
from ckpt_bench.launcher.torchrun import PassResult, Topology
from ckpt_bench.report.schema import PassSummary

JOIN_TIMEOUT_S = 900.0  # node 0 may start minutes after the others (image pull, slow imports)
PEER_TIMEOUT_S = 300.0  # as long as torchrun's own exit barrier waits for the other agents
POLL_S = 0.2


def validate(topology: Topology, run_id: str | None) -> None:
    """What a multi-node run needs before anything starts."""
    if topology.nnodes == 1:
        return
    if topology.node_rank >= topology.nnodes:
        raise ConfigError(f"--node-rank {topology.node_rank}: must be below --nnodes {topology.nnodes}")
    if not run_id:
        raise ConfigError(f"--nnodes {topology.nnodes}: give every node the same --run-id (e.g. the Slurm job "
                          "id), so that all nodes write into one run directory")
    if not topology.rdzv_endpoint and topology.master_port is None:
        raise ConfigError(f"--nnodes {topology.nnodes}: give every node the same --master-port "
                          "(or --rdzv-endpoint HOST:PORT)")


def is_leader(topology: Topology) -> bool:
    return topology.node_rank == 0


def wait_for(path: Path, timeout: float, unless: Path | None = None) -> bool:
    """Whether `path` appeared within `timeout` seconds (polled): False once it is past, or once `unless` exists."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline or (unless is not None and unless.exists()):
            return False
        time.sleep(POLL_S)
    return True


def join(runs_dir: Path, run_id: str, timeout: float = JOIN_TIMEOUT_S) -> RunDir:
    """Node R > 0: node 0's run directory, once node 0 has set it up (its run.json is written last)."""
    run = RunDir(Path(runs_dir) / run_id)
    if not wait_for(run.path / RUN_FILE, timeout):
        raise ConfigError(f"--run-id {run_id}: node 0 did not set up {run.path} within {timeout:.0f} s "
                          "(is --runs-dir on storage every node shares?)")
    return run


def log_dir(run: RunDir, name: str, topology: Topology) -> Path:
    """Where a pass's torchrun logs go: per node when there are several."""
    base = run.logs_dir / name
    return base / f"node-{topology.node_rank}" if topology.nnodes > 1 else base


def finish_pass(run: RunDir, topology: Topology, result: PassResult,
                timeout: float = PEER_TIMEOUT_S) -> list[PassSummary]:
    """Record this node's result of a pass and wait for every node's: the pass results of all nodes."""
    if topology.nnodes == 1:
        return [result.summary()]
    own = replace(result.summary(), node_rank=topology.node_rank)
    folder = run.path / "nodes" / result.name
    write_atomic(folder / f"node-{topology.node_rank}.json", json.dumps(own.to_json(), indent=2) + "\n")
    summaries = []
    for node in range(topology.nnodes):
        path = folder / f"node-{node}.json"
        if node == topology.node_rank:
            summaries.append(own)
        elif wait_for(path, timeout):
            summaries.append(PassSummary.from_json(json.loads(path.read_text())))
        else:
            summaries.append(PassSummary(name=result.name, exit_code=None, ok=False, cause=None, failed_ranks=[],
                                         log_dir=None, node_rank=node, error=f"node {node} did not finish within "
                                         f"{timeout:.0f} s of node {topology.node_rank}"))
    return summaries
