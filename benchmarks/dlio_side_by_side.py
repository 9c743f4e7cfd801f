#!/usr/bin/env python3
"""DLIO itself and ckpt-bench's `--workload` on the same workload file and disk, side by side.

    python benchmarks/dlio_side_by_side.py [--workload FILE ...] [--ranks 2] [--saves 5] [--min-rounds 3]
        [--max-rounds 10] [--budget-s 600] [--settle 5] [--dir DIR] [--fsync]
        [--dlio-venv /tmp/dlio-venv --dlio-src /tmp/dlio-src]

Two sizes by default, each compared on its own: tests/fixtures/workloads/dlio_tiny_zero3.yaml (28 M parameters,
398 MB a checkpoint on 2 ranks) and configs/workloads/dlio_llama_126m.yaml (127 M, 1.66 GiB).

DLIO (argonne-lcf/dlio_benchmark, MLPerf Storage's engine) is never a dependency: it runs from its own
venv (CPU torch, mpi4py and the `mpich` wheel, DLIO from its source with --no-deps; see
docs/workloads.md). Without it the script says so and exits 0.

Both sides run the workload's torch.save checkpointing without fsync (DLIO never fsyncs: ours gets
--no-sync-files) and read back right after writing (DLIO's loads are warm: ours gets --warm-load), with no
wait between checkpoints. With --fsync both fsync every file, as MLPerf's CLOSED rules ask (ours
--sync-files): DLIO e1919d7 reads its YAML's `checkpoint.fsync` into `checkpoint_sync` and saves with
`checkpoint_fsync`, so --fsync needs a DLIO source whose utils/config.py sets `args.checkpoint_fsync` from it
(that one name changed; DLIO runs from --dlio-src, first on its PYTHONPATH); the script checks and says so.
Rounds are interleaved (the order flips every round: drift in a shared, host-cached disk hits both alike), and
each run starts on a synced disk idle for --settle seconds. Per side
and round: the tensor bytes of every file written (loaded back with torch and summed), DLIO's
`checkpoint_size_GB`, the save and load figures under DLIO's own definition
(`metric.save_checkpoint_io_mean_GB_per_second`: the mean of each save's own GB/s, rank 0's durations; ours:
the report's `mlperf.dlio`), mlpstorage's strict-time throughput for ours, and rank 0's save durations one by
one (DLIO's `0_per_epoch_stats.json`, our events), of which `save_median_GBps` is the checkpoint's size over
their median.

Why the median beside DLIO's mean: without fsync (DLIO's way) the page cache takes a save at memory speed
until the dirty pages reach the kernel's limit, and this VM's disk, cached by its host, takes a few more
before it slows down; how many of a run's saves that is depends on what ran before it, not on the tool.
DLIO's figure averages each save's GB/s, so one save taken at memory speed (2.5 GB/s beside 0.7) moves it
by a third; the size over the median save is what the same disk does for most of them. At 398 MB a save
all of a run's saves fit (both figures agree); at 1.66 GiB a run's first one to three do, and the rest do
not.

Rounds go on until ours/DLIO decides, for save and load bandwidth separately: each round's ratio, their
geometric mean over rounds and its 95 % bootstrap interval (harness_overhead's PairedRatio). The interval
inside COMPARABLE (0.8-1.25) is `comparable`, entirely outside it `not comparable`, across an edge
`undecided`. No verdict before --min-rounds rounds; the rounds stop when both figures are decided, at
--max-rounds, or when another round (as long as the longest so far) would end past --budget-s: then the
verdict is `undecided`, with the interval and why the rounds stopped. Stopping at the first interval that
decides makes its 95 % somewhat optimistic; the minimum of rounds keeps a lucky pair from deciding (at 3
rounds the interval is the rounds' own range: every round must lie inside the band to be comparable).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the tests' way of counting a torch.save file's tensor bytes
from helpers import saved_tensor_bytes  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from harness_overhead import PairedRatio, settle  # noqa: E402 - the benchmarks are scripts, not a package

sys.path.insert(0, str(ROOT))
from ckpt_bench.core.events import event_files, read_event_files  # noqa: E402
from ckpt_bench.report.engine import rank_durations  # noqa: E402

COMPARABLE = (0.8, 1.25)  # ours/DLIO inside this band: the two tools measure the same storage alike
# The figures each round's ratio is taken of: DLIO's own (the mean of each save's or load's GB/s), and the
# checkpoint's size over the median save (rank 0's): what most of a run's saves did.
FIGURES = {"save_GBps": "save", "save_median_GBps": "save (median)", "load_GBps": "load"}
WORKLOADS = (ROOT / "tests/fixtures/workloads/dlio_tiny_zero3.yaml", ROOT / "configs/workloads/dlio_llama_126m.yaml")


@dataclass(frozen=True)
class Verdict:
    """ours/DLIO of one figure over the rounds so far, and what its interval says."""

    figure: str
    per_round: tuple[float, ...]
    ratio: PairedRatio | None  # None below two rounds: no interval yet
    verdict: str  # "comparable", "not comparable" or "undecided"

    @classmethod
    def of(cls, figure: str, per_round: list[float], min_rounds: int) -> Verdict:
        ratio = PairedRatio.of_ratios(per_round) if len(per_round) >= 2 else None
        verdict = "undecided"
        if ratio is not None and len(per_round) >= min_rounds:
            low, high = COMPARABLE
            if low <= ratio.low and ratio.high <= high:
                verdict = "comparable"
            elif ratio.high < low or ratio.low > high:
                verdict = "not comparable"
        return cls(figure, tuple(per_round), ratio, verdict)

    @property
    def decided(self) -> bool:
        return self.verdict != "undecided"

    def line(self, stopped_by: str) -> str:
        rounds = " ".join(f"{r:.3f}" for r in self.per_round) or "-"
        if self.ratio is None:
            return f"{self.figure}: ours/DLIO per round {rounds}: undecided -- no interval below 2 rounds; {stopped_by}"
        shown = (f"{self.figure}: ours/DLIO {self.ratio.estimate:.3f}, 95% CI {self.ratio.low:.3f}-"
                 f"{self.ratio.high:.3f} over {len(self.per_round)} rounds (per round {rounds}): {self.verdict}")
        if not self.decided:
            shown += f" -- the interval crosses an edge of {COMPARABLE[0]}-{COMPARABLE[1]}; {stopped_by}"
        return shown


def per_round_ratios(rows: dict[str, list[dict]], key: str) -> list[float]:
    """ours/DLIO of `key` in each round where both sides have it."""
    return [ours[key] / dlio[key] for dlio, ours in zip(rows["dlio"], rows["ours"], strict=True)
            if dlio[key] and ours[key] is not None]


def stop_reason(verdicts: list[Verdict], rounds: int, elapsed_s: float, longest_round_s: float,
                max_rounds: int, budget_s: float) -> str | None:
    """Why the rounds stop after `rounds` of them, or None to run another."""
    if all(v.decided for v in verdicts):
        return "decided"
    if rounds >= max_rounds:
        return f"stopped at the maximum of {max_rounds} rounds"
    if elapsed_s + longest_round_s > budget_s:
        return (f"stopped by the {budget_s:.0f} s budget: another round of up to {longest_round_s:.0f} s after "
                f"{elapsed_s:.0f} s would pass it")
    return None


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
    env = {**os.environ, "PYTHONPATH": str(args.dlio_src)}  # this source, whatever the venv installed
    subprocess.run(command, cwd=work, check=True, capture_output=True, text=True, env=env)
    metric = json.loads((out / "summary.json").read_text())["metric"]
    stats = json.loads((out / "0_per_epoch_stats.json").read_text())["1"]
    durations = [stats[f"save_ckpt{k}"]["duration"] for k in range(1, args.saves + 1)]
    step = next(checkpoints.glob("global_epoch1_step1"))
    return {"bytes": saved_tensor_bytes(step), "size_GB": metric["checkpoint_size_GB"],
            "save_GBps": metric["save_checkpoint_io_mean_GB_per_second"],
            "save_median_GBps": metric["checkpoint_size_GB"] / statistics.median(durations),
            "load_GBps": metric.get("load_checkpoint_io_mean_GB_per_second"), "strict_save_GBps": None,
            "save_s": durations}


def run_ours(args, workload: Path, work: Path) -> dict:
    """One ckpt-bench run of `workload` through torch-save, as DLIO does it."""
    command = [sys.executable, str(ROOT / "ckpt_launch.py"), "--workload", str(workload), "--engine", "torch-save",
               "--nproc-per-node", str(args.ranks), "--save-calls", str(args.saves), "--load-calls", str(args.saves),
               "--time-between-checkpoints", "0", "--sync-files" if args.fsync else "--no-sync-files", "--warm-load",
               "--keep-checkpoints",
               "--save-dir", str(work / "ours-ckpt"), "--runs-dir", str(work / "ours-runs"), "--format", "json"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"ckpt-bench failed:\n{result.stderr[-2000:]}")
    report = json.loads(result.stdout)
    mlperf = report["mlperf"]
    step = next((work / "ours-ckpt").glob("*/iter_0000001"))
    events = event_files(next((work / "ours-runs").glob("*/events")))
    durations = rank_durations(read_event_files(events), "save")[0]  # rank 0's, as DLIO's figures are
    return {"bytes": saved_tensor_bytes(step), "size_GB": mlperf["dlio"]["checkpoint_size_GB"],
            "save_GBps": mlperf["dlio"]["save_checkpoint_io_mean_GB_per_second"],
            "save_median_GBps": mlperf["dlio"]["checkpoint_size_GB"] / statistics.median(durations),
            "load_GBps": mlperf["dlio"]["load_checkpoint_io_mean_GB_per_second"],
            "strict_save_GBps": mlperf["mlpstorage"]["calculated_mean_save_throughput_from_strict_times"],
            "save_s": durations}


def _shown(value) -> str:
    if value is None:
        return "-"
    return f"{value:,}" if isinstance(value, int) else f"{value:.4g}"


def compare(args, workload: Path, base: Path) -> None:
    """Rounds of DLIO and ours on `workload` until its figures decide (or the limits stop them); prints them."""
    rows: dict[str, list[dict]] = {"dlio": [], "ours": []}
    started, longest, stopped_by = time.monotonic(), 0.0, None
    print(f"== {workload.name}", flush=True)
    while stopped_by is None:
        round_index, round_start = len(rows["dlio"]), time.monotonic()
        sides = ("dlio", "ours") if round_index % 2 == 0 else ("ours", "dlio")
        for side in sides:
            work = base / f"{workload.stem}-{side}-{round_index}"
            work.mkdir()
            settle(args.settle)
            rows[side].append((run_dlio if side == "dlio" else run_ours)(args, workload, work))
            shutil.rmtree(work)
        longest = max(longest, time.monotonic() - round_start)
        verdicts = [Verdict.of(name, per_round_ratios(rows, key), args.min_rounds) for key, name in FIGURES.items()]
        print(f"round {round_index + 1} ({sides[0]} first, {time.monotonic() - round_start:.0f} s): "
              + "; ".join(f"{name} GB/s DLIO {_shown(rows['dlio'][-1][key])} ours {_shown(rows['ours'][-1][key])}"
                          for key, name in FIGURES.items())
              + "; rank 0's saves (s) DLIO " + " ".join(f"{t:.2f}" for t in rows["dlio"][-1]["save_s"])
              + ", ours " + " ".join(f"{t:.2f}" for t in rows["ours"][-1]["save_s"])
              + " -- " + ", ".join(f"{v.figure} {v.verdict}" for v in verdicts), flush=True)
        stopped_by = stop_reason(verdicts, round_index + 1, time.monotonic() - started, longest,
                                 args.max_rounds, args.budget_s)

    def median(side: str, key: str):
        values = [row[key] for row in rows[side] if row[key] is not None]
        return statistics.median(values) if values else None

    rounds = len(rows["dlio"])
    print(f"\n{workload.name}, {args.ranks} ranks, {args.saves} saves and loads a run, {rounds} rounds "
          f"interleaved in {time.monotonic() - started:.0f} s, {'every file fsynced' if args.fsync else 'no fsync'}, "
          "warm loads (medians over rounds)")
    print(f"{'':36}{'DLIO':>14}{'ckpt-bench':>14}{'ours/DLIO':>11}")
    for key, label in (("bytes", "tensor bytes written a save"), ("size_GB", "checkpoint_size_GB"),
                       ("save_GBps", "save GB/s (rank 0, DLIO's mean)"),
                       ("save_median_GBps", "save GB/s (size / median save)"),
                       ("load_GBps", "load GB/s (rank 0, DLIO's mean)"),
                       ("strict_save_GBps", "save GB/s (strict times)")):
        dlio, ours = median("dlio", key), median("ours", key)
        ratio = f"{ours / dlio:.3f}" if dlio and ours else "-"
        print(f"{label:36}{_shown(dlio):>14}{_shown(ours):>14}{ratio:>11}")
    print(f"\nours/DLIO paired by round (geometric mean, bootstrap over rounds); comparable = the 95% interval inside "
          f"{COMPARABLE[0]}-{COMPARABLE[1]}, not comparable = entirely outside it")
    for verdict in verdicts:
        print(verdict.line(stopped_by))
    print(flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", type=Path, action="append", help="a DLIO workload file (repeatable; default: "
                        "the two sizes, dlio_tiny_zero3.yaml and dlio_llama_126m.yaml)")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--saves", type=int, default=5)
    parser.add_argument("--min-rounds", type=int, default=3, help="rounds before any verdict (default 3)")
    parser.add_argument("--max-rounds", type=int, default=10, help="rounds at most (default 10)")
    parser.add_argument("--budget-s", type=float, default=600.0, help="no round starts that would end past this "
                        "many seconds, judged by the longest round so far (default 600, each workload)")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds of a synced, idle disk before each run "
                        "(default 5): without fsync a run leaves its writes dirty for the next to flush")
    parser.add_argument("--dir", type=Path, default=None, help="where both write (default: a temporary folder)")
    parser.add_argument("--fsync", action="store_true", help="both fsync every file (needs DLIO's fsync name fixed)")
    parser.add_argument("--dlio-venv", type=Path, default=Path("/tmp/dlio-venv"))
    parser.add_argument("--dlio-src", type=Path, default=Path("/tmp/dlio-src"))
    args = parser.parse_args()
    if not 2 <= args.min_rounds <= args.max_rounds:
        print(f"--min-rounds {args.min_rounds} --max-rounds {args.max_rounds}: need 2 <= min-rounds <= max-rounds "
              "(an interval needs two rounds)", file=sys.stderr)
        return 2
    if not (args.dlio_venv / "bin" / "dlio_benchmark").exists():
        print(f"DLIO not found in {args.dlio_venv}: nothing to compare (see docs/workloads.md to install it)")
        return 0
    config = args.dlio_src / "dlio_benchmark" / "utils" / "config.py"
    if args.fsync and "args.checkpoint_fsync = config['checkpoint']['fsync']" not in config.read_text():
        print(f"--fsync: {config} reads the YAML's checkpoint.fsync into checkpoint_sync, which DLIO's saves never "
              "read (they read checkpoint_fsync): change that name there to make DLIO fsync", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="dlio-side-", dir=args.dir))
    try:
        for workload in args.workload or WORKLOADS:
            compare(args, workload.resolve(), base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
