"""The Megatron-core worker: one rank of a save pass or a load pass, started by torchrun.

    python -m torch.distributed.run --nproc-per-node N [--log-dir DIR] \\
        -m ckpt_bench.backends.megatron.worker --spec SPEC.json --phase save|load

save: train `train_iters` iterations of a real megatron-core GPT and save after every iteration
      `i` with `i % save_interval == 0` (and after the last one, as Megatron-LM's `pretrain` does).
      With `training_impact`: after 2 untimed warm-up iterations, the same iterations twice in the
      same processes -- without saves, then with them -- and the training-visible cost of saving
      (slowest rank, iteration times around each save) to `<run>/measurements.json`.
load: build the same model and optimizer (on `load_layout` when given: another TP/PP/EP and world
      size, resharded by dist_checkpointing), drop the latest checkpoint from the page cache (unless
      `warm_load`), load it, and check it against what was saved (per logical tensor after a
      layout change: ckpt_bench.backends.megatron.global_checksums).

Exit codes: 0 ok, 3 the checkpoint loaded but differs from what was saved, 1 anything else (the
message on stderr names the rank). See `ckpt_bench.backends.megatron.spec` for the spec.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

import torch
from megatron.core import parallel_state
from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

from ckpt_bench.backends.megatron import megatron_log
from ckpt_bench.backends.megatron.checkpointer import Checkpointer
from ckpt_bench.backends.megatron.formats import checkpoint_format, non_persistent_format, use_msc
from ckpt_bench.backends.megatron.spec import MegatronSpec
from ckpt_bench.backends.megatron.training import Trainer
from ckpt_bench.backends.megatron.worker_args import megatron_args
from ckpt_bench.core.megatron_arguments import MEGATRON_DEFAULTS
from ckpt_bench.core.rundir import DELETIONS_FILE, MEASUREMENTS_FILE
from ckpt_bench.storage import worker_storage
from ckpt_bench.worker import cpu_compat
from ckpt_bench.worker.entry import WorkerContext, exit_process, worker_main

# megatron-core's persistent async writer is a spawned process that re-imports this module as
# `__mp_main__`; it needs the CPU redirections too (no-op where CUDA is available).
cpu_compat.install()


def init_model_parallel(args: argparse.Namespace) -> None:
    """Megatron's parallel groups and seeds, as Megatron-LM's `initialize_megatron` sets them."""
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=args.tensor_model_parallel_size,
        pipeline_model_parallel_size=args.pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=None,
        context_parallel_size=args.context_parallel_size,
        expert_model_parallel_size=args.expert_model_parallel_size,
    )
    # Megatron-LM's `_set_random_seed`: the same seed on every rank, offset per pipeline stage.
    seed = args.seed + 100 * parallel_state.get_pipeline_model_parallel_rank()
    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed)


def train(args: argparse.Namespace, trainer: Trainer, checkpointer: Checkpointer, iterations: int,
          saves: bool, non_persistent: Checkpointer | None = None) -> list[float]:
    """Iterations 1..`iterations`, saving when due if `saves` (a persistent save, else, as Megatron-LM, a
    non-persistent one each `non_persistent_save_interval`). Returns each iteration's seconds on this rank, its
    save included: what training waits for (the log line shows the training step alone)."""
    seconds = []
    for iteration in range(1, iterations + 1):
        started = time.perf_counter()
        loss = trainer.global_loss(trainer.train_step())
        checkpointer.maybe_finalize(blocking=False)
        trained = time.perf_counter()
        if iteration % args.log_interval == 0:
            megatron_log.print_rank_0(megatron_log.iteration_line(
                iteration, args.train_iters, iteration * args.global_batch_size, (trained - started) * 1000, loss))
        if saves and (iteration % args.save_interval == 0 or iteration == args.train_iters):
            checkpointer.save(iteration)
        elif saves and non_persistent is not None and iteration % args.non_persistent_save_interval == 0:
            non_persistent.save(iteration)
        seconds.append(time.perf_counter() - started)
    return seconds


def slowest(seconds: list[float]) -> list[float]:
    """Per iteration, the slowest rank's time: the job goes as fast as its slowest rank."""
    values = torch.tensor(seconds, dtype=torch.float64, device=torch.device("cpu"))
    if torch.distributed.get_backend() == "nccl":
        values = values.cuda()
    torch.distributed.all_reduce(values, op=torch.distributed.ReduceOp.MAX)
    return values.tolist()


def training_impact(args: argparse.Namespace, without: list[float], with_saves: list[float]) -> dict:
    """The report's `training` section: what saving cost the training loop."""
    time_without, time_with = sum(without), sum(with_saves)
    typical = statistics.median(without)
    saved = [i for i in range(1, args.train_iters + 1) if i % args.save_interval == 0 or i == args.train_iters]
    return {
        "iterations": args.train_iters,
        "saves": len(saved),
        "async_save": bool(args.async_save),
        "time_without_saves": round(time_without, 4),
        "time_with_saves": round(time_with, 4),
        "save_impact_time": round(time_with - time_without, 4),
        "save_impact_percent": round(100 * (time_with - time_without) / time_without, 1) if time_without else None,
        "iteration_time_without_saves_median": round(typical, 4),
        "around_saves": [
            {"iteration": i, "iteration_time": round(with_saves[i - 1], 4),
             "next_iteration_time": round(with_saves[i], 4) if i < len(with_saves) else None}
            for i in saved
        ],
        "timing": "slowest rank per iteration, time.perf_counter; an iteration's time includes the save made "
                  "after it (the blocking part; an async save's background write competes with later "
                  "iterations); after 2 untimed warm-up iterations; the first save of a process includes "
                  "megatron-core's one-off writer start-up",
    }


def train_and_save(args: argparse.Namespace, trainer: Trainer, checkpointer: Checkpointer,
                   non_persistent: Checkpointer | None, measure_impact_in: str | None) -> None:
    """The save pass; with `measure_impact_in` (a run directory) the training-visible cost of the saves
    is measured first without, then with saves, and written there."""
    if measure_impact_in is None:
        train(args, trainer, checkpointer, args.train_iters, saves=True, non_persistent=non_persistent)
        checkpointer.close()
        return
    train(args, trainer, checkpointer, min(2, args.train_iters), saves=False)  # warm-up: first-iteration costs
    without = slowest(train(args, trainer, checkpointer, args.train_iters, saves=False))
    with_saves = slowest(train(args, trainer, checkpointer, args.train_iters, saves=True,
                               non_persistent=non_persistent))
    checkpointer.close()  # after the timing: the last async save's wait is the job's end, not training
    if torch.distributed.get_rank() == 0:
        path = Path(measure_impact_in) / MEASUREMENTS_FILE
        path.write_text(json.dumps({"training": training_impact(args, without, with_saves)}, indent=2) + "\n")


def run(spec: MegatronSpec, phase: str) -> None:
    context = WorkerContext.join()  # nccl and one GPU per local rank where CUDA exists, else gloo on the CPU
    args = megatron_args(spec, context.world_size, phase)
    storage = worker_storage(spec.storage or {"storage": "disk"})
    use_msc(spec.storage is not None and spec.storage["storage"] == "msc")
    init_model_parallel(args)
    megatron_log.print_arguments(args, sorted(set(spec.arguments) - set(MEGATRON_DEFAULTS)))

    trainer = Trainer(args, context.device)
    with context.recorder(spec.events_dir) as events:
        checkpointer = Checkpointer(args, checkpoint_format(args, trainer), events, spec.integrity_dir, context,
                                    layout_independent=spec.load_layout is not None, local_path=storage.local_path)
        tier = non_persistent_format(args, trainer)
        non_persistent = None if tier is None else Checkpointer(
            args, tier[0], events, spec.integrity_dir, context, layout_independent=spec.load_layout is not None,
            local_path=storage.local_path, root=tier[1], tier=f"non_persistent_{args.non_persistent_ckpt_type}")
        if phase == "save":
            train_and_save(args, trainer, checkpointer, non_persistent, spec.run_dir if spec.training_impact else None)
            deletions = checkpointer.deletions + (non_persistent.deletions if non_persistent else [])
            if deletions and context.rank == 0:
                Path(spec.run_dir, DELETIONS_FILE).write_text(json.dumps(deletions, indent=1) + "\n")
        else:
            if non_persistent is not None and args.non_persistent_ckpt_type == "local" and args.replication:
                lose_local_copy(non_persistent.root, context)  # before its newest is looked for, as after a loss
            restored, reason = restored_tier(checkpointer, non_persistent, spec.load_tier)
            iteration = restored.load(warm=spec.warm_load, reason=reason)
            restored.verify(iteration)


def restored_tier(persistent: Checkpointer, non_persistent: Checkpointer | None,
                  asked: str | None) -> tuple[Checkpointer, str | None]:
    """The tier a restart reads, and why (None without non-persistent checkpoints): the one `asked` for, else
    Megatron-LM's choice (`_load_base_checkpoint`, core_v0.16.1 training/checkpointing.py 1195-1197): the
    non-persistent checkpoint when its iteration is not older than the persistent one's."""
    if non_persistent is None:
        return persistent, None
    latest, latest_non_persistent = persistent.latest(), non_persistent.latest()
    found = (f"the newest persistent checkpoint is of iteration {latest if latest is not None else 'none'}, the "
             f"newest non-persistent of {latest_non_persistent if latest_non_persistent is not None else 'none'}")
    if asked is not None:
        restored = non_persistent if asked == "non_persistent" else persistent
        return restored, f"--load-tier {asked.replace('_', '-')}; {found}"
    takes_non_persistent = latest_non_persistent is not None and (latest is None or latest_non_persistent >= latest)
    rule = ("Megatron-LM restarts from the non-persistent checkpoint when it is not older than the persistent one"
            f" ({found})")
    return (non_persistent if takes_non_persistent else persistent), rule


def lose_local_copy(root: str, context: WorkerContext) -> None:
    """A node's lost local checkpoints: rank 0's folder of the local tier (its own file and the replicas it
    held) removed before the load, which must then retrieve rank 0's shard from a peer's replica."""
    if context.rank == 0:
        lost = Path(root, "0")
        megatron_log.print_rank_0(f"removing {lost} before the load: a lost node's local checkpoints")
        shutil.rmtree(lost)
    torch.distributed.barrier()


def main(argv: list[str] | None = None) -> int:
    return worker_main(__doc__, MegatronSpec.from_file, run, argv)


if __name__ == "__main__":
    exit_process(main())
