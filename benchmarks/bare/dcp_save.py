"""Bare DCP saves: `dcp.save` of `build_state(model)` with nothing of ckpt-bench's around it.

    torchrun --nproc-per-node N benchmarks/bare/dcp_save.py --spec RUN/worker.json --save-calls K \
        --save-dir DIR --out durations.json

The state is the one ckpt-bench's DCP worker saves for the same spec (model, dtype: bench.dcp.models),
written by torch's FileSystemWriter with the spec's writer threads and fsync. Each call: a barrier,
then the timed `dcp.save` into DIR/iter_K; a call's duration is the slowest rank's (as ckpt-bench
reports a save). Rank 0 writes the durations (seconds) as JSON.
"""

import argparse
import json
import time

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter

from bench.dcp.models import build_state
from bench.dcp.worker import WorkerSpec


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True)
    parser.add_argument("--save-calls", type=int, required=True)
    parser.add_argument("--save-dir", required=True)
    parser.add_argument("--out", required=True)
    options = parser.parse_args()
    spec = WorkerSpec.from_file(options.spec)
    dist.init_process_group(spec.dist_backend)
    state = build_state(spec.model, spec.dtype, seed=spec.seed)
    durations = []
    for call in range(1, options.save_calls + 1):
        writer = FileSystemWriter(f"{options.save_dir}/iter_{call:07d}", thread_count=spec.thread_count,
                                  sync_files=spec.sync_files)
        dist.barrier()
        start = time.monotonic()
        dcp.save(state, storage_writer=writer)
        durations.append(time.monotonic() - start)
    slowest = [None] * dist.get_world_size()
    dist.all_gather_object(slowest, durations)
    if dist.get_rank() == 0:
        with open(options.out, "w") as out:
            json.dump([max(per_rank) for per_rank in zip(*slowest, strict=True)], out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
