"""The Lightning worker: one rank of a save pass or a load pass, started by torchrun.

    python -m torch.distributed.run --nproc-per-node N ... \\
        -m ckpt_bench.backends.lightning.worker --spec worker.json --phase save|load

save: train `train_steps` steps, then -- in `on_train_end` (`on_fit_start` for 0 steps), while the
      strategy still holds the model where it trained -- call `trainer.save_checkpoint` `save_calls`
      times, each into its own `iter_000000K` (K = call index). Async: before each call (untimed) the previous write is
      awaited through `checkpoint_io.teardown()`, so every save is timed alone; after the last one
      the pass waits for it the same way, so a checkpoint is complete before the pass ends.
      With `steps_per_save`: `fit` runs save_calls x steps_per_save steps twice -- without saving, then
      saving every steps_per_save steps -- after a short untimed warm-up fit; the training-time
      impact goes to `<run>/measurements.json`. Async saves here overlap training as they would in a
      real run (and the report says so when a save is still writing when the next one starts).
load: build the same model from another seed, fit 0 steps and -- in `on_fit_start`, once the
      strategy has set up model and optimizer -- call `trainer.strategy.load_checkpoint`
      `load_calls` times, each of the last
      checkpoint (iteration = save_calls), each cold (page cache evicted) unless `warm_load`;
      every load is checked against the digests taken when it was saved.

Events: SAVE_START after an untimed barrier; SAVE_BLOCK_END when `trainer.save_checkpoint` returns
(it ends with Lightning's own barrier, so every rank's block time covers the writer's); SAVE_END at
the same moment for a synchronous save, on the writer thread when the file is written for an async
one (`RecordWriteEnd`). DDP ranks other than 0 write nothing: their SAVE_END follows their block
end with 0 bytes. Exit codes: 0 ok, 3 loaded but different, 1 anything else.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from lightning.pytorch import Callback

from ckpt_bench.backends.lightning.checkpoint_io import checkpoint_io_stack, local_size
from ckpt_bench.backends.lightning.spec import LightningSpec
from ckpt_bench.backends.lightning.training import FitClock, SaveEveryNSteps, build_module, build_trainer
from ckpt_bench.backends.lightning.verify import live_digests, loaded_digests
from ckpt_bench.core.events import EventKind, EventRecorder, Phase
from ckpt_bench.core.rundir import MEASUREMENTS_FILE
from ckpt_bench.storage import worker_storage
from ckpt_bench.worker import integrity
from ckpt_bench.worker.entry import WorkerContext, exit_process, load_returned, save_returned, timed, worker_main
from ckpt_bench.worker.phases import Marked, PhaseClock, mark_calls


class Saver:
    """Timed save calls with events; one per pass."""

    def __init__(self, spec: LightningSpec, recorder: EventRecorder):
        self.spec = spec
        self.recorder = recorder
        self.phases = PhaseClock()

    def _mark(self, strategy) -> None:
        """Mark the phases on the strategy's save (once per strategy): `trainer.save_checkpoint` builds the
        checkpoint dict (state_dict), hands it to the strategy, then meets the other ranks in a barrier
        (finalize). The strategy's call is DDP's write through the CheckpointIO (rank 0; the others write
        nothing), an async CheckpointIO's copy of the tensors and hand-off to its thread (stage), or
        FSDP2's whole DCP save (plan+write: its planner and writer are made inside)."""
        if isinstance(strategy.save_checkpoint, Marked):
            return
        if self.spec.strategy == "fsdp":
            call = Phase.PLAN_WRITE
        else:
            call = Phase.STAGE if self.spec.async_save else Phase.WRITE
        mark_calls(strategy, self.phases, {"save_checkpoint": (call, Phase.FINALIZE)})

    def __call__(self, trainer, iteration: int) -> None:
        path = self.spec.checkpoint_path(iteration)
        writes_here = self.spec.strategy == "fsdp" or trainer.is_global_zero
        ends_on_writer = self.spec.async_save and writes_here
        self._mark(trainer.strategy)
        trainer.strategy.barrier("ckpt-bench.save")
        with timed(self.recorder, EventKind.SAVE_START, EventKind.SAVE_END, iteration, path=path, phases=self.phases,
                   extra={"strategy": self.spec.strategy, "async": self.spec.async_save}):
            trainer.save_checkpoint(path)
        save_returned(self.recorder, iteration, path,
                      None if ends_on_writer else lambda: {"bytes": self._written(path, writes_here)},
                      phases=self.phases)

    def _written(self, path: str, writes_here: bool) -> int | None:
        """The bytes this rank's synchronous save wrote."""
        if not writes_here:
            return 0
        if self.spec.strategy == "ddp":
            return local_size(path)
        return None  # FSDP2: this rank's shards of a DCP folder; the launcher measures the folder

    def wait(self, trainer) -> None:
        """Untimed: the pending async write is finished (and its error, if any, raised)."""
        if self.spec.async_save:
            trainer.strategy.checkpoint_io.teardown()


class SaveCalls(Callback):
    """The save calls, at the end of training: the strategy still holds the model where it trained
    (Lightning's teardown moves it to the CPU before `fit` returns, which would hide the GPU's
    device-to-host copy from a save made after `fit`). With 0 training steps (s3torchbenchmarking's
    Lightning benchmark trains nothing) Lightning skips the training loop and its hooks, so the saves
    are made in `on_fit_start`, once the strategy has set up model and optimizer."""

    def __init__(self, spec: LightningSpec, saver: Saver, rank: int):
        self.spec, self.saver, self.rank = spec, saver, rank

    def on_fit_start(self, trainer, pl_module) -> None:
        if not self.spec.train_steps:
            self.save_calls(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.spec.train_steps:
            self.save_calls(trainer)

    def save_calls(self, trainer) -> None:
        digests = live_digests(trainer)  # the state does not change between the save calls
        for iteration in range(1, self.spec.save_calls + 1):
            integrity.write_manifest(self.spec.integrity_dir, iteration, self.rank, digests)
            self.saver.wait(trainer)
            self.saver(trainer, iteration)
        self.saver.wait(trainer)


def save_pass(spec: LightningSpec, recorder: EventRecorder, context: WorkerContext) -> None:
    saver = Saver(spec, recorder)
    if spec.steps_per_save:
        save_during_fit(spec, recorder, saver, context.rank)
        return
    trainer = build_trainer(spec, checkpoint_io_stack(spec.storage, spec.async_save, recorder), spec.train_steps,
                            [SaveCalls(spec, saver, context.rank)])
    trainer.fit(build_module(spec, spec.train_steps, spec.seed))
    print(f"saved {spec.save_calls} checkpoint(s) in {spec.checkpoint_dir}", flush=True)


def timed_fit(spec: LightningSpec, recorder: EventRecorder, steps: int, callbacks=()) -> tuple[object, float]:
    """The slowest rank's training-loop seconds (the job is as slow as its slowest rank)."""
    clock = FitClock()
    trainer = build_trainer(spec, checkpoint_io_stack(spec.storage, spec.async_save, recorder), steps,
                            [clock, *callbacks])
    trainer.fit(build_module(spec, steps, spec.seed))
    seconds = torch.tensor([clock.seconds], dtype=torch.float64, device=trainer.strategy.root_device)  # nccl: GPU
    torch.distributed.all_reduce(seconds, op=torch.distributed.ReduceOp.MAX)
    return trainer, seconds.item()


def save_during_fit(spec: LightningSpec, recorder: EventRecorder, saver: Saver, rank: int) -> None:
    steps = spec.save_calls * spec.steps_per_save
    timed_fit(spec, recorder, min(spec.train_steps, steps))  # warm-up: first-fit costs hit neither run
    _, without = timed_fit(spec, recorder, steps)
    trainer, with_saves = timed_fit(spec, recorder, steps, [SaveEveryNSteps(spec.steps_per_save, saver)])
    # `fit` ended at the last save and its teardown waited for the writes: the live state is what the
    # last checkpoint holds. Earlier saves are not digested (digesting inside fit would be timed).
    integrity.write_manifest(spec.integrity_dir, spec.save_calls, rank, live_digests(trainer))
    if rank == 0 and spec.run_dir:
        impact = with_saves - without
        measurement = {
            "steps_per_save": spec.steps_per_save,
            "train_steps": steps,
            "saves": spec.save_calls,
            "async_save": spec.async_save,
            "fit_time_without_saves": round(without, 3),
            "fit_time_with_saves": round(with_saves, 3),
            "save_impact_time": round(impact, 3),
            "save_impact_percent": round(100 * impact / without, 1) if without > 0 else None,
            "timing": "training loop (first to last step), slowest rank; after an untimed warm-up fit",
        }
        Path(spec.run_dir, MEASUREMENTS_FILE).write_text(json.dumps({"training": measurement}, indent=2) + "\n")
    print(f"fit without saves {without:.3f}s, with {spec.save_calls} saves {with_saves:.3f}s", flush=True)


class LoadCalls(Callback):
    """The load calls, once the strategy has set up model and optimizer where training would run
    (`on_fit_start`; the fit itself has 0 steps)."""

    def __init__(self, spec: LightningSpec, recorder: EventRecorder, context: WorkerContext):
        self.spec, self.recorder, self.context = spec, recorder, context

    def on_fit_start(self, trainer, pl_module) -> None:
        spec, iteration, rank = self.spec, self.spec.save_calls, self.context.rank
        expected = integrity.read_manifest(spec.integrity_dir, iteration, rank)
        path = spec.checkpoint_path(iteration)
        local_dir = worker_storage(spec.storage).local_path(spec.iteration_dir(iteration))
        verdicts = []
        for _call in range(spec.load_calls):
            self.context.evict(local_dir, spec.warm_load)
            trainer.strategy.barrier("ckpt-bench.load")
            # One phase: DDP's torch.load of the file; FSDP2's DCP load into the model and optimizer.
            phases = PhaseClock()
            with timed(self.recorder, EventKind.LOAD_START, EventKind.LOAD_END, iteration, path=path,
                       phases=phases, first=Phase.READ):
                loaded = trainer.strategy.load_checkpoint(path)
            load_returned(self.recorder, iteration, path, phases)
            verdicts.append(integrity.compare(expected, loaded_digests(trainer, loaded, spec.strategy)))
            del loaded
        integrity.publish_verdict(spec.integrity_dir, rank, iteration, integrity.combine_calls(verdicts))


def load_pass(spec: LightningSpec, recorder: EventRecorder, context: WorkerContext) -> None:
    """Another seed than the save pass: a load that changed nothing cannot pass verification."""
    trainer = build_trainer(spec, checkpoint_io_stack(spec.storage, False, recorder), 0,
                            [LoadCalls(spec, recorder, context)])
    trainer.fit(build_module(spec, 1, spec.seed + 1))
    print(f"loaded iteration {spec.save_calls} {spec.load_calls} time(s): verified", flush=True)


def run(spec: LightningSpec, phase: str) -> None:
    context = WorkerContext.from_env()  # the strategy joins the process group itself
    with context.recorder(spec.events_dir) as recorder:
        (save_pass if phase == "save" else load_pass)(spec, recorder, context)


def main(argv: list[str] | None = None) -> int:
    return worker_main(__doc__, LightningSpec.from_file, run, argv)


if __name__ == "__main__":
    exit_process(main())
