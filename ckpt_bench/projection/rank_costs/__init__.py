"""Rank-count costs: each engine's own global steps (the sharding validation, the fully parallel distribution,
DCP's global plan, the finalize, a restart's metadata and plan) run here over the N ranks' inputs built from the
plan we derive (`base`). One module per engine, listed once here (`ENGINES`); each has
`compute(job, budget) -> RankCosts`.

`rank_costs(job, budget_s)` computes them at the job's own size where that is quick (up to `EXACT_UP_TO` ranks),
asked for (`exact`, `--rank-costs-exact`: minutes at 1,024 ranks for a large model) or the only way (a job whose
depth is not sampled: an explicit stage split); otherwise on shallower copies of the job,
their growth fitted (`sampled`, within `time_s`: a first `--plan` in about a minute), each figure
marked extrapolated with the fit's error. Either runs in processes of their own (their memory is the
coordinator's, its peak measured; torch and megatron-core are imported there only), and is kept in a cache keyed
by the job's checkpoint and the versions whose code ran (`$XDG_CACHE_HOME/ckpt-bench/rank-costs/`, or
`$CKPT_BENCH_CACHE`), so that a second `--plan` with other storage figures does not compute it again; an exact
result is used wherever one is cached. A result the budget cut short is computed again under a larger budget.

    python -m ckpt_bench.projection.rank_costs JOB.json BUDGET_S   # prints RankCosts as JSON
"""

from __future__ import annotations

import importlib
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from ckpt_bench.core import progress
from ckpt_bench.core.cache import cache_dir, key_of, read_json, write_json
from ckpt_bench.core.environment import megatron_core_version, package_versions
from ckpt_bench.projection.job import JobCheckpoint
from ckpt_bench.projection.rank_costs.base import Budget, RankCosts, Step, computation_failed
from ckpt_bench.projection.rank_costs.sampled import DEFAULT_TIME_S, depth_sizes, sampled_rank_costs, workers_for

__all__ = ["DEFAULT_BUDGET_S", "DEFAULT_TIME_S", "ENGINES", "EXACT_UP_TO", "RankCosts", "Step", "cached_rank_costs",
           "rank_costs"]

_PACKAGE = "ckpt_bench.projection.rank_costs"

#: The engine (`--engine`) -> the module computing its rank-count costs.
ENGINES = {"torch_dist": f"{_PACKAGE}.torch_dist", "dcp": f"{_PACKAGE}.dcp", "torch_dcp": f"{_PACKAGE}.dcp",
           "torch": f"{_PACKAGE}.torch", "torch-save": f"{_PACKAGE}.torch_save"}
#: The engines whose steps run torch's or megatron-core's code (in a process of their own); the others' are
#: plain Python arithmetic, computed in this process.
RUNS_ENGINE_CODE = ("torch_dist", "dcp", "torch_dcp")

#: The computation's own version: a cached result of another is computed again.
COMPUTATION_VERSION = 19
#: Jobs up to this many ranks are computed at their own size (seconds); larger ones are extrapolated unless asked.
EXACT_UP_TO = 64

#: CPU seconds each step of the computation may take by default (`--rank-costs-budget`): DeepSeek-V3's 1,024 ranks
#: through torch_dist take about 2 minutes a step on a 2-core VM.
DEFAULT_BUDGET_S = 300.0


def _cache_dir() -> Path:
    return cache_dir("rank-costs")


def _versions() -> dict[str, str]:
    """The Python, torch and megatron-core whose code computes the costs: megatron-core as `import megatron.core`
    finds it (a checkout on PYTHONPATH before the installed wheel). The Python counts: the steps' CPU is mostly
    pickling, which Python 3.13 does 2-3x faster than 3.11 (docs/projection.md)."""
    found = {"python": platform.python_version(), "torch": package_versions(("torch",))["torch"],
             "megatron-core": megatron_core_version()}
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
    return key_of(facts)


def _read(path: Path) -> RankCosts | None:
    data = read_json(path)
    if data is None:
        return None
    try:
        return RankCosts.from_dict(data)
    except (ValueError, TypeError, KeyError):  # an entry of another shape: computed again
        return None


def cached_rank_costs(job: JobCheckpoint) -> RankCosts | None:
    """The engine's rank-count costs at the job's size where an earlier computation left them, computed at its size
    or else extrapolated (None: not computed yet, or by other versions); computes nothing."""
    return _read(_cache_dir() / f"{_key(job)}.json") or _read(_cache_dir() / f"{_key(job)}-fit.json")


def _enough(known: RankCosts | None, budget_s: float) -> bool:
    return known is not None and (all(step.complete for step in known.steps) or (known.budget_s or 0) >= budget_s)


def rank_costs(job: JobCheckpoint, budget_s: float = DEFAULT_BUDGET_S, exact: bool = False,
               time_s: float = DEFAULT_TIME_S) -> RankCosts:
    """The engine's rank-count costs at the job's size (cached): computed at its size where it is small or `exact`
    is asked, else extrapolated from samples taking about `time_s` CPU seconds; raises RuntimeError if the
    computation fails."""
    if job.engine not in ENGINES:
        return RankCosts(job.engine, job.world_size, [], notes=[f"the {job.engine} engine's global steps are not "
                                                               "modelled: none computed (a lower bound)"])
    if job.engine not in RUNS_ENGINE_CODE:
        return importlib.import_module(ENGINES[job.engine]).compute(job, Budget(budget_s))
    cached = _cache_dir() / f"{_key(job)}.json"
    known = _read(cached)
    if _enough(known, budget_s):
        return known
    if not exact and job.world_size > EXACT_UP_TO and len(depth_sizes(job)) > 1:  # else: computed at its size
        fitted = _cache_dir() / f"{_key(job)}-fit.json"
        known = _read(fitted)
        if _enough(known, budget_s):
            return known
        depths = depth_sizes(job)
        workers = workers_for(depths)
        progress.show(f"computing the {job.engine} engine's global steps on smaller copies of the "
                      f"{job.world_size:,}-rank job with its own code ({', '.join(map(str, depths[:3]))} of its "
                      f"{depths[-1]} layers" + (f" at least, deeper ones while about {time_s:g} s of CPU hold"
                                                if len(depths) > 3 else "")
                      + (f"; {workers} processes at once" if workers > 1 else "") + "), their growth fitted; "
                      "--rank-costs-exact computes the job itself; cached for the next run")
        costs = sampled_rank_costs(job, time_s, budget_s)
        # Where the budget reached the model's own depth the result is the exact one (a sum over a sample of the
        # ranks aside): cached as such.
        exact = costs.method != "extrapolated" and not any(step.rank_sample for step in costs.steps)
        write_json(cached if exact else fitted, costs.as_dict())
        return costs
    progress.show(f"computing the {job.engine} engine's global steps at {job.world_size:,} ranks with its own code "
                  f"(on one core, at most {budget_s:g} s a step; cached for the next run)")
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-rank-costs-") as folder:
        path = Path(folder) / "job.json"
        path.write_text(json.dumps(job.as_dict()))
        done = subprocess.run([sys.executable, "-m", _PACKAGE, str(path), str(budget_s)], capture_output=True,
                              text=True)
    if done.returncode:
        raise computation_failed(done.stderr)
    costs = RankCosts.from_dict(json.loads(done.stdout))
    write_json(cached, costs.as_dict())
    return costs
