"""Rank-count costs computed at the job's full size, not extrapolated: each engine's own global steps (the
sharding validation, the fully parallel distribution, DCP's global plan, the finalize, a restart's metadata and
plan) run here, on one core, over the N ranks' inputs built from the plan we derive (`base`). One module per
engine, listed once here (`ENGINES`); each has `compute(job, budget) -> RankCosts`.

`rank_costs(job, budget_s)` runs the computation in a process of its own (its memory is the coordinator's, its
peak measured; torch and megatron-core are imported there only), and keeps the result in a cache keyed by the
job's checkpoint and the versions whose code ran (`$XDG_CACHE_HOME/ckpt-bench/rank-costs/`, or
`$CKPT_BENCH_CACHE`), so that a second `--plan` with other storage figures does not compute it again. A result
the budget cut short is computed again under a larger budget.

    python -m ckpt_bench.projection.rank_costs JOB.json BUDGET_S   # prints RankCosts as JSON
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ckpt_bench.core import progress
from ckpt_bench.core.environment import megatron_core_version, package_versions
from ckpt_bench.projection.job import JobCheckpoint
from ckpt_bench.projection.rank_costs.base import Budget, RankCosts, Step

__all__ = ["DEFAULT_BUDGET_S", "ENGINES", "RankCosts", "Step", "cached_rank_costs", "rank_costs"]

_PACKAGE = "ckpt_bench.projection.rank_costs"

#: The engine (`--engine`) -> the module computing its rank-count costs.
ENGINES = {"torch_dist": f"{_PACKAGE}.torch_dist", "dcp": f"{_PACKAGE}.dcp", "torch_dcp": f"{_PACKAGE}.dcp",
           "torch": f"{_PACKAGE}.torch", "torch-save": f"{_PACKAGE}.torch_save"}
#: The engines whose steps run torch's or megatron-core's code (in a process of their own); the others' are
#: plain Python arithmetic, computed in this process.
RUNS_ENGINE_CODE = ("torch_dist", "dcp", "torch_dcp")

#: The computation's own version: a cached result of another is computed again.
COMPUTATION_VERSION = 10

#: CPU seconds each step of the computation may take by default (`--rank-costs-budget`): DeepSeek-V3's 1,024 ranks
#: through torch_dist take about 2 minutes a step on a 2-core VM.
DEFAULT_BUDGET_S = 300.0


def _cache_dir() -> Path:
    if os.environ.get("CKPT_BENCH_CACHE"):
        return Path(os.environ["CKPT_BENCH_CACHE"]) / "rank-costs"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ckpt-bench" / "rank-costs"


def _versions() -> dict[str, str]:
    """The torch and megatron-core whose code computes the costs: megatron-core as `import megatron.core` finds it
    (a checkout on PYTHONPATH before the installed wheel)."""
    found = {"torch": package_versions(("torch",))["torch"], "megatron-core": megatron_core_version()}
    return {name: version for name, version in found.items() if version}


def _key(job: JobCheckpoint) -> str:
    """What the costs depend on: the job's state, layout and engine; not the run's hosts or notes, nor the
    checkpoint settings (the computation covers every step each setting runs: `projection.schedule`)."""
    workload = dict(job.workload)
    if workload.get("megatron"):
        workload["megatron"] = {k: v for k, v in workload["megatron"].items() if k != "checkpointing"}
    facts = {"engine": job.engine, "world_size": job.world_size, "ranks_per_node": job.ranks_per_node,
             "thread_count": job.thread_count, "state": job.state, "workload": workload, "versions": _versions(),
             "computation": COMPUTATION_VERSION}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]


def cached_rank_costs(job: JobCheckpoint) -> RankCosts | None:
    """The engine's rank-count costs at the job's size where an earlier computation left them (None: not
    computed yet, or by other versions); computes nothing."""
    try:
        return RankCosts.from_dict(json.loads((_cache_dir() / f"{_key(job)}.json").read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def rank_costs(job: JobCheckpoint, budget_s: float = DEFAULT_BUDGET_S) -> RankCosts:
    """The engine's rank-count costs at the job's size (cached); raises RuntimeError if the computation fails."""
    if job.engine not in ENGINES:
        return RankCosts(job.engine, job.world_size, [], notes=[f"the {job.engine} engine's global steps are not "
                                                               "modelled: none computed (a lower bound)"])
    if job.engine not in RUNS_ENGINE_CODE:
        return importlib.import_module(ENGINES[job.engine]).compute(job, Budget(budget_s))
    known = cached_rank_costs(job)
    if known is not None and (all(step.complete for step in known.steps) or (known.budget_s or 0) >= budget_s):
        return known
    cached = _cache_dir() / f"{_key(job)}.json"
    progress.show(f"computing the {job.engine} engine's global steps at {job.world_size:,} ranks with its own code "
                  f"(on one core, at most {budget_s:g} s a step; cached for the next run)")
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-rank-costs-") as folder:
        path = Path(folder) / "job.json"
        path.write_text(json.dumps(job.as_dict()))
        done = subprocess.run([sys.executable, "-m", _PACKAGE, str(path), str(budget_s)], capture_output=True,
                              text=True)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"computing the rank-count costs failed: {last}")
    costs = RankCosts.from_dict(json.loads(done.stdout))
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(costs.as_dict()))
    except OSError:
        pass  # no cache: computed again next time
    return costs
