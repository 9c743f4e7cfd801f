"""Megatron-LM's legacy `torch` format at the job's size: no global plan (each writer `torch.save`s its files),
but with the distributed optimizer its state moves between hosts before a save and after a load:

save   `get_parameter_state_dp_zero` gathers each data-parallel group's optimizer state onto the group's rank 0
       (gloo, `data_parallel_group_gloo`: the hosts' own network, not the GPUs'), which writes `distrib_optim.pt`;
load   rank 0 of each group reads it and scatters each rank's part back (`load_parameter_state_from_dp_zero`).

Both are data movement through the ranks that write, priced by the projection with the network figure: a host
whose ranks are data-parallel rank 0 of their groups receives (sends) almost all of their state.
"""

from __future__ import annotations

from ckpt_bench.layout.megatron_torch import layout
from ckpt_bench.layout.workload import Workload
from ckpt_bench.projection.job import JobCheckpoint
from ckpt_bench.projection.rank_costs.base import Budget, RankCosts, Step


def compute(job: JobCheckpoint, budget: Budget) -> RankCosts:
    full = layout(Workload(**job.workload), job.world_size)
    dp = full.data_parallelism
    gathered = [sum(f.nbytes for f in share.files if f.kind == "optimizer") * (dp - 1) // dp for share in full.ranks]
    per = job.ranks_per_node
    busiest = max(sum(gathered[start:start + per]) for start in range(0, job.world_size, per))
    steps = []
    if busiest:
        collective = f"gloo gather (scatter) over data-parallel groups of {dp} ranks"
        steps = [Step("optimizer gather", "save", "get_parameter_state_dp_zero: each data-parallel group's optimizer "
                      "state gathered onto its rank 0 before it writes distrib_optim.pt", collective=collective,
                      host_bytes=busiest, why="data movement, not CPU: priced with the network figure"),
                 Step("optimizer scatter", "load", "load_parameter_state_from_dp_zero: rank 0 of each group reads "
                      "distrib_optim.pt and sends each rank its part", collective=collective, host_bytes=busiest,
                      why="data movement, not CPU: priced with the network figure")]
    return RankCosts("torch", job.world_size, steps,
                     notes=["no global plan: each writer torch.saves its own files; model_optim_rng.pt is read by "
                            "every rank of its model-parallel folder at a restart (the load's bytes)"])
