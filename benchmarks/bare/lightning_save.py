"""Bare Lightning saves: `trainer.save_checkpoint`, nothing of ours around it.

    torchrun --nproc-per-node N benchmarks/bare/lightning_save.py --spec RUN/worker.json --save-calls K \
        --save-dir DIR --out durations.json

The module and Trainer are the ones ckpt-bench's Lightning worker builds for the same spec
(ckpt_bench.backends.lightning.training), with Lightning's own CheckpointIO; after fitting, each call is a barrier
then the timed `trainer.save_checkpoint(DIR/iter_K/checkpoint.ckpt)`; a call's duration is the
slowest rank's. Rank 0 writes the durations as JSON.
"""

import time

import torch.distributed as dist
from common import parse_arguments, write_slowest
from lightning.pytorch import Callback

from ckpt_bench.backends.lightning.spec import LightningSpec
from ckpt_bench.backends.lightning.training import build_module, build_trainer


class Saves(Callback):
    """At the end of training, where the strategy still holds the model (as the worker saves)."""

    def __init__(self, calls: int, save_dir: str):
        self.calls, self.save_dir, self.durations = calls, save_dir, []

    def on_train_end(self, trainer, pl_module) -> None:
        for call in range(1, self.calls + 1):
            trainer.strategy.barrier()
            start = time.monotonic()
            trainer.save_checkpoint(f"{self.save_dir}/iter_{call:07d}/checkpoint.ckpt")
            self.durations.append(time.monotonic() - start)


def main() -> None:
    options = parse_arguments(__doc__)
    spec = LightningSpec.from_file(options.spec)
    saves = Saves(options.save_calls, options.save_dir)
    trainer = build_trainer(spec, None, spec.train_steps, [saves])
    trainer.fit(build_module(spec, spec.train_steps, spec.seed))
    write_slowest(saves.durations, options.out)
    # Lightning leaves its process group up; gloo's threads still running at exit abort the process.
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
