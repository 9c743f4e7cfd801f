#!/usr/bin/env python3
"""How fast `ckpt_report.py` reads big Primus log trees of several shapes, and in how much memory.

    python benchmarks/parse_speed.py [--shape NAME ...] [--dir DIR] [--size-gib 1.0] [--keep] [--repeat 5]
                                     [--output DIR]

Generates (unless DIR/<shape>/ already holds one) a Primus `logs/pre_trainer/` tree for each shape
(`SHAPES`, all by default), each with the line mix of a long run: per-rank debug/info chatter every step,
the training line at INFO (Primus's `log_rank_last` logs it at INFO on the last rank; a run logging INFO on
all ranks has it in every rank's files, rank 0's debug.log, which a report reads, included), timer blocks,
a checkpoint save every 500 steps with its `save-checkpoint` timer on the last rank, an arguments dump,
loguru-style rotation (`debug.<timestamp>.log`). The shapes:

* last-rank: the last rank's training line every step (issue 30's tree), 10 MB rotation;
* all-ranks: every rank's training line every 4 steps (issue 39's tree);
* rotated: all-ranks rotated at 1 MB (about 130 files a rank);
* timers: `--timing-log-option all`, 40 timers of 8 ranks every step, a line each;
* long-lines: all-ranks with a 256 KiB line a rank every 50 steps, a 1 MiB one naming the checkpoint at
  each save;
* ranks64: 64 rank folders, every rank's training line every 4 steps.

For each:

* parses it in a fresh process (so peak RSS is the parse's alone) and prints MB/s over the bytes read
  and over the whole tree;
* times `python ckpt_report.py TREE` (the whole command: interpreter start-up included, its bytecode
  cached as an installed package has it) against
  `grep -rE "checkpoint|time across ranks|arguments" TREE` over the same tree, runs of the two taking
  turns, `--repeat` times each, and prints the ratio of their medians and ckpt_report.py's peak RSS;
  on a machine shared with other work, also the median of the ratios of each turn (the two runs of a
  turn see about the same load) and the ratio of their CPU times (user + system, from wait4); and, in
  the same turns, `python ckpt_report.py --help`: the start-up (interpreter and imports) in those times,
  and the load average before and after the turns;
  grep writes its matching lines to a file, as a user keeping them would (with its output on
  /dev/null GNU grep stops reading a file at its first match; that time is printed too);
* prints the SHA-256 of the report's JSON (`--output` keeps it), to compare the numbers of two
  versions on one tree (`--dir`).

Then one table, a line per shape. The machine should be otherwise idle: the ratio compares wall-clock times.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GREP_PATTERN = "checkpoint|time across ranks|arguments"

ROTATE_BYTES = 10 << 20  # Primus's loguru sinks rotate at "10 MB"
SAVE_EVERY = 500
START = datetime(2026, 5, 14)  # the run's clock: days go on (a clock that went back would be another test)
TIMERS = ["forward-backward", "forward-compute", "backward-compute", "batch-generator", "layernorm-grads-all-reduce",
          "all-grads-sync", "params-all-gather", "optimizer-copy-to-main-grad", "optimizer-clip-main-grad",
          "optimizer-count-zeros", "optimizer-inner-step", "optimizer"]


@dataclass(frozen=True)
class Shape:
    """The line mix of one generated Primus tree."""

    name: str
    about: str
    ranks: int = 8
    training_ranks: str = "last"  # which ranks log the training line at INFO: "last" (log_rank_last) or "all"
    training_every: int = 1  # a training line every N steps (Megatron's --log-interval)
    timers_every: int = 10
    timers: int = len(TIMERS)  # timers in a block (the names above, then numbered ones)
    timers_all_ranks: bool = False  # --timing-log-option all: `times across ranks`, a line per timer and rank
    rotate_bytes: int = ROTATE_BYTES
    long_line_bytes: int = 0  # > 0: each rank logs a line this long every 50 steps, rank 0 one at each save


SHAPES = {shape.name: shape for shape in (
    Shape("last-rank", "8 ranks, the last rank's training line every step (issue 30's tree)"),
    Shape("all-ranks", "8 ranks, every rank's training line every 4 steps at INFO (rank 0's debug.log holds "
          "its own too)", training_ranks="all", training_every=4),
    Shape("rotated", "as all-ranks, rotated at 1 MB (about 130 files a rank)", training_ranks="all",
          training_every=4, rotate_bytes=1 << 20),
    Shape("timers", "8 ranks, --timing-log-option all: 40 timers x 8 ranks every step, save-checkpoint's per rank",
          timers_every=1, timers=40, timers_all_ranks=True),
    Shape("long-lines", "as all-ranks, and a 256 KiB line a rank every 50 steps, a 1 MiB one naming the "
          "checkpoint at each save", training_ranks="all", training_every=4, long_line_bytes=256 << 10),
    Shape("ranks64", "64 rank folders, every rank's training line every 4 steps", ranks=64, training_ranks="all",
          training_every=4),
)}


def _prefix(seconds: int, rank: int, ranks: int, level: str, location: str) -> str:
    clock = (START + timedelta(seconds=seconds)).strftime("%Y%m%d %H:%M:%S")
    return (f"[{clock}][bench/llm][pre_trainer][ip-10.0.0.{rank}][rank-{rank}/{ranks}]"
            f"{f'[{level}]':<11}[{location:->23}] : ")


class _RotatingSink:
    """One level file of one rank, rotated as loguru does: the full file gets a timestamped name."""

    def __init__(self, folder: Path, level: str, rotate_bytes: int):
        self.folder, self.level, self.rotate_bytes, self.rotations = folder, level, rotate_bytes, 0
        self.file = open(folder / f"{level}.log", "w", buffering=1 << 20)  # noqa: SIM115
        self.written = 0

    def write(self, text: str) -> None:
        if self.written + len(text) > self.rotate_bytes and self.written:
            self.file.close()
            self.rotations += 1
            stamp = f"2026-05-14_{self.rotations // 3600:02d}-{self.rotations // 60 % 60:02d}-" \
                    f"{self.rotations % 60:02d}_000000"
            (self.folder / f"{self.level}.log").rename(self.folder / f"{self.level}.{stamp}.log")
            self.file = open(self.folder / f"{self.level}.log", "w", buffering=1 << 20)  # noqa: SIM115
            self.written = 0
        self.file.write(text)
        self.written += len(text)

    def close(self) -> None:
        self.file.close()


def _timer_block(shape: Shape, times: dict[str, tuple[float, float]]) -> str:
    """A timer block as Megatron's `Timers.log` prints it: name -> (min, max), or each rank's value
    (spread evenly from min to max) with `--timing-log-option all`."""
    if not shape.timers_all_ranks:
        return "(min, max) time across ranks (ms):" + "".join(
            f"\n    {(name + ' ').ljust(48, '.')}: ({low:.2f}, {high:.2f})" for name, (low, high) in times.items())
    return "times across ranks (ms):" + "".join(
        f"\n  {name}:" + "".join(f"\n     rank {rank:2d}: {low + (high - low) * rank / shape.ranks:.2f}"
                                 for rank in range(shape.ranks))
        for name, (low, high) in times.items())


def generate(root: Path, size_bytes: int, shape: Shape) -> None:
    sinks = {}
    for rank in range(shape.ranks):
        folder = root / f"rank-{rank}"
        folder.mkdir(parents=True)
        sinks[rank] = {level: _RotatingSink(folder, level, shape.rotate_bytes)
                       for level in ("debug", "info", "warning", "error")}

    def log(rank: int, seconds: int, level: str, location: str, message: str) -> int:
        text = _prefix(seconds, rank, shape.ranks, level, location) + message + "\n"
        sinks[rank]["debug"].write(text)
        if level != "DEBUG":
            sinks[rank]["info"].write(text)
        if level == "WARNING":
            sinks[rank]["warning"].write(text)
        return len(text) * (1 + (level != "DEBUG") + (level == "WARNING"))

    last = shape.ranks - 1
    training_ranks = range(shape.ranks) if shape.training_ranks == "all" else [last]
    dump = ["------------------------ arguments ------------------------"]
    dump += [f"  argument_number_{i:03d} {'.' * 29} {i}" for i in range(480)]
    dump += ["  async_save ...................................... True",
             f"  world_size ...................................... {shape.ranks}",
             "-------------------- end of arguments ---------------------"]
    written = log(0, 0, "DEBUG", "arguments.py:812", "\n".join(dump))
    names = (TIMERS + [f"timer-{i:02d}" for i in range(len(TIMERS), shape.timers)])[:shape.timers]
    timers = _timer_block(shape, {name: (i * 3.1, i * 3.3) for i, name in enumerate(names, 1)})
    long_line = "gradient norms per parameter: " + ", ".join(
        f"decoder.layers.{i % 96}.mlp.linear_fc{1 + i % 2}.weight: 0.{i:06d}"
        for i in range(shape.long_line_bytes // 50))
    keys = "sharded state dict keys of the checkpoint: " + ", ".join(
        f"decoder.layers.{i % 96}.self_attention.linear_qkv.weight/shard_{i}"
        for i in range(4 * shape.long_line_bytes // 60))
    iteration = 0
    while written < size_bytes:
        iteration += 1
        t = iteration * 2
        stamp = f"{START + timedelta(seconds=t)}.428589"
        if iteration % shape.training_every == 0:
            for rank in training_ranks:
                written += log(rank, t, "INFO", "utils.py:425", (
                    f"[{stamp}] iteration {iteration:8d}/ 1000000 | consumed samples: {iteration * 256:12d} | "
                    "elapsed time per iteration (ms): 2031.4 | throughput per GPU (TFLOP/s/GPU): 412.6 | "
                    "learning rate: 2.999871E-04 | global batch size:   256 | lm loss: 2.318562E+00 | "
                    "loss scale: 1.0 | grad norm: 0.213 | number of skipped iterations:   0 | "
                    "number of nan iterations:   0 | hip mem usage/free/total/usage_ratio: "
                    "134.43GB/153.55GB/287.98GB/46.68% |"))
        for rank in range(shape.ranks):
            written += log(rank, t, "DEBUG", "memory.py:77",
                           f"[rank {rank}] step {iteration}: allocated 61.2 GiB, reserved 70.0 GiB, "
                           "peak 66.9 GiB, fragmentation 4.1%")
            written += log(rank, t, "INFO", "trainer.py:1204",
                           f"step {iteration} rank {rank}: tokens/s/GPU 8123.4, mfu 41.2%")
            if shape.long_line_bytes and iteration % 50 == rank % 50:
                written += log(rank, t, "DEBUG", "grads.py:61", long_line)
        if iteration % shape.timers_every == 0:
            written += log(last, t, "INFO", "timers.py:430", timers)
        if iteration % 997 == 0:
            written += log(3 % shape.ranks, t, "WARNING", "ddp.py:311", "bucket rebuilt: gradient layout changed")
        if iteration % SAVE_EVERY == 0:
            written += log(0, t, "DEBUG", "checkpointing.py:411",
                           f"[{stamp}] saving checkpoint at iteration {iteration:7d} to /ckpt in torch_dist format")
            if shape.long_line_bytes:
                written += log(0, t, "DEBUG", "checkpointing.py:415", keys)
            written += log(0, t, "DEBUG", "checkpointing.py:520",
                           f"  [{stamp}] scheduled an async checkpoint save at iteration {iteration:7d} to /ckpt")
            written += log(last, t + 1, "INFO", "timers.py:430", _timer_block(
                shape, {"save-checkpoint": (1180.0, 1234.5)}))
            written += log(0, t + 20, "DEBUG", "checkpointing.py:560",
                           f"  [{stamp}] successfully saved checkpoint from iteration {iteration:7d} "
                           "to /ckpt [ t 1/1, p 1/1 ]")
    for rank_sinks in sinks.values():
        for sink in rank_sinks.values():
            sink.close()


def tree_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def parse(root: Path) -> dict:
    from ckpt_bench.report.assembly import log_report
    from ckpt_bench.report.parsers.sources import resolve

    read = sum(f.stat().st_size for files in resolve(root).streams for f in files)
    started = time.perf_counter()
    report = log_report([root])
    seconds = time.perf_counter() - started
    return {
        "seconds": round(seconds, 2),
        "bytes_read": read,
        "saves": len(report["saves"]),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def timed_run(command: list[str], stdout, env: dict | None = None) -> tuple[float, float, float, int]:
    """Wall seconds, CPU seconds (user + system), peak RSS (MiB) and exit status of `command` (its own
    rusage, via wait4)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=stdout, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, process.returncode


def against_grep(root: Path, repeat: int, output: Path) -> dict:
    """`ckpt_report.py TREE` and grep over the tree, taking turns: medians, ratios, peak RSS; the start-up
    of `ckpt_report.py` (its `--help`) in the same turns."""
    report = [sys.executable, str(ROOT / "ckpt_report.py"), str(root), "--output", str(output)]
    startup = [sys.executable, str(ROOT / "ckpt_report.py"), "--help"]
    grep = ["grep", "-rE", GREP_PATTERN, str(root)]
    times: dict[str, list[float]] = {"report": [], "grep": [], "grep_null": [], "report_cpu": [], "grep_cpu": [],
                                     "startup": [], "startup_cpu": []}
    load = [os.getloadavg()[0]]
    rss = []
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-grep-") as scratch:
        # ckpt_report.py as an installed package runs: its modules' bytecode cached (here outside the
        # repository), written by one untimed run; PYTHONDONTWRITEBYTECODE would compile every module each run.
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(scratch) / "pycache")
        timed_run(report, subprocess.DEVNULL, env)
        for _ in range(repeat):
            with open(Path(scratch) / "matches.txt", "wb") as matches:
                seconds, cpu, _, status = timed_run(grep, matches)
            if status:
                sys.exit(f"grep exited {status}")
            times["grep"].append(seconds)
            times["grep_cpu"].append(cpu)
            times["grep_null"].append(timed_run(grep, subprocess.DEVNULL)[0])
            seconds, cpu, peak, status = timed_run(report, subprocess.DEVNULL, env)
            if status:
                sys.exit(f"ckpt_report.py exited {status}")
            times["report"].append(seconds)
            times["report_cpu"].append(cpu)
            rss.append(peak)
            seconds, cpu, _, status = timed_run(startup, subprocess.DEVNULL, env)
            if status:
                sys.exit(f"ckpt_report.py --help exited {status}")
            times["startup"].append(seconds)
            times["startup_cpu"].append(cpu)
    load.append(os.getloadavg()[0])
    median = {name: statistics.median(values) for name, values in times.items()}
    per_turn = [ours / theirs for ours, theirs in zip(times["report"], times["grep"], strict=True)]
    return {"median": median, "times": times, "peak_rss_mib": max(rss), "load": load,
            "ratio": median["report"] / median["grep"], "ratio_null": median["report"] / median["grep_null"],
            "ratio_per_turn": statistics.median(per_turn), "ratio_cpu": median["report_cpu"] / median["grep_cpu"]}


def measure(shape: Shape, base: Path, size_gib: float, repeat: int, output: Path | None) -> dict:
    """One shape: its tree generated under `base` unless there, parsed, timed against grep; prints its lines."""
    root = base / shape.name / "logs" / "pre_trainer"
    print(f"== {shape.name}: {shape.about}")
    if not root.is_dir():
        started = time.perf_counter()
        generate(root, int(size_gib * (1 << 30)), shape)
        print(f"generated {root} in {time.perf_counter() - started:.1f} s")
    total = tree_bytes(root)
    child = subprocess.run([sys.executable, __file__, "--parse-only", str(root)],
                           capture_output=True, text=True, check=True)
    figures = json.loads(child.stdout)
    mb = 1e6
    print(f"tree: {total / mb:.0f} MB in {sum(1 for f in root.rglob('*') if f.is_file())} files, "
          f"{shape.ranks} ranks; read {figures['bytes_read'] / mb:.0f} MB (rank-0 debug + rank-{shape.ranks - 1} "
          "info)")
    print(f"parse: {figures['seconds']} s, {figures['bytes_read'] / mb / figures['seconds']:.0f} MB/s read, "
          f"{total / mb / figures['seconds']:.0f} MB/s of tree; {figures['saves']} saves; "
          f"peak RSS {figures['peak_rss_mib']} MiB")
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-report-") as scratch:
        report = output / f"{shape.name}.json" if output else Path(scratch) / "report.json"
        result = against_grep(root, repeat, report)
        digest = hashlib.sha256(report.read_bytes()).hexdigest()
    median = result["median"]
    runs = ", ".join(f"{t:.2f}" for t in result["times"]["report"])
    print(f"ckpt_report.py: median {median['report']:.2f} s over {repeat} runs ({runs}), "
          f"peak RSS {result['peak_rss_mib']:.1f} MiB")
    print(f"grep -rE \"{GREP_PATTERN}\" > file: median {median['grep']:.2f} s "
          f"({', '.join(f'{t:.2f}' for t in result['times']['grep'])}); > /dev/null: median "
          f"{median['grep_null']:.2f} s")
    print(f"ratio ckpt_report.py / grep: {result['ratio']:.2f} (grep > /dev/null: {result['ratio_null']:.2f}); "
          f"median of each turn's ratio {result['ratio_per_turn']:.2f}; CPU time {median['report_cpu']:.2f} s "
          f"against {median['grep_cpu']:.2f} s, ratio {result['ratio_cpu']:.2f}")
    print(f"of which start-up (ckpt_report.py --help): median {median['startup']:.2f} s, CPU time "
          f"{median['startup_cpu']:.2f} s")
    print(f"load average (1 min) before and after the turns: {result['load'][0]:.2f}, {result['load'][1]:.2f}")
    print(f"report sha256 {digest}", flush=True)
    return {"shape": shape.name, "tree_mb": total / mb, "read_mb": figures["bytes_read"] / mb, **result,
            "sha256": digest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, help="where the trees are (DIR/<shape>/logs/pre_trainer; generated "
                        "there if absent)")
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES),
                        help="a shape to measure (repeatable; default: every one)")
    parser.add_argument("--size-gib", type=float, default=1.0, help="each generated tree's size (default 1.0)")
    parser.add_argument("--keep", action="store_true", help="keep generated temporary trees")
    parser.add_argument("--repeat", type=int, default=5, help="runs of ckpt_report.py and of grep (default 5)")
    parser.add_argument("--output", type=Path, help="keep each report's JSON here (<shape>.json)")
    parser.add_argument("--parse-only", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.parse_only:
        print(json.dumps(parse(args.parse_only)))
        return

    base = args.dir or Path(tempfile.mkdtemp(prefix="ckpt-bench-parse-"))
    if args.output:
        args.output.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for name in args.shape or SHAPES:
            results.append(measure(SHAPES[name], base, args.size_gib, max(1, args.repeat), args.output))
    finally:
        if args.dir is None and not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(f"\n{'shape':<11} {'tree MB':>8} {'read MB':>8} {'ours s':>7} {'grep s':>7} {'ratio':>6} {'per turn':>8} "
          f"{'CPU':>6}  report sha256")
    for result in results:
        median = result["median"]
        print(f"{result['shape']:<11} {result['tree_mb']:8.0f} {result['read_mb']:8.0f} {median['report']:7.2f} "
              f"{median['grep']:7.2f} {result['ratio']:6.2f} {result['ratio_per_turn']:8.2f} "
              f"{result['ratio_cpu']:6.2f}  {result['sha256'][:16]}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main()
