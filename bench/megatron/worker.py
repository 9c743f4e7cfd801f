"""The Megatron-core worker: one rank of a save pass or a load pass, started by torchrun.

    python -m torch.distributed.run --nproc-per-node N [--log-dir DIR] \\
        -m bench.megatron.worker --spec SPEC.json --phase save|load

save: train `train_iters` iterations of a real megatron-core GPT and save after every iteration
      `i` with `i % save_interval == 0` (and after the last one, as Megatron-LM's `pretrain` does).
load: build the same model and optimizer, drop the latest checkpoint from the page cache (unless
      `warm_load`), load it, and check it against what was saved.

Exit codes: 0 ok, 3 the checkpoint loaded but differs from what was saved, 1 anything else (the
message on stderr names the rank). See `bench.megatron.spec` for the spec.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from megatron.core import parallel_state
from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

from bench.events import EventRecorder
from bench.megatron import cpu_compat, megatron_log
from bench.megatron.checkpointer import Checkpointer
from bench.megatron.formats import checkpoint_format
from bench.megatron.spec import MEGATRON_DEFAULTS, WorkerSpec
from bench.megatron.training import Trainer
from bench.worker_entry import WorkerContext, worker_main

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


def train_and_save(args: argparse.Namespace, trainer: Trainer, checkpointer: Checkpointer) -> None:
    samples_per_iteration = args.global_batch_size
    for iteration in range(1, args.train_iters + 1):
        started = time.perf_counter()
        loss = trainer.global_loss(trainer.train_step())
        checkpointer.maybe_finalize(blocking=False)
        if iteration % args.log_interval == 0:
            megatron_log.print_rank_0(
                megatron_log.iteration_line(
                    iteration,
                    args.train_iters,
                    iteration * samples_per_iteration,
                    (time.perf_counter() - started) * 1000,
                    loss,
                )
            )
        if iteration % args.save_interval == 0 or iteration == args.train_iters:
            checkpointer.save(iteration)
    checkpointer.close()


def run(spec: WorkerSpec, phase: str) -> None:
    context = WorkerContext.join()  # nccl and one GPU per local rank where CUDA exists, else gloo on the CPU
    args = spec.megatron_args(context.world_size)
    init_model_parallel(args)
    megatron_log.print_arguments(args, sorted(set(spec.megatron) - set(MEGATRON_DEFAULTS)))

    trainer = Trainer(args, context.device)
    with EventRecorder(spec.events_dir, context.rank) as events:
        checkpointer = Checkpointer(args, checkpoint_format(args, trainer), events, spec.integrity_dir, context)
        if phase == "save":
            train_and_save(args, trainer, checkpointer)
        else:
            iteration = checkpointer.load(warm=spec.warm_load)
            checkpointer.verify(iteration)


def main(argv: list[str] | None = None) -> int:
    return worker_main(__doc__, WorkerSpec.from_file, run, argv)


if __name__ == "__main__":
    sys.exit(main())
