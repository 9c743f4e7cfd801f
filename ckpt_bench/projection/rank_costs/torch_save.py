"""DLIO's `torch.save` checkpointing at the job's size: each rank saves and loads its own files and nothing
passes between ranks but a barrier: no rank-count cost to compute."""

from __future__ import annotations

from ckpt_bench.projection.job import JobCheckpoint
from ckpt_bench.projection.rank_costs.base import Budget, RankCosts


def compute(job: JobCheckpoint, budget: Budget) -> RankCosts:
    return RankCosts("torch-save", job.world_size, [],
                     notes=["no global step: each rank torch.saves (loads) its own files; a barrier before and after"])
