"""The phases of megatron-core's `dist_checkpointing` saves and loads, marked on its own steps.

    save   state_dict (factories applied, common state split from sharded) | validate+common (the sharding
           check's all_gather, rank 0's common.pt) | plan+exchange (a fully-parallel wrapper's distribution,
           the DCP planner megatron-core makes inside its strategy, the plans' collectives) | stage (the
           request's preload_fn: the device-to-host copy) | write | fsync | collect (its writer processes,
           one file each, fsynced right after it is written; then their results gathered, the processes
           joined) | finalize (the barrier after every rank's write, its
           finalize functions: .metadata, metadata.json, the last barrier)
    async  the strategy returns its request after plan+exchange; whoever schedules it marks the rest
           (stage runs in this process before a forked writer starts; schedule). The writer records its
           write | fsync with SAVE_WRITTEN (`RecordWritten`); megatron-core runs the finalize functions later,
           on the process that calls `maybe_finalize_async_calls` once every rank's writer is done
           (`mark_finalize`), and that process records SAVE_END: the report's awaiting_finalize is between.
    load   validate+common (common.pt, the sharding check) | read (the strategy's load: .metadata, the load
           plan, reading, deserializing)

The hooks: `dist_checkpointing.save`'s consistency hook of the common state (changes nothing), the save
strategy's `async_save` (its synchronous `save` calls it too) and the request it returns, a fully-parallel
wrapper's `save`/`async_save`, the load strategy's `load`, and the `os.fsync` of megatron-core's file writer
(`filesystem_async`: each writer process fsyncs its file; ckpt_bench.worker.phases.time_fsyncs).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

from megatron.core.dist_checkpointing.strategies import filesystem_async
from megatron.core.dist_checkpointing.strategies.async_utils import AsyncRequest

from ckpt_bench.core.events import EventKind, EventRecorder, Phase
from ckpt_bench.worker.entry import error_text
from ckpt_bench.worker.phases import Marked, MarkedWrite, PhaseClock, mark_calls, time_fsyncs

time_fsyncs(filesystem_async)


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
    def planned(sharded_state_dict, checkpoint_dir, *args, **kwargs) -> AsyncRequest:
        # *args, **kwargs: the async strategy of megatron-core 0.17+ (ckpt_bench.core.megatron_release).
        phases.begin(Phase.PLAN_EXCHANGE)
        request = async_save(sharded_state_dict, checkpoint_dir, *args, **kwargs)
        staged = Phase.WRITE_FSYNC if synchronous else Phase.SCHEDULE
        preload = request.preload_fn and phases.marking(request.preload_fn, Phase.STAGE, staged)
        if not synchronous:
            return request._replace(preload_fn=preload)
        return request._replace(
            preload_fn=preload,
            # execute_sync's barrier follows the write: the wait for every rank's, with the finalize.
            async_fn=request.async_fn and MarkedWrite(request.async_fn, phases, Phase.WRITE_FSYNC, Phase.FINALIZE),
            finalize_fns=[phases.marking(fn, Phase.FINALIZE) for fn in request.finalize_fns])

    base.async_save = planned
    if strategy is not base:
        mark_calls(strategy, phases, {"save": Phase.PLAN_EXCHANGE, "async_save": Phase.PLAN_EXCHANGE})
    return strategy


def mark_load_strategy(strategy, phases: PhaseClock):
    """Mark megatron-core's load strategy (or its fully-parallel wrapper) in place: its `load` reads."""
    return mark_calls(strategy, phases, {"load": Phase.READ})


def mark_finalize(request: AsyncRequest, phases: PhaseClock) -> AsyncRequest:
    """`request` with its finalize functions beginning `finalize` on `phases`: the clock of the thread that calls
    `maybe_finalize_async_calls`, which runs them once every rank's writer is done. Close it after the last."""
    return request._replace(finalize_fns=[phases.marking(fn, Phase.FINALIZE) for fn in request.finalize_fns])


class RecordWritten:
    """An async request's `async_fn`, run by megatron-core's writer (a forked process, or the persistent one),
    recording SAVE_WRITTEN when it returns: this rank's files written and fsynced, with the writer's phases
    (write | fsync) and `written_bytes()`. The checkpoint is not complete until its finalize (SAVE_END, recorded
    by whoever finalizes). If the writing raises, SAVE_END with the error. Only picklable fields: the persistent
    writer receives the request through a queue."""

    def __init__(self, async_fn: Callable, events_dir: str, rank: int, iteration: int, directory: str,
                 written_bytes: Callable[[], int] | None = None):
        self.async_fn, self.events_dir, self.rank = async_fn, events_dir, rank
        self.iteration, self.directory, self.written_bytes = iteration, directory, written_bytes

    def __call__(self, *args, **kwargs) -> None:
        recorder = EventRecorder(self.events_dir, self.rank)
        phases = PhaseClock()  # the writer's own
        phases.open(Phase.WRITE_FSYNC, time.monotonic_ns())
        try:
            MarkedWrite(self.async_fn, phases, Phase.WRITE_FSYNC, None)(*args, **kwargs)
        except BaseException as error:
            recorder.record(EventKind.SAVE_END, self.iteration, path=self.directory, error=error_text(error))
            raise
        else:
            written = recorder.now()
            nbytes = self.written_bytes() if self.written_bytes is not None else None
            recorder.record(EventKind.SAVE_WRITTEN, self.iteration, path=self.directory, at=written,
                            phases=phases.close(written[0]), bytes=nbytes, extra={"recorded_by": "async writer"})
        finally:
            recorder.close()
