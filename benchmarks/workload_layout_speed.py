#!/usr/bin/env python3
"""How long the workload layouts take at MLPerf Storage's rank counts: what `--workload NAME --plan` costs.

    python benchmarks/workload_layout_speed.py [--repeats 5]

For each catalog workload, at its own rank count: DLIO's layout (ckpt_bench.layout.dlio_layout, the
torch-save and dcp engines) and the Megatron GPT's (ckpt_bench.layout.megatron_shapes, the
torch_dist engine), the median of --repeats calls in this process (imports not counted), with the rank
count and the job's bytes a save. Target: well under a second for llama3-1t at 1,024 ranks.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ckpt_bench.core.units import GIB  # noqa: E402
from ckpt_bench.layout import dlio_layout, megatron_shapes  # noqa: E402
from ckpt_bench.layout.catalog import CATALOG  # noqa: E402


def median_seconds(call, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    print(f"{'workload':<12} {'ranks':>6} {'GiB a save':>11} {'DLIO layout s':>14} {'Megatron layout s':>18}")
    for name, workload in CATALOG.items():
        dlio_s, dlio = median_seconds(lambda w=workload: dlio_layout.layout(w), options.repeats)
        megatron_s, _ = median_seconds(lambda w=workload: megatron_shapes.layout(w), options.repeats)
        print(f"{name:<12} {len(dlio.ranks):>6,} {dlio.total_bytes / GIB:>11,.2f} {dlio_s:>14.4f} {megatron_s:>18.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
