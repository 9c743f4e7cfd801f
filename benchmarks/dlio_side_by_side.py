#!/usr/bin/env python3
"""DLIO itself and ckpt-bench's `--workload` on the same workload file and disk, side by side.

    python benchmarks/dlio_side_by_side.py [--workload tests/fixtures/workloads/dlio_tiny_zero3.yaml]
        [--ranks 2] [--saves 5] [--rounds 3] [--dir DIR] [--dlio-venv /tmp/dlio-venv --dlio-src /tmp/dlio-src]

DLIO (argonne-lcf/dlio_benchmark, MLPerf Storage's engine) is never a dependency: it runs from its own
venv (CPU torch, mpi4py and the `mpich` wheel, DLIO from its source with --no-deps; see
docs/workloads.md). Without it the script says so and exits 0.

Both sides run the workload's torch.save checkpointing without fsync (DLIO never fsyncs: ours gets
--no-sync-files) and read back right after writing (DLIO's loads are warm: ours gets --warm-load), with
no wait between checkpoints. Rounds are interleaved (the order flips every round: drift in a shared,
host-cached disk hits both alike). Per side and round: the tensor bytes of every file written (loaded
back with torch and summed), DLIO's `checkpoint_size_GB`, and the save and load figures under DLIO's own
definition (`metric.save_checkpoint_io_mean_GB_per_second`: rank 0's durations; ours: the report's
`mlperf.dlio`), plus mlpstorage's strict-time throughput for ours. Medians over rounds, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the tests' way of counting a torch.save file's tensor bytes
from helpers import saved_tensor_bytes  # noqa: E402


def run_dlio(args, workload: Path, work: Path) -> dict:
    """One DLIO run of `workload`: its summary.json metrics and the bytes it wrote."""
    name = f"ckptbench_{workload.stem}"
    shutil.copy(workload, args.dlio_src / "dlio_benchmark" / "configs" / "workload" / f"{name}.yaml")
    out, checkpoints = work / "dlio-out", work / "dlio-ckpt"
    command = [str(args.dlio_venv / "bin" / "mpirun"), "-np", str(args.ranks),
               str(args.dlio_venv / "bin" / "dlio_benchmark"), f"workload={name}",
               f"++workload.output.folder={out}", f"++workload.checkpoint.checkpoint_folder={checkpoints}",
               f"++workload.checkpoint.num_checkpoints_write={args.saves}",
               f"++workload.checkpoint.num_checkpoints_read={args.saves}",
               "++workload.checkpoint.time_between_checkpoints=0"]
    subprocess.run(command, cwd=work, check=True, capture_output=True, text=True)
    metric = json.loads((out / "summary.json").read_text())["metric"]
    step = next(checkpoints.glob("global_epoch1_step1"))
    return {"bytes": saved_tensor_bytes(step), "size_GB": metric["checkpoint_size_GB"],
            "save_GBps": metric["save_checkpoint_io_mean_GB_per_second"],
            "load_GBps": metric.get("load_checkpoint_io_mean_GB_per_second"), "strict_save_GBps": None}


def run_ours(args, workload: Path, work: Path) -> dict:
    """One ckpt-bench run of `workload` through torch-save, as DLIO does it."""
    command = [sys.executable, str(ROOT / "ckpt_launch.py"), "--workload", str(workload), "--engine", "torch-save",
               "--nproc-per-node", str(args.ranks), "--save-calls", str(args.saves), "--load-calls", str(args.saves),
               "--time-between-checkpoints", "0", "--no-sync-files", "--warm-load", "--keep-checkpoints",
               "--save-dir", str(work / "ours-ckpt"), "--runs-dir", str(work / "ours-runs"), "--format", "json"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"ckpt-bench failed:\n{result.stderr[-2000:]}")
    report = json.loads(result.stdout)
    mlperf = report["mlperf"]
    step = next((work / "ours-ckpt").glob("*/iter_0000001"))
    return {"bytes": saved_tensor_bytes(step), "size_GB": mlperf["dlio"]["checkpoint_size_GB"],
            "save_GBps": mlperf["dlio"]["save_checkpoint_io_mean_GB_per_second"],
            "load_GBps": mlperf["dlio"]["load_checkpoint_io_mean_GB_per_second"],
            "strict_save_GBps": mlperf["mlpstorage"]["calculated_mean_save_throughput_from_strict_times"]}


def _shown(value) -> str:
    if value is None:
        return "-"
    return f"{value:,}" if isinstance(value, int) else f"{value:.4g}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", type=Path, default=ROOT / "tests/fixtures/workloads/dlio_tiny_zero3.yaml")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--saves", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where both write (default: a temporary folder)")
    parser.add_argument("--dlio-venv", type=Path, default=Path("/tmp/dlio-venv"))
    parser.add_argument("--dlio-src", type=Path, default=Path("/tmp/dlio-src"))
    args = parser.parse_args()
    if not (args.dlio_venv / "bin" / "dlio_benchmark").exists():
        print(f"DLIO not found in {args.dlio_venv}: nothing to compare (see docs/workloads.md to install it)")
        return 0
    base = Path(tempfile.mkdtemp(prefix="dlio-side-", dir=args.dir))
    rows: dict[str, list[dict]] = {"dlio": [], "ours": []}
    try:
        for round_index in range(args.rounds):
            sides = ("dlio", "ours") if round_index % 2 == 0 else ("ours", "dlio")
            for side in sides:
                work = base / f"{side}-{round_index}"
                work.mkdir()
                rows[side].append((run_dlio if side == "dlio" else run_ours)(args, args.workload.resolve(), work))
                shutil.rmtree(work)
                print(f"round {round_index + 1} {side}: {rows[side][-1]}", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    def median(side: str, key: str):
        values = [row[key] for row in rows[side] if row[key] is not None]
        return statistics.median(values) if values else None

    print(f"\n{args.workload.name}, {args.ranks} ranks, {args.saves} saves and loads a run, {args.rounds} rounds "
          "interleaved, no fsync, warm loads (medians)")
    print(f"{'':32}{'DLIO':>14}{'ckpt-bench':>14}{'ours/DLIO':>11}")
    for key, label in (("bytes", "tensor bytes written a save"), ("size_GB", "checkpoint_size_GB"),
                       ("save_GBps", "save GB/s (rank 0, DLIO's)"), ("load_GBps", "load GB/s (rank 0, DLIO's)"),
                       ("strict_save_GBps", "save GB/s (strict times)")):
        dlio, ours = median("dlio", key), median("ours", key)
        ratio = f"{ours / dlio:.3f}" if dlio and ours else "-"
        print(f"{label:32}{_shown(dlio):>14}{_shown(ours):>14}{ratio:>11}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
