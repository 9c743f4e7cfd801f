"""The workload worker: one rank of a save pass or a load pass, started by torchrun.

    python -m torch.distributed.run --nproc-per-node N -m ckpt_bench.backends.workload.worker \\
        --spec worker.json --phase save|load

save: allocate this rank's share of the job's checkpoint state once (`Engine.allocate`: DLIO's tensors, or
      a Megatron GPT's sharded tensors for torch_dist), then `save_calls` times: change one tensor a little
      (so every checkpoint differs), digest what changed, build the engine's writer, wait the workload's
      time between checkpoints, barrier, and save -- timed from the barrier to the end of the engine's call
      (SAVE_BLOCK_END) and to the checkpoint being durable (SAVE_END; later for an async save), on every rank.
load: `load_calls` times, each of a different save (1, 2, ...): evict it from this host's page cache (a
      cold load, unless --warm-load), wait, barrier, load (timed), then compare every tensor's digest with
      the save's.

This is DLIO's timing (sleep, barrier, each rank's own clock around its call), with our events: the report
combines ranks as it does for every backend (the slowest rank), and its `mlperf` section gives DLIO's and
mlpstorage's figures from the same events. Exit codes as every worker (ckpt_bench.worker.entry).
"""

from __future__ import annotations

import importlib
import threading
import time

import torch
import torch.distributed as dist

from ckpt_bench.backends.workload.engines import ENGINES
from ckpt_bench.backends.workload.engines.base import Engine, Pending, RankState
from ckpt_bench.backends.workload.spec import WorkloadSpec
from ckpt_bench.core import progress
from ckpt_bench.core.events import EventKind, EventRecorder, Phase
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


def _perturb(state: RankState, call: int, digests: dict[str, str]) -> None:
    """Make checkpoint `call` differ from the others: the engine's chosen tensor, or the smallest, gets `call`
    added, and only that tensor is digested again (digesting a rank's whole share before every save would
    cost minutes)."""
    if not state.tensors:
        return
    name = state.perturbed or min(state.tensors, key=lambda key: state.tensors[key].numel())
    state.tensors[name].add_(call)
    digests[name] = integrity.tensor_digest(state.tensors[name])


def _wait_durable(pending: Pending, events: EventRecorder, call: int, path: str, background: PhaseClock) -> None:
    """Wait for an async save; SAVE_END is stamped on the thread that saw the write finish, with the phases of
    `background` (the engine's writer)."""
    outcome: list[BaseException | None] = []

    def wait() -> None:
        try:
            pending()
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001  (recorded, then raised on the rank's thread)
            outcome.append(error)
        done = events.now()
        events.record(EventKind.SAVE_END, call, path=path, error=error_text(outcome[0]) if outcome[0] else None,
                      at=done, phases=background.close(done[0]))

    waiter = threading.Thread(target=wait, name="checkpoint-finalize")
    waiter.start()
    waiter.join()
    if outcome[0] is not None:
        raise outcome[0]


def save_pass(spec: WorkloadSpec, engine: Engine, events: EventRecorder, context: WorkerContext) -> None:
    workload = engine.layout.workload
    progress.say(f"allocating {workload.name}'s checkpoint state on each rank (rank 0 writes "
                 f"{engine.share.bytes / 2**30:.1f} GiB a save)")
    state = engine.allocate()
    progress.say("digesting every tensor of the state once (to verify the loads against)")
    digests = integrity.state_digests(state.tensors)
    _log(context.rank, f"{workload.name} through {spec.engine}: {state.nbytes / 2**30:.3f} GiB on rank 0, "
                       f"{spec.save_calls} saves")
    for call in range(1, spec.save_calls + 1):
        _perturb(state, call, digests)
        integrity.write_manifest(spec.integrity_dir, call, context.rank, digests)
        path = spec.iteration_dir(call)
        engine.prepare(state, path)
        time.sleep(spec.time_between_checkpoints)
        start_together()
        _log(context.rank, f"saving checkpoint {call}/{spec.save_calls} to {path}")
        progress.say_once(progress.FIRST_SAVE)
        with timed(events, EventKind.SAVE_START, EventKind.SAVE_END, call, path=path, phases=engine.phases,
                   first=engine.first_save_phase):
            pending = engine.save(state, path)
            if workload.rank_sync and pending is None:
                engine.phases.begin(Phase.FINALIZE)
                dist.barrier()
        save_returned(events, call, path, dict if pending is None else None, phases=engine.phases)
        if pending is not None:
            _wait_durable(pending, events, call, path, engine.background)
        _log(context.rank, f"saved checkpoint {call}/{spec.save_calls}")


def load_pass(spec: WorkloadSpec, engine: Engine, events: EventRecorder, context: WorkerContext) -> dict:
    """Load saves 1..load_calls, each cold; this rank's verdict over all of them."""
    progress.say("allocating each rank's buffers to load into")
    state = engine.allocate_for_load()
    verdicts = []
    for call in range(1, spec.load_calls + 1):
        path = spec.iteration_dir(call)
        engine.prepare(state, path)
        context.evict(engine.storage.local_path(path), spec.warm_load)
        time.sleep(spec.time_between_checkpoints)
        start_together()
        _log(context.rank, f"loading checkpoint {call}/{spec.load_calls} from {path}")
        with timed(events, EventKind.LOAD_START, EventKind.LOAD_END, call, path=path, phases=engine.phases,
                   first=engine.first_load_phase):
            loaded = engine.load(state, path)
            if engine.layout.workload.rank_sync:
                engine.phases.begin(Phase.FINALIZE)
                dist.barrier()
        load_returned(events, call, path, engine.phases)
        expected = integrity.read_manifest(spec.integrity_dir, call, context.rank)
        verdicts.append(integrity.compare(expected, integrity.state_digests(loaded)))
        del loaded
        _log(context.rank, f"loaded checkpoint {call}/{spec.load_calls}: verified={verdicts[-1]['verified']}")
    return integrity.combine_calls(verdicts)


def run(spec: WorkloadSpec, phase: str) -> None:
    run_pass(spec, phase, WorkerContext.join(spec.dist_backend))


def run_pass(spec: WorkloadSpec, phase: str, context: WorkerContext) -> None:
    """This rank's `phase` pass of `spec`, in the process group `context` joined (a test runs the passes of
    several runs in one torchrun: tests/workload_runs.py)."""
    torch.manual_seed(spec.seed + context.rank)
    engine_class = importlib.import_module(ENGINES[spec.engine].module).ENGINE
    engine = engine_class(spec, spec.layout(), context, worker_storage(spec.storage))
    try:
        with context.recorder(spec.events_dir) as events:
            if phase == "save":
                save_pass(spec, engine, events, context)
            else:
                verdict = load_pass(spec, engine, events, context)
                integrity.publish_verdict(spec.integrity_dir, context.rank, spec.load_calls, verdict)
    finally:
        engine.close()


def main(argv: list[str] | None = None) -> int:
    return worker_main(__doc__, WorkloadSpec.from_file, run, argv)


if __name__ == "__main__":
    exit_process(main())
