"""The computation's own process: `python -m ckpt_bench.projection.rank_costs JOB.json BUDGET_S` prints the
engine's `RankCosts` as JSON; `--serve` answers one request a line on stdin (`{"job": ..., "budget": S}`, or
`{"job": ..., "count_only": true}` for rank 0's sharded objects alone; `"sums": {"ranks": K, "steps": "sums"}`:
the steps that are a sum over the ranks over about K of them alone, `"others"` all but those: `base.RankSums`),
one line of JSON each, importing torch and megatron-core once (`sampled`'s workers). A one-rank gloo group stands
for rank 0 (megatron-core's validation runs on rank 0 only, and asks)."""

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
from ckpt_bench.projection.rank_costs.base import (
    EVERY_RANK,
    Budget,
    RankCosts,
    RankSums,
    settled_heap,
)


def rank0_units(job: JobCheckpoint) -> int:
    """Rank 0's sharded objects: megatron-core's sharded tensors and objects, or DLIO's tensors."""
    from ckpt_bench.layout.workload import Workload

    if job.state in ("megatron", "megatron_fsdp2"):
        from ckpt_bench.projection.rank_costs.megatron_state import MegatronState

        return sum(map(len, MegatronState(Workload(**job.workload), job.world_size).sharded_metadata(0)))
    from ckpt_bench.layout.dlio_layout import layout

    return sum(len(file.tensors) for file in layout(Workload(**job.workload), job.world_size).ranks[0].files)


def computed(job: JobCheckpoint, seconds: float, sums: RankSums = EVERY_RANK) -> RankCosts:
    settled_heap()  # whatever this process computed before
    budget = Budget(seconds)
    started = time.thread_time()
    costs = importlib.import_module(ENGINES[job.engine]).compute(job, budget, sums)
    costs.computed_with = _versions()
    costs.budget_s, costs.spent_s = budget.seconds, round(time.thread_time() - started, 3)
    # the process's peak so far (a worker's: of every sample it computed, this one's at least)
    costs.peak_rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return costs


def serve() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        job = JobCheckpoint.from_dict(request["job"])
        if request.get("count_only"):
            answer = RankCosts(job.engine, job.world_size, [], rank0_units=rank0_units(job))
        else:
            answer = computed(job, float(request["budget"]), RankSums(**request.get("sums", {})))
        print(json.dumps(answer.as_dict()), flush=True)


def main(argv: list[str]) -> int:
    warnings.filterwarnings("ignore")  # megatron-core's about Transformer Engine and Apex
    import torch.distributed as dist

    with tempfile.TemporaryDirectory(prefix="ckpt-bench-store-") as folder:
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(folder, 'store')}", rank=0, world_size=1)
        try:
            if argv[:1] == ["--serve"]:
                serve()
            else:
                job = JobCheckpoint.from_dict(json.loads(Path(argv[0]).read_text()))
                print(json.dumps(computed(job, float(argv[1])).as_dict()))
        finally:
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
