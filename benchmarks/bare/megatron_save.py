"""Bare Megatron saves: `dist_checkpointing.save` of the worker's sharded state dict, nothing of ours around.

    torchrun --nproc-per-node N benchmarks/bare/megatron_save.py --spec RUN/worker.json --save-calls K \
        --save-dir DIR --out durations.json

The state is the one ckpt-bench's Megatron worker saves for the same spec (same model, optimizer and
parallel layout: ckpt_bench.backends.megatron builds it); the saves are megatron-core's own call with its default
torch_dist strategy, as Megatron-LM builds it. Each call: a training step, a barrier, the timed save
into DIR/iter_K; a call's duration is the slowest rank's. Rank 0 writes the durations as JSON.
"""

import os
import time

import torch
from common import parse_arguments, write_slowest
from megatron.core import dist_checkpointing, parallel_state
from megatron.core.dist_checkpointing.serialization import get_default_save_sharded_strategy
from megatron.core.dist_checkpointing.strategies.fully_parallel import FullyParallelSaveStrategyWrapper

from ckpt_bench.backends.megatron.formats import checkpoint_format
from ckpt_bench.backends.megatron.spec import MegatronSpec
from ckpt_bench.backends.megatron.training import Trainer
from ckpt_bench.backends.megatron.worker import init_model_parallel
from ckpt_bench.backends.megatron.worker_args import megatron_args
from ckpt_bench.worker import cpu_compat

cpu_compat.install()  # megatron-core on the CPU (no-op with CUDA): the platform, not the harness


def main() -> None:
    options = parse_arguments(__doc__)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.distributed.init_process_group("nccl" if cuda else "gloo")
    args = megatron_args(MegatronSpec.from_file(options.spec), torch.distributed.get_world_size())
    init_model_parallel(args)
    trainer = Trainer(args, device)
    state = checkpoint_format(args, trainer)
    # megatron-core's default strategy, spread over the data-parallel ranks when the spec says so (as
    # Megatron-LM builds it for --ckpt-fully-parallel-save).
    strategy = get_default_save_sharded_strategy("torch_dist")
    strategy.use_cached_ckpt_structure = bool(args.ckpt_assume_constant_structure)
    if args.ckpt_fully_parallel_save:
        strategy = FullyParallelSaveStrategyWrapper(
            strategy, parallel_state.get_data_parallel_group(with_context_parallel=True),
            args.ckpt_assume_constant_structure)
    durations = []
    for call in range(1, options.save_calls + 1):
        trainer.train_step()
        directory = f"{options.save_dir}/iter_{call:07d}"
        if torch.distributed.get_rank() == 0:
            os.makedirs(directory, exist_ok=True)
        sharded_state_dict = state.state_dict(call)
        torch.distributed.barrier()
        start = time.monotonic()
        dist_checkpointing.save(sharded_state_dict, directory, strategy)
        durations.append(time.monotonic() - start)
    write_slowest(durations, options.out)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
