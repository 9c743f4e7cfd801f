#!/usr/bin/env python3
"""What ckpt-bench adds inside the span it times: DCP saves, bare and through the worker, in one process.

    python benchmarks/in_span_overhead.py [--model gpt2] [--pairs 16] [--nproc-per-node 2] [--dir DIR]

harness_overhead.py compares whole processes, ckpt-bench against a bare script. On this host memory
and the host-cached disk have two speeds, and which one a save gets depends on what ran before it (the
memory freed recently: docs/report.md), so whole processes answer only over many rounds. This isolates
what the harness can add to a save time it reports: what runs inside its timed span. Under torchrun
each rank builds the DCP worker's state once and makes one
untimed warm-up save; then, for each pair of saves, in alternating order (bare first, then ours
first, ...), both arms do the worker's untimed preparation (`prepare_save`: perturb, digests,
manifest; a FileSystemWriter with fsync; `start_together`: the garbage collected, a barrier) and then
  bare  `dcp.save` alone between two `time.monotonic()` reads, as benchmarks/bare/dcp_save.py times it;
  ours  the worker's own `timed_save` (its events, with the peak-memory marks), its duration read back
        from the events through the report engine's pairing, as report.json gets it.
Each save is removed after the pair's barrier, so the storage holds one at a time. A save's duration
is the slowest rank's. Per pair the ratio ours / bare; over the pairs their geometric mean, a 95 %
bootstrap interval and the verdict of harness_overhead (within 5 % when the interval is <= 1.05).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ours_first(pair_index: int) -> bool:
    return pair_index % 2 == 1


def rank_main(options: argparse.Namespace) -> None:
    """One rank: the warm-up save, then the pairs; rank 0 writes {"ours": [...], "bare": [...]} per pair."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter

    from ckpt_bench.backends.dcp.models import build_state
    from ckpt_bench.backends.dcp.worker import prepare_save, timed_save
    from ckpt_bench.core.events import event_files, read_event_files
    from ckpt_bench.report.engine import pair
    from ckpt_bench.worker.entry import WorkerContext, start_together

    context = WorkerContext.join("gloo")
    work = Path(options.dir)
    state = build_state(options.model, "float32", seed=0)

    def save(call: int, arm: str, events) -> float | None:
        prepare_save(state, call, str(work / "integrity"), context.rank)
        path = str(work / "saves" / f"iter_{call:07d}")
        writer = FileSystemWriter(path, thread_count=options.thread_count, sync_files=True)
        start_together()  # the worker's: the cyclic garbage collected untimed, then the barrier
        elapsed = None
        if arm == "ours":
            timed_save(state, writer, events, call, path, async_save=False, sync_files=True)
        else:
            start = time.monotonic()
            dcp.save(state, storage_writer=writer)
            elapsed = time.monotonic() - start
        dist.barrier()
        if context.rank == 0:
            shutil.rmtree(path)
        return elapsed

    bare: dict[int, float] = {}
    arms: dict[int, str] = {}
    with context.recorder(str(work / "events")) as events:
        save(0, "bare", events)  # warm-up: a process's first save starts DCP's machinery
        for index in range(options.pairs):
            order = ("ours", "bare") if ours_first(index) else ("bare", "ours")
            for offset, arm in enumerate(order):
                call = 2 * index + 1 + offset
                arms[call] = arm
                elapsed = save(call, arm, events)
                if elapsed is not None:
                    bare[call] = elapsed
    ours = {op.iteration: op.total_s() for op in pair(read_event_files(event_files(work / "events")))
            if op.kind == "save" and op.rank == context.rank}
    per_rank: list = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, {**bare, **ours})
    if context.rank == 0:
        slowest = {call: max(durations[call] for durations in per_rank) for call in arms}
        pairs = [{arms[call]: slowest[call] for call in (2 * i + 1, 2 * i + 2)} for i in range(options.pairs)]
        (work / "pairs.json").write_text(json.dumps(pairs))
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gpt2", help="a DCP model of ckpt-bench (gpt2 float32: 475 MiB)")
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--nproc-per-node", type=int, default=2)
    parser.add_argument("--thread-count", type=int, default=2)
    parser.add_argument("--dir", default=None, help="work folder, on the storage to test (default: a new "
                        "temporary one, removed after)")
    parser.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.rank_main:
        rank_main(options)
        return 0

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from harness_overhead import PairedRatio

    work = Path(options.dir or tempfile.mkdtemp(prefix="ckpt-bench-in-span-"))
    work.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
               str(options.nproc_per_node), "--log-dir", str(work / "torchrun"),
               __file__, "--rank-main", "--model", options.model, "--pairs",
               str(options.pairs), "--thread-count", str(options.thread_count), "--dir", str(work)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    subprocess.run(command, env=env, check=True, cwd=ROOT)
    pairs = json.loads((work / "pairs.json").read_text())
    if options.dir is None:
        shutil.rmtree(work, ignore_errors=True)
    ratio = PairedRatio.of_ratios([p["ours"] / p["bare"] for p in pairs])
    for index, p in enumerate(pairs):
        first = "ours" if ours_first(index) else "bare"
        print(f"pair {index + 1:>2} ({first} first): ours {p['ours']:.4f} s  bare {p['bare']:.4f} s  "
              f"ratio {p['ours'] / p['bare']:.3f}")
    print(f"median ours {statistics.median(p['ours'] for p in pairs):.4f} s, bare "
          f"{statistics.median(p['bare'] for p in pairs):.4f} s; ours / bare {ratio.estimate:.3f} "
          f"(95% CI {ratio.low:.3f}-{ratio.high:.3f}, {len(pairs)} pairs): {ratio.verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
