"""The phases of megatron-core's `dist_checkpointing` saves and loads, marked on its own steps.

    save   state_dict (factories applied, common state split from sharded) | validate+common (the sharding
           check's all_gather, rank 0's common.pt) | plan+exchange (a fully-parallel wrapper's distribution,
           the DCP planner megatron-core makes inside its strategy, the plans' collectives) | stage (the
           request's preload_fn: the device-to-host copy) | write+fsync (its writer processes, one file
           each, fsynced) | finalize (its finalize functions: .metadata, metadata.json, the last barrier)
    async  the strategy returns its request after plan+exchange; whoever schedules it marks the rest
           (stage runs in this process before a forked writer starts; schedule)
    load   validate+common (common.pt, the sharding check) | read (the strategy's load: .metadata, the load
           plan, reading, deserializing)

The hooks: `dist_checkpointing.save`'s consistency hook of the common state (changes nothing), the save
strategy's `async_save` (its synchronous `save` calls it too) and the request it returns, a fully-parallel
wrapper's `save`/`async_save`, the load strategy's `load`.
"""

from __future__ import annotations

import functools

from megatron.core.dist_checkpointing.strategies.async_utils import AsyncRequest

from ckpt_bench.core.events import Phase
from ckpt_bench.worker.phases import Marked, PhaseClock, mark_calls


def _unchanged(common_state_dict: dict) -> dict:
    return common_state_dict


def common_check_hook(phases: PhaseClock) -> Marked:
    """`preprocess_common_before_consistancy_check` for `dist_checkpointing.save`: returns the common state
    as it is, and begins validate+common (the sharding check follows it at once)."""
    return phases.marking(_unchanged, Phase.VALIDATE_COMMON)


def mark_save_strategy(strategy, phases: PhaseClock, synchronous: bool, base=None):
    """Mark `strategy` (megatron-core's save strategy, or a fully-parallel wrapper around `base`) in place.
    An async save's request has only its staging marked: its write runs in megatron-core's writer."""
    base = strategy if base is None else base
    async_save = base.async_save

    @functools.wraps(async_save)
    def planned(sharded_state_dict, checkpoint_dir) -> AsyncRequest:
        phases.begin(Phase.PLAN_EXCHANGE)
        request = async_save(sharded_state_dict, checkpoint_dir)
        staged = Phase.WRITE_FSYNC if synchronous else Phase.SCHEDULE
        preload = request.preload_fn and phases.marking(request.preload_fn, Phase.STAGE, staged)
        if not synchronous:
            return request._replace(preload_fn=preload)
        return request._replace(
            preload_fn=preload,
            async_fn=request.async_fn and phases.marking(request.async_fn, Phase.WRITE_FSYNC),
            finalize_fns=[phases.marking(fn, Phase.FINALIZE) for fn in request.finalize_fns])

    base.async_save = planned
    if strategy is not base:
        mark_calls(strategy, phases, {"save": Phase.PLAN_EXCHANGE, "async_save": Phase.PLAN_EXCHANGE})
    return strategy


def mark_load_strategy(strategy, phases: PhaseClock):
    """Mark megatron-core's load strategy (or its fully-parallel wrapper) in place: its `load` reads."""
    return mark_calls(strategy, phases, {"load": Phase.READ})
