"""The PyTorch DCP worker: one rank of a save pass or a load pass, started by torchrun.

    python -m torch.distributed.run --nproc-per-node N -m ckpt_bench.backends.dcp.worker \
        --spec SPEC.json --phase save|load

save: build the named model's state (replicated on every rank, as under DDP) and save it `save_calls`
      times with `torch.distributed.checkpoint.save` (or `async_save`), call K into `iter_000000K/`
      of the run's folder, S3 prefix or fsspec URL, through the storage's own DCP writer
      (ckpt_bench.storage.worker_storage). Before each save the state changes a little (one small
      tensor is incremented) so each checkpoint is distinct, and its digests are written for the
      load pass; neither is timed.
load: load *every* saved checkpoint, oldest first, into a zeroed state of the same shapes (for a
      folder on this host's disk, evicted from the page cache first unless `warm_load`), and compare
      each with the digests written when it was saved. Loading each one (not only the last) gives as many
      load samples as save samples and checks that each iteration holds its own state.

Timing (ckpt_bench.core.events), per rank. Before each save or load, untimed: the storage writer/reader is
built (for S3 that creates the client, as s3torchbenchmarking does) and a barrier lines the ranks up.
  sync   SAVE_START -> `save` returns: SAVE_BLOCK_END and SAVE_END.
  async  SAVE_START -> `async_save` returns its future: SAVE_BLOCK_END (the state is staged, training
         could go on) -> the future completes: SAVE_END, recorded by the future's done-callback, so
         the time is when the write finished, not when we next looked. The next save waits for it.

Exit codes (ckpt_bench.worker.entry): 0 ok, 3 a checkpoint loaded with different values, 1 anything else.
"""

from __future__ import annotations

import threading

import torch.distributed.checkpoint as dcp

from ckpt_bench.backends.dcp.models import build_state
from ckpt_bench.backends.dcp.phases import mark_load, mark_save
from ckpt_bench.backends.dcp.spec import DcpSpec
from ckpt_bench.core import progress
from ckpt_bench.core.events import EventKind, EventRecorder
from ckpt_bench.storage import worker_storage
from ckpt_bench.worker import integrity
from ckpt_bench.worker.entry import (
    WorkerContext,
    error_text,
    exit_process,
    load_returned,
    save_returned,
    start_together,
    timed,
    worker_main,
)
from ckpt_bench.worker.phases import PhaseClock


def _log(rank: int, message: str) -> None:
    if rank == 0:
        print(message, flush=True)


def _perturb(state: dict, call: int) -> None:
    """Make checkpoint `call` differ from the others: its smallest tensor gets `call` added."""
    smallest = min(state, key=lambda name: state[name].numel())
    state[smallest].add_(call)


def _await_write(future, events: EventRecorder, call: int, path: str, background: PhaseClock) -> None:
    """Wait for an async save's write; its SAVE_END is recorded by the future's done-callback, so the
    time is when the write finished, not when we next looked, with the phases the writer went through."""
    finished = threading.Event()

    def on_done(done) -> None:
        # Runs in the thread that completed the write: the moment the checkpoint is on storage.
        error = done.exception()
        written = events.now()
        events.record(EventKind.SAVE_END, call, path=path, error=error_text(error) if error else None, at=written,
                      phases=background.close(written[0]))
        finished.set()

    future.add_done_callback(on_done)
    finished.wait()
    future.result()  # raises the writer's error, if any


def prepare_save(state: dict, call: int, integrity_dir: str, rank: int) -> None:
    """Untimed, before save `call`: make it differ from the others and write its digests for the load pass."""
    _perturb(state, call)
    integrity.write_manifest(integrity_dir, call, rank, integrity.state_digests(state))


def timed_save(state: dict, writer, events: EventRecorder, call: int, path: str, async_save: bool,
               sync_files: bool = False) -> None:
    """Save `call` as the report times it: SAVE_START, the call, SAVE_BLOCK_END when it returns, SAVE_END
    when the checkpoint is written (at once for a synchronous save); each with the phases up to it."""
    training = PhaseClock()
    background = PhaseClock() if async_save else training
    planner = mark_save(writer, sync_files, training, background)
    with timed(events, EventKind.SAVE_START, EventKind.SAVE_END, call, path=path, phases=training):
        if async_save:
            future = dcp.async_save(state, storage_writer=writer, planner=planner)
        else:
            dcp.save(state, storage_writer=writer, planner=planner)
    save_returned(events, call, path, None if async_save else dict, phases=training)
    if async_save:
        _await_write(future, events, call, path, background)


def save_pass(spec: DcpSpec, events: EventRecorder, context: WorkerContext) -> None:
    storage = worker_storage(spec.storage)
    state = build_state(spec.model, spec.dtype, seed=spec.seed, device=context.device)
    for call in range(1, spec.save_calls + 1):
        prepare_save(state, call, spec.integrity_dir, context.rank)
        path = spec.iteration_dir(call)
        # Not timed: building the writer creates the S3 client (as s3torchbenchmarking).
        writer = storage.dcp_writer(path, spec.thread_count, spec.sync_files)
        start_together()
        _log(context.rank, f"saving checkpoint {call}/{spec.save_calls} to {path}")
        progress.say_once(progress.FIRST_SAVE)
        timed_save(state, writer, events, call, path, spec.async_save, spec.sync_files)
        _log(context.rank, f"saved checkpoint {call}/{spec.save_calls}")


def load_pass(spec: DcpSpec, events: EventRecorder, context: WorkerContext) -> dict:
    """Load every saved checkpoint and return this rank's verdict over all of them."""
    storage = worker_storage(spec.storage)
    state = build_state(spec.model, spec.dtype, device=context.device, zeros=True)
    verdicts = {}
    for call in range(1, spec.save_calls + 1):
        path = spec.iteration_dir(call)
        for tensor in state.values():
            tensor.zero_()
        context.evict(storage.local_path(path), spec.warm_load)
        reader = storage.dcp_reader(path)
        start_together()
        _log(context.rank, f"loading checkpoint {call}/{spec.save_calls} from {path}")
        phases = PhaseClock()
        planner = mark_load(reader, phases)
        with timed(events, EventKind.LOAD_START, EventKind.LOAD_END, call, path=path, phases=phases):
            dcp.load(state, storage_reader=reader, planner=planner)
        load_returned(events, call, path, phases)
        expected = integrity.read_manifest(spec.integrity_dir, call, context.rank)
        verdicts[call] = integrity.compare(expected, integrity.state_digests(state))
        _log(context.rank, f"loaded checkpoint {call}/{spec.save_calls}: verified={verdicts[call]['verified']}")
    return integrity.combine_calls([verdicts[call] for call in sorted(verdicts)])


def run(spec: DcpSpec, phase: str) -> None:
    context = WorkerContext.join(spec.dist_backend)
    with context.recorder(spec.events_dir) as events:
        if phase == "save":
            save_pass(spec, events, context)
        else:
            verdict = load_pass(spec, events, context)
            integrity.publish_verdict(spec.integrity_dir, context.rank, spec.save_calls, verdict)


def main(argv: list[str] | None = None) -> int:
    return worker_main(__doc__, DcpSpec.from_file, run, argv)


if __name__ == "__main__":
    exit_process(main())
