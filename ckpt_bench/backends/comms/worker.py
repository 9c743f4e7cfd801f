"""The comms worker: one rank of a collective sweep, started by torchrun.

    python -m torch.distributed.run --nproc-per-node N -m ckpt_bench.backends.comms.worker --out comms.json \\
        [--spec RUN/worker.json] [--min-size 1024] [--max-size 268435456] [--iters 20] [--warmup 5]

Rank 0 prints one table row per measurement as it goes (the launcher shows them) and writes the
results document to `--out` (a relative `--out` is inside the run directory of `--spec`):

    {"dist_backend", "world_size", "nnodes", "device", "dtype", "iters", "warmup",
     "results": [{collective, size, count, iters, time_us, algbw_gbps, busbw_gbps}, ...],
     "unsupported": {collective: error}}
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import torch.distributed as dist

from ckpt_bench.backends.comms.measure import (
    COLLECTIVES,
    DEFAULT_MAX_SIZE,
    DEFAULT_MIN_SIZE,
    TABLE_HEADER,
    message_sizes,
    sweep,
    table_row,
)
from ckpt_bench.worker.entry import WorkerContext, exit_process

# Rank 0's table lines, for the launcher to show as they come.
PROGRESS = re.compile(r"^(?:collective|" + "|".join(COLLECTIVES) + r")\b")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="Where rank 0 writes the results (JSON).")
    parser.add_argument("--spec", help="A run's worker.json: a relative --out is in its run directory.")
    parser.add_argument("--min-size", type=int, default=DEFAULT_MIN_SIZE)
    parser.add_argument("--max-size", type=int, default=DEFAULT_MAX_SIZE)
    parser.add_argument("--iters", type=int, default=20, help="Timed iterations (fewer for large sizes).")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--dist-backend", choices=("gloo", "nccl"), help="Default: nccl on GPU, else gloo.")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    context = WorkerContext.join(args.dist_backend)  # nccl: a GPU per local rank; gloo: the CPU
    rank0 = context.rank == 0

    def show(line: str) -> None:
        if rank0:
            print(line, flush=True)

    show(TABLE_HEADER)
    results, unsupported = sweep(
        [c for c in args.collectives.split(",") if c], message_sizes(args.min_size, args.max_size),
        args.iters, args.warmup, context.device, on_result=lambda m: show(table_row(m)),
    )
    for name, why in unsupported.items():
        show(f"{name}: unsupported by {dist.get_backend()}: {why}")
    if rank0:
        document = {
            "dist_backend": dist.get_backend(),
            "world_size": dist.get_world_size(),
            "nnodes": dist.get_world_size() // int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
            "device": context.device.type,
            "dtype": "float32",
            "iters": args.iters,
            "warmup": args.warmup,
            "results": results,
            "unsupported": unsupported,
        }
        out = Path(args.out)
        if args.spec and not out.is_absolute():
            out = Path(json.loads(Path(args.spec).read_text())["run_dir"]) / out
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(document, indent=2) + "\n")
    dist.barrier()  # rank 0's document is on disk before any rank (or node agent) reports done
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_process(main())
