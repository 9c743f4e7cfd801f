"""Building the Trainer the way a Lightning user on torchrun would, and timing `fit`.

Lightning reads torchrun's environment (TorchElasticEnvironment): devices = LOCAL_WORLD_SIZE
(= --nproc-per-node), num_nodes = WORLD_SIZE / LOCAL_WORLD_SIZE (= --nnodes).

Strategies, the same on CPU and GPU so numbers compare across machines:
  ddp   DDPStrategy; global rank 0 writes one file through the CheckpointIO.
  fsdp  ModelParallelStrategy(data_parallel_size=world, tensor_parallel_size=1) with FSDP2
        `fully_shard` in `configure_model`; every rank writes its shards of a DCP folder.
        Lightning's classic FSDPStrategy refuses the CPU, so it is not used anywhere.
"""

from __future__ import annotations

import os
import time

from lightning.pytorch import Callback, Trainer, seed_everything
from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy

from ckpt_bench.backends.lightning.model import BenchTransformer, NamedShapes
from ckpt_bench.backends.lightning.spec import LightningSpec


def world() -> tuple[int, int]:
    """(world size, ranks per node) as torchrun set them."""
    return int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_WORLD_SIZE"])


def build_module(spec: LightningSpec, steps: int, seed: int) -> BenchTransformer | NamedShapes:
    """The demo Transformer, or the named checkpoint shape (`--model`) when the spec names one."""
    seed_everything(seed, verbose=False)
    world_size, _ = world()
    samples = max(steps * spec.model["batch_size"] * world_size, world_size)
    if spec.named_model:
        return NamedShapes(spec.named_model, samples, seed)
    return BenchTransformer(num_layers=spec.num_layers, samples=samples, **spec.model)


def build_trainer(spec: LightningSpec, checkpoint_io, steps: int, callbacks=()) -> Trainer:
    world_size, per_node = world()
    if spec.strategy == "fsdp":
        strategy = ModelParallelStrategy(data_parallel_size=world_size, tensor_parallel_size=1,
                                         process_group_backend=spec.dist_backend)
    else:
        strategy = DDPStrategy(process_group_backend=spec.dist_backend, checkpoint_io=checkpoint_io)
    return Trainer(
        accelerator=spec.accelerator,
        devices=per_node,
        num_nodes=world_size // per_node,
        strategy=strategy,
        max_steps=steps,
        max_epochs=1,
        callbacks=list(callbacks),
        logger=False,
        enable_checkpointing=False,  # saves are ours to time; no ModelCheckpoint behind our back
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )


class FitClock(Callback):
    """The training loop's time, from the first to the end of the last step (setup and the
    strategy's teardown -- which waits for pending async writes -- are not training time)."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.seconds: float | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.started = time.perf_counter()

    def on_train_end(self, trainer, pl_module) -> None:
        self.seconds = time.perf_counter() - self.started


class SaveEveryNSteps(Callback):
    """`--steps-per-save`: save call K after training step K x N, inside `fit`."""

    def __init__(self, every: int, save) -> None:
        self.every = every
        self.save = save

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step % self.every == 0:
            self.save(trainer, trainer.global_step // self.every)
