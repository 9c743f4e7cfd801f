"""Bare DCP saves: `dcp.save` of `build_state(model)` with nothing of ckpt-bench's around it.

    torchrun --nproc-per-node N benchmarks/bare/dcp_save.py --spec RUN/worker.json --save-calls K \
        --save-dir DIR --out durations.json

The state is the one ckpt-bench's DCP worker saves for the same spec (model, dtype: ckpt_bench.backends.dcp.models),
written by torch's FileSystemWriter with the spec's writer threads and fsync. Each call: a barrier,
then the timed `dcp.save` into DIR/iter_K; a call's duration is the slowest rank's (as ckpt-bench
reports a save). Rank 0 writes the durations (seconds) as JSON.

With --step-between-saves, each call is preceded (untimed, before the barrier) by what a training step
does to the state between two checkpoints: every tensor updated in place, its memory read and written
once, as an optimizer step updates every parameter. That is the reference a training job's saves have:
none saves back to back on a state nobody touched.
"""

import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from common import parse_arguments, write_slowest
from torch.distributed.checkpoint import FileSystemWriter

from ckpt_bench.backends.dcp.models import build_state
from ckpt_bench.backends.dcp.spec import DcpSpec


def main() -> None:
    options = parse_arguments(__doc__, step_between_saves=True)
    spec = DcpSpec.from_file(options.spec)
    dist.init_process_group(spec.dist_backend)
    state = build_state(spec.model, spec.dtype, seed=spec.seed)
    durations = []
    for call in range(1, options.save_calls + 1):
        if options.step_between_saves:
            with torch.no_grad():
                for tensor in state.values():
                    tensor.mul_(1.0 - 1e-6)  # an optimizer-like update: every element read and written
        writer = FileSystemWriter(f"{options.save_dir}/iter_{call:07d}", thread_count=spec.thread_count,
                                  sync_files=spec.sync_files)
        dist.barrier()
        start = time.monotonic()
        dcp.save(state, storage_writer=writer)
        durations.append(time.monotonic() - start)
    write_slowest(durations, options.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
