#!/usr/bin/env python3
"""DCP save/load bandwidth: local disk vs an S3 endpoint, writer thread counts 1/2/4.

    python benchmarks/dcp_storage.py [--model gpt2] [--threads 1 2 4] [--s3-endpoint URL --bucket NAME]

It is an ordinary sweep (ckpt_bench.sweep.run) -- storage x thread count, everything else fixed -- run through
`ckpt_launch.py --sweep`, so each cell is one CLI invocation with its own report; this script only
writes the sweep file, starts a local S3 endpoint when none is given (moto on loopback, see
local_s3), and prints the reports' numbers as a table. gpt2 in float32 is a ~500 MB state.

The save column is the median over the save calls of each report's save bandwidth (the first save
of a process included); the load column the median over the loads (every save call is loaded back,
cold page cache for the disk). Every job also measures its storage with its own I/O shape
(`--storage-baseline`: fio where installed) and shows the fractions of that peak its saves (after the
first) and loads reached.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the loopback S3 endpoint of the tests

from local_s3 import moto_server  # noqa: E402

from ckpt_bench.core.units import MIB  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--nproc-per-node", type=int, default=2)
    parser.add_argument("--save-calls", type=int, default=3)
    parser.add_argument("--disk-dir", default=tempfile.gettempdir() + "/ckpt-bench-dcp-storage")
    parser.add_argument("--s3-endpoint", help="an existing endpoint (default: start moto on loopback)")
    parser.add_argument("--s3-region", default="us-east-1")
    parser.add_argument("--bucket", default="ckpt-bench", help="created on the local endpoint")
    parser.add_argument("--s3-part-size", type=int, default=64 * MIB)
    parser.add_argument("--runs-dir", default="runs")
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        endpoint = args.s3_endpoint
        if endpoint is None:
            local = stack.enter_context(moto_server())
            local.create_bucket(args.bucket)
            endpoint = local.url
        sweep = {
            "name": "dcp_storage",
            "backend": "dcp",
            "model": args.model,
            "nproc_per_node": args.nproc_per_node,
            "dist_backend": "gloo",
            "save_calls": args.save_calls,
            "s3_region": args.s3_region,
            "s3_endpoint": endpoint,
            "s3_part_size": args.s3_part_size,
            "storage_baseline": True,  # each job measures its storage with its own I/O shape
            "sweep": {"save_dir": [args.disk_dir, f"s3://{args.bucket}/dcp-storage"], "thread_count": args.threads},
        }
        sweep_file = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "dcp_storage.yaml"
        sweep_file.write_text(yaml.safe_dump(sweep, sort_keys=False))
        Path(args.disk_dir).mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, str(ROOT / "ckpt_launch.py"), "--sweep", str(sweep_file),
                               "--runs-dir", args.runs_dir], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    summary = json.loads(done.stdout)
    results = json.loads(Path(summary["results"]).read_text())
    print_table(results, args)
    return done.returncode


def print_table(results: dict, args) -> None:
    env = results["environment"]
    print(f"\nDCP {args.model}, {args.nproc_per_node} ranks (gloo), {args.save_calls} save calls; "
          f"torch {env['torch']}, s3torchconnector {env['s3torchconnector']}, {env['cpu_count']} CPUs; "
          f"results in {results['dir']}\n")
    header = ("storage", "threads", "MiB", "save MiB/s", "load MiB/s", "block s", "baseline", "write MiB/s",
              "read MiB/s", "save/peak", "load/peak", "status")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for job in results["jobs"]:
        report = job.get("report") or {}
        loads = [load["bandwidth"] for load in report.get("loads") or [report.get("load") or {}]
                 if load.get("bandwidth") is not None]
        save = ((report.get("stats") or {}).get("bandwidth") or {}).get("median")
        size = report.get("iter_folder_size")
        block = ((report.get("stats") or {}).get("block_time") or {}).get("median")
        storage = "s3" if str(job["params"]["save_dir"]).startswith("s3://") else "disk"
        baseline = report.get("storage_baseline") or {}
        row = (storage, job["params"]["thread_count"], f"{size / MIB:.0f}" if size else "-",
               save if save is not None else "-", statistics.median(loads) if loads else "-",
               block if block is not None else "-", baseline.get("tool", "-"), baseline.get("write_bandwidth", "-"),
               baseline.get("read_bandwidth", "-"), report.get("save_fraction_of_peak", "-"),
               report.get("load_fraction_of_peak", "-"), job["status"])
        print("| " + " | ".join(str(cell) for cell in row) + " |")


if __name__ == "__main__":
    sys.exit(main())
