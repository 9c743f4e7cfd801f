"""The computation's own process: `python -m ckpt_bench.projection.rank_costs JOB.json BUDGET_S` prints the
engine's `RankCosts` as JSON. A one-rank gloo group stands for rank 0 (megatron-core's validation runs on rank 0
only, and asks)."""

from __future__ import annotations

import importlib
import json
import os
import resource
import sys
import tempfile
import time
import warnings
from pathlib import Path

from ckpt_bench.projection.job import JobCheckpoint
from ckpt_bench.projection.rank_costs import ENGINES, _versions
from ckpt_bench.projection.rank_costs.base import Budget


def main(argv: list[str]) -> int:
    job = JobCheckpoint.from_dict(json.loads(Path(argv[0]).read_text()))
    budget = Budget(float(argv[1]))
    started = time.thread_time()
    warnings.filterwarnings("ignore")  # megatron-core's about Transformer Engine and Apex
    import torch.distributed as dist

    with tempfile.TemporaryDirectory(prefix="ckpt-bench-store-") as folder:
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(folder, 'store')}", rank=0, world_size=1)
        try:
            costs = importlib.import_module(ENGINES[job.engine]).compute(job, budget)
        finally:
            dist.destroy_process_group()
    costs.computed_with = _versions()
    costs.budget_s, costs.spent_s = budget.seconds, round(time.thread_time() - started, 3)
    costs.peak_rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(costs.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
