#!/usr/bin/env python3
"""A first `--plan` of Primus experiments at their full size, as a new user runs it: an empty rank-costs cache, the
wall time, the peak memory of the plan and its computation's processes, and the figures it projects; with
`--hog`, the same beside a CPU hog on one core, so that an idle and a busy machine can be compared figure by
figure (issue 44: within 60 s idle and 4 GB at 1,024 ranks; the same binding limit and figures within 10 % busy).

    python benchmarks/first_plan.py PRIMUS CONFIG... [--nodes 128] [--per-node 8] [--hog] [--engine torch_dist]

CONFIG: a path under PRIMUS's examples/megatron/configs/ (MI300X/deepseek_v3-BF16-pretrain.yaml). Prints one
line a config and run: wall seconds, peak RSS (GB: the largest process, and the processes of the plan summed, sampled
every 0.25 s, the copies' workers running at once), the first save, the later saves, the
restart (each its range), the binding limits, and the samples the steps were fitted from.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))  # the Primus --plan helpers of tools/projection_table.py

from projection_table import add_job_arguments, plan_command, run_plan  # noqa: E402


def _hog() -> None:
    while True:
        pass


class TreeMemory:
    """The peak of the summed RSS of this process's children but `skip` (the plan and the workers computing its
    copies at once), sampled every `every` seconds while in the block."""

    def __init__(self, skip: set[int], every: float = 0.25):
        self.skip, self.every, self.peak = skip, every, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(self.every):
            total = 0
            for child in psutil.Process().children(recursive=True):
                if child.pid not in self.skip:
                    try:
                        total += child.memory_info().rss
                    except psutil.Error:  # ended between the listing and the reading
                        pass
            self.peak = max(self.peak, total)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()


def first_plan(primus: Path, config: str, args, hog: bool) -> dict:
    command = plan_command(config, args, [
        "--engine", args.engine, "--storage-write-gbps", "100", "--storage-read-gbps", "100",
        "--client-write-gbps", "25", "--client-read-gbps", "25", "--network-gbps", "25", "--host-memory-gb", "2048"])
    hogging = multiprocessing.Process(target=_hog, daemon=True) if hog else None
    if hogging:
        hogging.start()
    try:
        with (tempfile.TemporaryDirectory(prefix="ckpt-bench-first-plan-") as cache,
              TreeMemory({hogging.pid} if hogging else set()) as memory):
            started = time.monotonic()
            done = run_plan(primus, command, env={**os.environ, "CKPT_BENCH_CACHE": cache})
            wall = time.monotonic() - started
    finally:
        if hogging:
            hogging.terminate()
    if "error" in done:
        return done
    plan = done["projection"]
    return {"wall_s": round(wall, 1),
            "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 1e9, 2),
            "peak_tree_rss_gb": round(memory.peak / 1e9, 2),
            **{key: (plan[key].get("range_s"), plan[key].get("binding")) for key in ("save", "steady_save", "load")},
            "samples": plan["rank_costs"].get("samples"), "method": plan["rank_costs"].get("method"),
            "steps": [[step["operation"], step["name"], step["cpu_s"],
                       (step.get("extrapolated") or step.get("rank_sample") or {}).get("error")]
                      for step in plan["rank_costs"]["steps"]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_job_arguments(parser)
    parser.add_argument("--engine", default="torch_dist")
    parser.add_argument("--hog", action="store_true", help="also run each beside a CPU hog on one core")
    args = parser.parse_args()
    for config in args.configs:
        for hog in (False, True) if args.hog else (False,):
            result = first_plan(args.primus, config, args, hog)
            print(json.dumps({"config": config, "beside_a_hog": hog, **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
