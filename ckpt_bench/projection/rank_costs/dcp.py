"""torch.distributed.checkpoint's save and load at the job's size (torch as installed), as the dcp engine runs
them with `DefaultSavePlanner` and `DefaultLoadPlanner`:

save   1. the global plan: every rank's local plan (everything it holds, replicas included) gathered to rank 0,
          `create_global_plan` there (`dedup_save_plans` keeps each chunk on one of its holders, the global
          metadata, `_validate_global_plan`), the plans scattered back;
       2. finalize: write results gathered, `.metadata` written.
       DCP's plan caching (`enable_plan_caching`) skips 1 once the plans repeat.
load   every rank reads `.metadata`; the load plans gathered and scattered; every rank reads all it holds
       (replicas included: their bytes are the layout's read bytes).

The state is the workload's own: a Megatron GPT's sharded state at megatron's global offsets, or DLIO's
tensors, each under a name of its own.
"""

from __future__ import annotations

import functools

from torch.distributed.checkpoint import DefaultSavePlanner

from ckpt_bench.layout.checkpoint_layout import Layout
from ckpt_bench.layout.dlio_layout import dlio_tensor_name
from ckpt_bench.layout.dlio_layout import layout as dlio_layout
from ckpt_bench.layout.workload import Workload
from ckpt_bench.projection.job import JobCheckpoint
from ckpt_bench.projection.rank_costs.base import EVERY_RANK, Budget, RankCosts, RankSums
from ckpt_bench.projection.rank_costs.dcp_steps import DcpSteps, Item
from ckpt_bench.projection.rank_costs.megatron_state import MegatronState


class DlioItems:
    """DLIO's tensors of each rank as DCP plans them: whole 1-D tensors under names unique across the job."""

    def __init__(self, layout: Layout):
        self.layout = layout

    def __call__(self, rank: int) -> list[Item]:
        return [Item(dlio_tensor_name(file, spec.name), (0,), (spec.numel,), (spec.numel,), spec.dtype, spec.nbytes)
                for file in self.layout.ranks[rank].files for spec in file.tensors]


def compute(job: JobCheckpoint, budget: Budget, sums: RankSums = EVERY_RANK) -> RankCosts:
    """The steps above; `sums`: the load plan over a sample of a Megatron job's ranks (DLIO's are not sampled:
    every rank), or it alone."""
    workload = Workload(**job.workload)
    sample = None
    if job.state in ("megatron", "megatron_fsdp2"):
        state = MegatronState(workload, job.world_size)
        items = state.held_items
        sample = state.rank_sample(sums.ranks)
    else:
        items = DlioItems(dlio_layout(workload, job.world_size))
    dcp = DcpSteps(job.world_size, job.thread_count, budget, items, items)
    load_plan = functools.partial(dcp.load_plan, sums=sums, sample=sample)
    if sums.steps == "sums":
        return RankCosts(job.engine, job.world_size, [load_plan()])
    steps = [dcp.global_plan(DefaultSavePlanner(), decentralized=False), dcp.finalize(), dcp.metadata_read(),
             load_plan()]
    return RankCosts(job.engine, job.world_size, steps, metadata_file_bytes=dcp.metadata_bytes,
                     every_rank_reads_metadata=True)
