#!/usr/bin/env python3
"""One line that says how fast this machine is, printed by `make test` before the suite: a suite's time means
something only beside it (the same suite took 5:44 on one 2-core VM and 11:15 on another).

    python tools/calibration.py [--budget 600]

* python: a fixed pure-Python loop, 10 M additions (`x += i` on a module-level name), in seconds;
* torch: a fixed torch workload, 20 products of two 1024 x 1024 float32 matrices on one thread, in seconds
  (torch's import not counted);
each the fastest of 3 runs, so that other work on a shared machine moves it less;
* the suite's budget against it: `--budget` seconds (600: 10 minutes) where the Python loop takes 1 s or less,
  scaled by the loop above that. The suite's time is mostly the Python its processes run as they start (each
  torchrun agent imports torch, each rank torch and megatron-core or torch.distributed.checkpoint, each spawned
  writer both again), which moves with the loop: 684 s at 0.91 s and 757 s at 1.01 s on this 2-core VM.
"""

from __future__ import annotations

import argparse
import time

LOOP = compile("x = 0\nfor i in range(10_000_000):\n    x += i\n", "<calibration>", "exec")
SUITE_BUDGET_S = 600
#: The loop's time up to which the budget is not scaled down.
LOOP_FLOOR_S = 1.0


def python_seconds() -> float:
    started = time.perf_counter()
    exec(LOOP, {})
    return time.perf_counter() - started


def torch_seconds() -> float:
    import warnings

    warnings.filterwarnings("ignore", message="The pynvml package is deprecated", category=FutureWarning)  # as ours
    import torch

    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    left, right = (torch.rand(1024, 1024, generator=generator) for _ in range(2))
    started = time.perf_counter()
    for _ in range(20):
        torch.mm(left, right)
    return time.perf_counter() - started


def fastest(measure, runs: int = 3) -> float:
    return min(measure() for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=SUITE_BUDGET_S,
                        help="seconds of suite where the Python loop takes 1 s or less (default 600)")
    args = parser.parse_args()
    python, torch = fastest(python_seconds), fastest(torch_seconds)
    budget = args.budget * max(LOOP_FLOOR_S, python) / LOOP_FLOOR_S
    print(f"calibration: python loop (10 M additions) {python:.2f} s, torch (20 x 1024^2 fp32 matmul, 1 thread) "
          f"{torch:.2f} s; suite budget {budget:.0f} s ({budget / 60:.1f} min: {args.budget:g} s where the loop "
          f"takes {LOOP_FLOOR_S:g} s or less, scaled above)", flush=True)


if __name__ == "__main__":
    main()
