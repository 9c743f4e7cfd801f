"""Which of an engine's global steps (computed once, `rank_costs`) a save or a restart runs, at the settings the
experiment runs with (`model.checkpointing.CheckpointSettings`). Plain Python: the projection assembles each save
and restart from this, so another setting costs no second computation.

megatron-core `torch_dist`, as Megatron-LM's `save_checkpoint` and `load_checkpoint` call it (core_v0.16.1):

save, the n-th of a process (a restart's process starts again at the first):
    sharding validation    `save_preprocess` (serialization.py), unless a later save under
                           `ckpt_assume_constant_structure` (checkpointing.py 610-613)
    fully parallel         `FullyParallelSaveStrategyWrapper.apply_saving_parallelization` with
      distribution         `ckpt_fully_parallel_save`; cached from the second save under constant structure
    sharding validation,   the wrapper validates again while it has no cached distribution: every save without
      again                constant structure, the first with it (fully_parallel.py 128-130)
    global plan            gathered to rank 0 until the plan is validated as cached: from the third save under
                           constant structure it is skipped (state_dict_saver.py 128-147, strategies/torch.py
                           670-735)
    finalize               every save: write results gathered, `.metadata` written (an async save's at a later
                           iteration, blocking the training loop there: async_utils.py 602-607)
restart:
    sharding validation    `dist_checkpointing.load`'s `determine_global_metadata` (validate_access_integrity)
    metadata               `.metadata` read and unpickled; twice under `ckpt_fully_parallel_load`, which runs the
                           base strategy once for the sharded objects and once for the tensors (fully_parallel.py
                           248, 252), each with a reader of its own
    fully parallel         only with `ckpt_fully_parallel_load` (checkpointing.py 1124-1127)
      distribution
    load plan              gathered, planned, scattered: of the shards the distribution gives each rank, or
                           without the fully parallel load of every shard a rank holds
    exchange               only with `ckpt_fully_parallel_load`: the shards a rank holds and another read

Other engines run every step at every save (DCP's plan caching is off by default and in the dcp engine).
"""

from __future__ import annotations

from ckpt_bench.model.checkpointing import CheckpointSettings
from ckpt_bench.projection.rank_costs.base import RankCosts, Step

#: The load plan a restart without the fully parallel load makes (`rank_costs.torch_dist` computes it under this
#: name; kept here, beside the schedule, so that the schedule imports no engine's code).
HELD_LOAD_PLAN = "load plan (every shard a rank holds)"

__all__ = ["HELD_LOAD_PLAN", "load_steps", "save_steps"]


def _step(costs: RankCosts, name: str, operation: str) -> Step | None:
    found = next((step for step in costs.steps if step.name == name and step.operation == operation), None)
    if found is None and not costs.steps:  # not computed: an open term, never 0
        return Step(name, operation, f"megatron-core's {name}", why="not computed for this engine at this size")
    return found


def save_steps(costs: RankCosts, settings: CheckpointSettings, nth: int) -> list[tuple[str, Step]]:
    """(term name, step) of the `nth` save of a process (1, 2, 3: the third and later)."""
    if costs.engine != "torch_dist":
        return [(step.name, step) for step in costs.steps if step.operation == "save"]
    constant = settings.ckpt_assume_constant_structure
    fresh = nth == 1 or not constant
    plan = []
    if fresh:
        plan.append(("sharding validation", "sharding validation"))
    if settings.ckpt_fully_parallel_save and fresh:
        plan += [("fully parallel distribution", "fully parallel distribution"),
                 ("sharding validation, again (fully parallel save)", "sharding validation")]
    if not (constant and nth >= 3):
        plan.append(("global plan", "global plan"))
    plan.append(("finalize", "finalize"))
    return [(label, step) for label, name in plan if (step := _step(costs, name, "save")) is not None]


def load_steps(costs: RankCosts, settings: CheckpointSettings) -> list[tuple[str, Step]]:
    """(term name, step) of a restart."""
    if costs.engine != "torch_dist":
        return [(step.name, step) for step in costs.steps if step.operation == "load"]
    parallel = settings.ckpt_fully_parallel_load
    plan = [("sharding validation", "sharding validation"), ("metadata", "metadata")]
    if parallel:
        plan += [("fully parallel distribution", "fully parallel distribution"),
                 ("metadata, again (the tensors' load)", "metadata")]
    plan.append(("load plan", "load plan") if parallel else ("load plan", HELD_LOAD_PLAN))
    if parallel:
        plan.append(("exchange of loaded shards", "exchange of loaded shards"))
    return [(label, step) for label, name in plan if (step := _step(costs, name, "load")) is not None]
