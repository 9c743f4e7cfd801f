#!/usr/bin/env python3
"""The storage baseline's two local tools on the same folder: the built-in writer/reader vs fio.

    python benchmarks/storage_baseline.py [--dir DIR] [--files 4] [--file-mib 119] [--concurrency 4]
                                          [--no-fsync] [--rounds 3]

`--storage-baseline` uses fio where installed and the built-in path (threads doing os.write/os.read)
where not; the built-in path must not undersell the storage. This runs both with one I/O shape (by
default a DCP gpt2 fp32 checkpoint of 2 ranks x 2 writer threads: 4 files of ~119 MiB, fsynced),
interleaved, and prints each tool's median write and cold-read bandwidth and built-in / fio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ckpt_bench.core.units import MIB  # noqa: E402
from ckpt_bench.storage.baseline import FioBaseline, IOShape, LocalFiles, PlainIOBaseline  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="a folder on the storage to measure")
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--file-mib", type=float, default=119)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--no-fsync", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    executable = FioBaseline.available()
    if executable is None:
        print("fio is not installed (apt-get install fio): nothing to compare with", file=sys.stderr)
        return 1

    shape = IOShape.of([int(args.file_mib * MIB)] * args.files, args.concurrency, not args.no_fsync)
    folder = Path(args.dir) / "ckpt-bench-storage-baseline"
    tools = {"built-in": PlainIOBaseline(LocalFiles(folder)), "fio": FioBaseline(folder, executable)}
    results = {name: [] for name in tools}
    for round_index in range(args.rounds):
        order = list(tools) if round_index % 2 == 0 else list(reversed(tools))
        for name in order:
            result = tools[name].measure(shape)
            results[name].append(result)
            print(f"round {round_index + 1} {name}: write {result['write_bandwidth']} MiB/s, "
                  f"read {result['read_bandwidth']} MiB/s", file=sys.stderr, flush=True)

    medians = {name: {key: statistics.median(r[key] for r in runs) for key in ("write_bandwidth", "read_bandwidth")}
               for name, runs in results.items()}
    print(f"shape: {len(shape.file_sizes)} files, {shape.total_bytes / MIB:.0f} MiB, {shape.concurrency} writers, "
          f"fsync {'on' if shape.fsync else 'off'}; {args.rounds} rounds, interleaved, medians (MiB/s)")
    print(f"{'tool':<10} {'write':>10} {'read':>10}")
    for name, values in medians.items():
        print(f"{name:<10} {values['write_bandwidth']:>10.1f} {values['read_bandwidth']:>10.1f}")
    print(f"{'built-in/fio':<10} {medians['built-in']['write_bandwidth'] / medians['fio']['write_bandwidth']:>8.2f} "
          f"{medians['built-in']['read_bandwidth'] / medians['fio']['read_bandwidth']:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
