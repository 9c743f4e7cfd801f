"""The projection's global steps against megatron-core's own, run for real: for each rank count, the workload's
torch_dist engine saves (a process's first, second and third save) and cold-loads a Megatron GPT of many small
tensors on that many gloo ranks of this machine (`bare/torch_dist_steps.py`), rank 0 timing each global step where
megatron-core calls it, and `--plan` computes the same steps at the same rank count (projection.rank_costs), which
`projection.schedule` assembles per save and setting as a projection does. Two settings: Megatron-LM's defaults
(fully parallel save, no fully parallel load, no constant structure) and the other way round for the load and the
structure (`ckpt_fully_parallel_load` and `ckpt_assume_constant_structure` true).

    python benchmarks/projection_fidelity.py --ranks 4 8 16 32 --out fidelity.json

Compared: rank 0's CPU seconds per step (`time.thread_time`, what the projection computes: one core's CPU; wall time
on 2 cores shared by N ranks measures the oversubscription, not the step; each rank's own planning and our CPU
layer's dispatch of megatron-core's torch calls, which a GPU rank does not pay, are timed apart), and each rank's
bytes read at the restart (what its DCP reader asks the checkpoint for: each item's stored length, a tensor's bytes
with its torch.save framing, and .metadata at each read) against the projection's (its read bytes and .metadata
reads); what read(2) delivered (rchar, buffers' read-ahead included) is kept beside. A line a step: measured,
computed, their ratio; then the fit of each computed step's growth in ranks (a power law, least squares in log-log)
and its largest error. Prints Markdown tables (docs/projection.md holds them).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ckpt_bench.model.checkpointing import CheckpointSettings  # noqa: E402
from ckpt_bench.projection.rank_costs import RankCosts  # noqa: E402
from ckpt_bench.projection.schedule import load_steps, save_steps  # noqa: E402

EXPERIMENT = ROOT / "ckpt_bench" / "configs" / "tiny_gpt.yaml"
#: Many small tensors (64 layers of hidden 128): the steps' CPU grows with their count, the bytes stay small.
MODEL = ["num_layers=64", "hidden_size=128", "ffn_hidden_size=512", "num_attention_heads=4",
         "use_distributed_optimizer=true"]
VARIANTS = {"defaults": [], "parallel load, constant structure": [
    "ckpt_fully_parallel_load=true", "ckpt_assume_constant_structure=true"]}
#: The measured steps, by the projection's term names (the again-validation is the wrapper's own).
TERM_OF = {"sharding validation, again (fully parallel save)": "sharding validation, again",
           "metadata, again (the tensors' load)": "metadata"}


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=True, text=True, capture_output=True, **kwargs)


def measured(ranks: int, settings: list[str], folder: Path) -> dict:
    out = folder / "steps.json"
    sets = [arg for text in MODEL + settings for arg in ("--set", text)]
    run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-port",
         str(29500 + ranks), "--log-dir", str(folder / "torchrun"),
         str(ROOT / "benchmarks" / "bare" / "torch_dist_steps.py"), "--workload",
         str(EXPERIMENT), *sets, "--save-calls", "3", "--save-dir", str(folder / "ckpt"), "--out", str(out)],
        cwd=ROOT, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    return json.loads(out.read_text())


def computed(ranks: int, settings: list[str], budget: float) -> dict:
    sets = [arg for text in MODEL + settings for arg in ("--set", text)]
    done = run([sys.executable, "ckpt_launch.py", "--workload", str(EXPERIMENT), *sets, "--engine", "torch_dist",
                "--job-ranks", str(ranks), "--nproc-per-node", str(ranks), "--plan", "--storage-write-gbps", "1",
                "--rank-costs-budget", str(budget), "--format", "json"], cwd=ROOT)
    return json.loads(done.stdout)["projection"]


def _steps_of(pairs) -> dict[str, float]:
    totals: dict[str, float] = {}
    for label, step in pairs:
        name = TERM_OF.get(label, label)
        totals[name] = totals.get(name, 0.0) + (step.cpu_s or 0.0)
    return totals


def compare(ranks: int, variant: str, real: dict, projection: dict) -> list[dict]:
    costs = RankCosts.from_dict(projection["rank_costs"])
    settings = CheckpointSettings.from_dict(real["settings"])
    rows = []
    for nth, save in enumerate(real["saves"], start=1):
        expected = _steps_of(save_steps(costs, settings, nth))
        for name in sorted(set(expected) | set(save)):
            rows.append({"ranks": ranks, "variant": variant, "operation": f"save {nth}", "step": name,
                         "measured_cpu_s": (save.get(name) or {}).get("cpu_s", 0.0),
                         "computed_cpu_s": expected.get(name, 0.0)})
    expected = _steps_of(load_steps(costs, settings))
    for name in sorted(set(expected) | set(real["load"])):
        rows.append({"ranks": ranks, "variant": variant, "operation": "restart", "step": name,
                     "measured_cpu_s": (real["load"].get(name) or {}).get("cpu_s", 0.0),
                     "computed_cpu_s": expected.get(name, 0.0)})
    return rows


def reads(real: dict, projection: dict) -> dict:
    """Each rank's bytes read against the projection's: its tensors and every .metadata read."""
    metadata = projection["rank_costs"]["metadata_file_bytes"] or 0
    times = 2 if real["settings"]["ckpt_fully_parallel_load"] else 1
    projected = [size + times * metadata for size in real["tensor_read_bytes"]]
    errors = [measured / expected - 1 for measured, expected in zip(real["read_bytes"], projected, strict=True)]
    worst = max(range(len(errors)), key=lambda rank: abs(errors[rank]))
    return {"measured_total": sum(real["read_bytes"]), "projected_total": sum(projected),
            "rchar_total": sum(real["rchar_bytes"]),
            "worst_rank": worst, "worst_error": errors[worst],
            "rank_measured": real["read_bytes"][worst], "rank_projected": projected[worst]}


def fit(points: list[tuple[int, float]]) -> tuple[float, float, float] | None:
    """(a, b, largest relative error) of cpu = a * ranks^b over `points`, least squares in log-log."""
    usable = [(n, y) for n, y in points if y > 0]
    if len(usable) < 2:
        return None
    xs, ys = [math.log(n) for n, _ in usable], [math.log(y) for _, y in usable]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    b = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread if spread else 0.0
    a = math.exp(mean_y - b * mean_x)
    return a, b, max(abs(a * n ** b / y - 1) for n, y in usable)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--budget", type=float, default=300.0, help="--rank-costs-budget of the plans")
    parser.add_argument("--out", type=Path, default=Path("projection_fidelity.json"))
    options = parser.parse_args()
    rows, read_rows = [], []
    for ranks in options.ranks:
        for variant, settings in VARIANTS.items():
            with tempfile.TemporaryDirectory(prefix="ckpt-bench-fidelity-") as folder:
                real = measured(ranks, settings, Path(folder))
            projection = computed(ranks, settings, options.budget)
            rows += compare(ranks, variant, real, projection)
            read_rows.append({"ranks": ranks, "variant": variant, **reads(real, projection)})
            print(f"{ranks} ranks, {variant}: done", file=sys.stderr, flush=True)
    options.out.write_text(json.dumps({"steps": rows, "reads": read_rows}, indent=1))
    print("| ranks | settings | operation | step | rank 0 CPU measured (s) | computed (s) | ratio |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        ratio = row["computed_cpu_s"] / row["measured_cpu_s"] if row["measured_cpu_s"] else float("nan")
        print(f"| {row['ranks']} | {row['variant']} | {row['operation']} | {row['step']} | "
              f"{row['measured_cpu_s']:.3f} | {row['computed_cpu_s']:.3f} | {ratio:.2f} |")
    print("\n| ranks | settings | bytes read, measured / projected (all ranks) | worst rank: measured / projected | "
          "its error |")
    print("|---|---|---|---|---|")
    for row in read_rows:
        print(f"| {row['ranks']} | {row['variant']} | {row['measured_total']:,} / {row['projected_total']:,} | "
              f"rank {row['worst_rank']}: {row['rank_measured']:,} / {row['rank_projected']:,} | "
              f"{row['worst_error']:+.1%} |")
    print("\n| step | operation | computed CPU = a x ranks^b | b | largest error of the fit |")
    print("|---|---|---|---|---|")
    for operation in ("save 1", "restart"):
        for step in sorted({row["step"] for row in rows if row["operation"] == operation}):
            points = sorted({(row["ranks"], row["computed_cpu_s"]) for row in rows
                             if row["operation"] == operation and row["step"] == step and row["variant"] ==
                             "defaults"})
            found = fit(points)
            if found:
                a, b, error = found
                print(f"| {step} | {operation} | {a:.3g} x N^{b:.2f} | {b:.2f} | {error:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
