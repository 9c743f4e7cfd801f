"""Rank-count costs in about a minute: the engine's own steps computed exactly at the job's ranks on copies of
the model with fewer layers, and their growth fitted to its depth.

At 1,024 ranks megatron-core's own steps take minutes of CPU on one core for a large model (DeepSeek-V3 in
torch_dist: about 17 minutes here), and the real rank 0 pays them too. Their cost grows with the ranks (each
rank's payload gathered, unpickled and planned) and with the model's depth (each layer's shards and items). The
ranks are kept: fitting across rank counts was measured wrong by up to 50x at 1,024 ranks (a power law through 64-256
ranks, against the exact computation), because what a rank holds changes with the data-parallel size (the
distributed optimizer's fragments, the fully parallel distribution). The depth is sampled:

    depth   the job with 2, 4, 8 layers a pipeline stage (the experiment's layer pattern sampled evenly: a MoE
            keeps dense and expert layers), then 16, ... while the time holds, measured by rank 0's shards

A step that is a sum over the ranks (a restart's load plan of every shard a rank holds: nothing in it spans ranks) is
not fitted: it is computed at the job's own size and depth over a sample of its ranks (`RANK_SAMPLE`,
`base.RankSums`), and the copies leave it out.

Counts of shards and items follow a line through the deepest two samples (each layer adds its own); bytes (the
busiest host's, a rank's buffer, `.metadata`'s size: pickled plans whose largest changes with the layout) and CPU a
power law over the deepest three, CPU in what the step goes through where that grows from copy to copy (else in
rank 0's shards). A CPU fit's error (`fit_error`) is the band the copies' timing spread (`TIMING_SPREAD`) gives the
power law at the model's depth, two standard deviations wide, the same from run to run for the same copies; where the
deepest copy lies further from the line through the two before than that spread explains (the growth is not a power
law), it is at least how far it misses, times how many of its last spans the model's depth lies beyond. The figure
lies within CPU / (1 + error) and CPU x (1 + error) (a power law's error is a factor). Each figure is marked
`extrapolated` with that error; `--rank-costs-exact` computes the job itself (minutes; cached).

Which samples run is decided on CPU seconds (each predicted from the one before it), not wall time, so a busy
machine computes the same samples, more slowly. The three first copies and the sums run at once, one worker process
a core, each importing torch and megatron-core once (`python -m ckpt_bench.projection.rank_costs --serve`); deeper
copies one after another.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import queue
import subprocess
import sys
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

from ckpt_bench.core import progress
from ckpt_bench.core.environment import usable_cores
from ckpt_bench.projection.job import JobCheckpoint
from ckpt_bench.projection.rank_costs.base import (
    CHECK_SPREAD,
    NOISE,
    TIMING_SPREAD,
    RankCosts,
    Step,
    computation_failed,
)

__all__ = ["DEFAULT_TIME_S", "at_depth", "depth_sizes", "fit_axis", "fit_error", "sampled_rank_costs"]

#: CPU seconds the samples may take by default (`--rank-costs-time`): with the worker's start and the rest of
#: `--plan`, a first plan in about a minute where the three first copies fit in it.
DEFAULT_TIME_S = 40.0
#: Each sample is predicted to cost its axis's last sample times the growth to this power (a little above linear,
#: as the steps measured here grow).
_PREDICTED_GROWTH = 1.3
#: A step's CPU is fitted along its own units (what it goes through) only where they grow by at least this from copy to
#: copy; else along rank 0's shards. A power law through points an axis barely separates takes the CPU's noise for
#: its growth: Mixtral 8x7B's global plan went through 6,343, 6,515 and 10,027 items at 2, 4 and 8 layers (0.13, 0.18
#: and 0.22 s), an 11th power along them and a fit's error of 25,400 %.
_MIN_GROWTH = 1.25
#: The figures of a step that are fitted.
_FIELDS = ("cpu_s", "host_bytes", "rank_memory_bytes", "units")
#: About how many ranks (at least two of each class) stand for the job's in the steps that are a sum over its
#: ranks (a restart's load plan of every shard a rank holds, `base.RankSums`): those are computed at the job's own
#: size and depth over them, not fitted, and the copies leave them out.
RANK_SAMPLE = 16


def _is_megatron(job: JobCheckpoint) -> bool:
    """A Megatron job, whose depth can be sampled: its layers' shards do not depend on how many layers there are
    (under FSDP2 neither: each parameter of a layer is chunked on its own, `layout.megatron_fsdp2`)."""
    return job.state in ("megatron", "megatron_fsdp2") and bool(job.workload.get("megatron"))


def _layers(job: JobCheckpoint) -> int | None:
    megatron = job.workload.get("megatron") or {}
    architecture = megatron.get("architecture")
    if architecture:
        return architecture["num_layers"]
    return job.workload.get("num_layers")


def at_depth(job: JobCheckpoint, layers: int) -> JobCheckpoint:
    """The job with `layers` decoder layers: a MoE's layer pattern sampled evenly (dense and expert layers kept in
    about their proportion), every other setting its own."""
    workload = json.loads(json.dumps(job.workload))
    full = _layers(job)
    workload["num_layers"] = layers
    megatron = workload.get("megatron")
    if megatron and megatron.get("architecture"):
        architecture = megatron["architecture"]
        architecture["num_layers"] = layers
        moe = architecture.get("moe")
        if moe and isinstance(moe.get("layers"), list):
            moe["layers"] = [moe["layers"][(index * full) // layers] for index in range(layers)]
    return dataclasses.replace(job, workload=workload)


def _doublings(low: int, high: int) -> list[int]:
    sizes, size = [], low
    while size < high:
        sizes.append(size)
        size *= 2
    return [*sizes, high]


def depth_sizes(job: JobCheckpoint) -> list[int]:
    """The depth axis: the fewest layers the layout allows (two a pipeline stage), doubling up to the experiment's
    own (each span as long in log scale, so that the fit's error at the model's depth is about one more span's);
    just its own where its stages' layers are fixed (an explicit split or layout) or the job is not a Megatron one
    whose depth can be sampled."""
    full = _layers(job)
    megatron = job.workload.get("megatron") or {}
    fixed = ("stage_layer_counts", "pipeline_layout", "first_stage_layers", "last_stage_layers")
    if not full or not _is_megatron(job) or any(megatron.get(name) for name in fixed):
        return [full] if full else []
    stages = max(1, int(megatron.get("pp") or job.workload.get("pipeline_parallelism") or 1)) * max(
        1, int(megatron.get("virtual_stages") or 1))
    smallest = min(full, 2 * stages)
    return _doublings(smallest, full)


def fit_axis(points: list[tuple[float, float]], target: float) -> float:
    """The value at `target` from `points` (x, value) along one axis: the value itself where `target` was sampled;
    else a power law through the largest three points (least squares in log-log; its error is `fit_error`'s)."""
    exact = [value for x, value in points if x == target]
    if exact:
        return exact[0]
    usable = _deepest_three(points)
    if not usable:
        return 0.0
    if len(usable) == 1:
        return usable[0][1]
    xs, ys, mx, spread = _log_log(usable)
    my = sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / spread if spread else 0.0
    return math.exp(my + slope * (math.log(target) - mx))


def _deepest_three(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The three points a power law goes through: the largest x's, with positive values, ascending."""
    return sorted((x, value) for x, value in points if value > 0 and x > 0)[-3:]


def _log_log(points: list[tuple[float, float]]) -> tuple[list[float], list[float], float, float]:
    """The points (x, value) in log-log: the logs of the x's and of the values, the mean of the x's logs and their
    spread about it (the sum of squares), which a least-squares line through them and its band are made of."""
    xs, ys = [math.log(x) for x, _ in points], [math.log(value) for _, value in points]
    mean = sum(xs) / len(xs)
    return xs, ys, mean, sum((x - mean) ** 2 for x in xs)


def _spans(xs: list[float], target: float) -> float:
    """How many spans between the two largest of `xs` (ascending, apart) `target` lies beyond the largest, in log
    scale: 1 where it lies as far beyond as the largest beyond the one before."""
    return math.log(target / xs[-1]) / math.log(xs[-1] / xs[-2])


#: How many of the timings' standard deviations a fit's error spans (about 95 % of the fits of copies timed again).
_BAND = 2.0
#: The largest x whose exp(x) a float holds.
_LARGEST_EXPONENT = math.log(sys.float_info.max)


def fit_error(points: list[tuple[float, float]], target: float) -> float | None:
    """The error at `target` of `fit_axis`'s power law through `points` (x, CPU seconds), a factor's excess: the
    figure lies within its value / (1 + error) and its value x (1 + error). 0 where `target` was sampled; None with
    fewer than three points. Else the band (`_BAND` standard deviations) that copies timed with `TIMING_SPREAD` give
    a least-squares line in log-log at `target`: a property of where the copies lie, not of their noise, so the same
    copies give the same error every run (the deepest copy's miss, which it used alone, moved DeepSeek-V3's global
    plan's error from 0.3 to 2.0 between runs and flipped Mixtral 8x7B's binding limit). Where the deepest copy
    misses the line through the two before by more than the band of that miss, the growth is not a power law: the
    error is then at least that miss (a factor) carried over as many of the last spans as `target` lies beyond the
    deepest copy (as `_reach` carries a count's). None (unknown) where either factor is past any float."""
    if any(x == target for x, _ in points):
        return 0.0
    usable = _deepest_three(points)
    if len(usable) < 3:
        return None
    lengths = [x for x, _ in usable]
    xs, ys, mean, spread = _log_log(usable)
    if not spread:
        return None
    band = _BAND * TIMING_SPREAD * math.sqrt(1 / len(xs) + (math.log(target) - mean) ** 2 / spread)
    if band >= _LARGEST_EXPONENT:  # copies too close together for so far a target: the fit says nothing
        return None
    error = max(NOISE, math.exp(band) - 1)
    if lengths[1] == lengths[0] or lengths[2] == lengths[1]:  # two copies at one place: no line through two to miss
        return error
    reach = _spans(lengths[:2], lengths[2])  # the deepest copy's distance from the two before, in their span
    missed = abs(ys[2] - (ys[1] + (ys[1] - ys[0]) * reach))
    if missed > _BAND * TIMING_SPREAD * math.sqrt(1 + (1 + reach) ** 2 + reach**2):
        carried = missed * max(1.0, _spans(lengths, target))
        if carried >= _LARGEST_EXPONENT:  # a factor past any float: the fit says nothing of the figure's size
            return None
        error = max(error, math.exp(carried) - 1)
    return error


class _Worker:
    """A worker process computing the samples one after another: it imports torch and megatron-core once."""

    def __init__(self):
        self.process = subprocess.Popen([sys.executable, "-m", "ckpt_bench.projection.rank_costs", "--serve"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
        self.stderr: str | None = None  # what it wrote there, read once it ended

    def ask(self, request: dict) -> dict:
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:  # it ended after a request that failed
            line = ""
        else:
            line = self.process.stdout.readline()
        if not line:
            if self.stderr is None:  # kept for a later request
                self.stderr = self.process.stderr.read()
            raise computation_failed(self.stderr)
        return json.loads(line)

    def close(self) -> None:
        if self.process.stdin:
            with contextlib.suppress(BrokenPipeError):  # it ended: what was written for it is dropped
                self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _predicted(spent: float, growth: float) -> float:
    return spent * growth ** _PREDICTED_GROWTH


class _Pool:
    """Worker processes, each answering one request at a time: `ask` takes a free one (the threads asking wait on
    the pipes, without the GIL)."""

    def __init__(self, size: int):
        self.workers: list[_Worker] = []
        self.free: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        try:
            for _ in range(size):
                self.workers.append(_Worker())
                self.free.put(self.workers[-1])
        except BaseException:  # those started so far are not left running
            self.kill()
            raise

    def ask(self, request: dict) -> dict:
        worker = self.free.get()
        try:
            return worker.ask(request)
        finally:
            self.free.put(worker)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()

    def kill(self) -> None:
        """Stop every worker now (an error or an interrupt elsewhere): a request they were answering fails."""
        for worker in self.workers:
            worker.process.kill()


def workers_for(depths: list[int]) -> int:
    """How many worker processes compute a job's copies: one a core, at most one a computation that always runs
    (the first three copies and the sums over a sample of the ranks)."""
    return max(1, min(usable_cores(), min(len(depths), 3) + 1))


def sampled_rank_costs(job: JobCheckpoint, time_s: float, step_budget_s: float) -> RankCosts:
    """The job's rank-count costs fitted from copies of it at its own ranks with fewer layers (`depth_sizes`): the
    first three always (a fit needs three to know its error), more while about `time_s` CPU seconds hold (the sum
    over a sample of the ranks included), each step at most `step_budget_s`.

    The first three copies and the sums over a sample of the ranks run at once, one worker process a core
    (`workers_for`): the deepest copy first, on a worker of its own, while the others take the rest in turn (on
    two cores, DeepSeek-V3's 8-layer copy beside the sums, then its 2- and 4-layer copies: about the deepest copy's
    time). Those copies are thus timed beside another computation (as a rank's global steps run beside its host's
    other ranks running theirs), but on one core, and for the tail of whichever outlasts the others; alone,
    DeepSeek-V3's 4-layer copy took 14 % less for its sharding validation and 20-22 % less for its distributions
    than beside its 8-layer one (the two cores share caches and memory). Deeper copies run one after another once
    those are done, alone, each while the CPU seconds hold: a fit through them and the first ones mixes the two."""
    full_layers = _layers(job)
    depths = depth_sizes(job)
    first = depths[:3]
    started = time.monotonic()
    computed: dict[int, RankCosts] = {}
    units: dict[int, int] = {}
    sized = {depth: (at_depth(job, depth) if depth != full_layers else job).as_dict() for depth in depths}
    size = workers_for(depths)
    pool: _Pool | None = None
    executor = ThreadPoolExecutor(size)

    def elapsed() -> str:
        return f"{time.monotonic() - started:.0f} s elapsed"

    def count() -> None:  # rank 0's shards at each depth: the depth axis
        for depth in depths:
            units[depth] = pool.ask({"job": sized[depth], "count_only": True})["rank0_units"]

    def sample_sums() -> RankCosts:  # the sums over the ranks at the job's own size, over a sample of its ranks
        sums = RankCosts.from_dict(pool.ask({"job": job.as_dict(), "budget": step_budget_s,
                                             "sums": {"ranks": RANK_SAMPLE, "steps": "sums"}}))
        progress.show(f"rank-count steps: the restart's load plan at {job.world_size:,} ranks x {full_layers} "
                      f"layers computed over a sample of its ranks ({sums.spent_s:.1f} s CPU, {elapsed()})")
        return sums

    def copy(depth: int) -> RankCosts:
        costs = computed[depth] = RankCosts.from_dict(pool.ask({"job": sized[depth], "budget": step_budget_s,
                                                                "sums": {"steps": "others"}}))
        return costs

    def show(depth: int, then: str = "") -> None:
        progress.show(f"rank-count steps: {job.world_size:,} ranks x {depth} layers computed "
                      f"({computed[depth].spent_s:.1f} s CPU; {len(computed)} of at most {len(depths)}, "
                      f"{elapsed()}{then})")

    def copy_shown(depth: int) -> None:
        copy(depth)
        show(depth)

    try:
        pool = _Pool(size)
        deepest = executor.submit(copy_shown, first[-1])
        sums_done = executor.submit(sample_sums)
        counted = executor.submit(count)
        rest = [executor.submit(copy_shown, depth) for depth in first[:-1]]
        every = [deepest, sums_done, counted, *rest]
        finished, _ = wait(every, return_when=FIRST_EXCEPTION)
        for done in [*finished, *every]:  # a failure raised at once, not once the deepest copy is done
            done.result()
        sums = sums_done.result()
        spent = (sums.spent_s or 0.0) + sum(costs.spent_s or 0.0 for costs in computed.values())

        def guess(depth: int) -> float:  # the next copy's CPU, from the last one's
            last = max(computed)
            return _predicted(computed[last].spent_s or 0.0, units[depth] / units[last])

        deeper = depths[len(first):]
        for index, depth in enumerate(deeper):
            if spent + guess(depth) > time_s:
                break
            spent += copy(depth).spent_s or 0.0
            following = deeper[index + 1] if index + 1 < len(deeper) else None
            show(depth, f"; next {following} layers, about {guess(following):.1f} s CPU"
                 if following and spent + guess(following) <= time_s else "")
    except BaseException:  # the computations still running are not waited for (a failed one, Ctrl-C)
        if pool is not None:
            pool.kill()
        raise
    finally:
        executor.shutdown(cancel_futures=True)  # nothing is queued but after a failure
        if pool is not None:
            pool.close()
    return _fitted(job, computed, units, full_layers, sums)


def _reach(error: float, xs: list[float], target: float) -> float:
    """A fit's error at `target`: how far it missed its largest sample, over as many of its last spans as the
    target lies beyond that sample (in log scale), and never below `NOISE`."""
    xs = sorted(set(xs))
    if len(xs) < 2 or target <= xs[-1]:
        return max(error, NOISE) if error else 0.0
    return max(NOISE, error * max(1.0, _spans(xs, target)))


def _fitted(job: JobCheckpoint, computed: dict[int, RankCosts], units: dict[int, int],
            full_layers: int | None, sums: RankCosts) -> RankCosts:
    """Each figure at the job's depth: a step that is a sum over the ranks as `sums` computed it at the job's size;
    the others' counts of shards or items along a line in rank 0's shards through the deepest two samples (each
    layer adds its own), their bytes along a power law in rank 0's shards, and CPU in what the step goes through
    (its own units where they grow from copy to copy, `_spread`, else rank 0's shards), over the deepest three."""
    depths = sorted(computed)
    template = computed[depths[-1]]
    at_size = {(step.operation, step.name): step for step in sums.steps}
    if full_layers in computed:
        return dataclasses.replace(template, steps=[at_size.get((s.operation, s.name), s) for s in template.steps])
    goal = units[full_layers]

    def fit(points: list[tuple[float, float]], target: float, count: bool) -> tuple[float | None, float | None]:
        if not points:
            return None, None
        if not count:
            return fit_axis(points, target), fit_error(points, target)
        figure, error = _line(points, target)
        return figure, None if error is None else _reach(error, [x for x, _ in points], target)

    def pick(costs: RankCosts, index: int, name: str):
        found = costs.steps[index] if index < len(costs.steps) else None
        return None if found is None or not found.complete else getattr(found, name)

    samples = [[job.world_size, depth] for depth in depths]
    steps = []
    for index, step in enumerate(template.steps):
        if (step.operation, step.name) in at_size:
            steps.append(at_size[step.operation, step.name])
            continue
        fitted = Step(**{**step.as_dict(), **dict.fromkeys(_FIELDS), "assignment": None,
                         "why": step.why if step.cpu_s is None else None})
        for name in ("units", "host_bytes", "rank_memory_bytes"):
            figure, _ = fit([(units[d], v) for d in depths if (v := pick(computed[d], index, name)) is not None],
                            goal, count=name == "units")
            if figure is not None:
                setattr(fitted, name, int(round(figure)))
        along = [(pick(computed[d], index, "units"), pick(computed[d], index, "cpu_s")) for d in depths]
        timed = [(x, v) for x, v in along if v is not None]
        if fitted.units and all(x for x, _ in along) and _spread([x for x, _ in timed]):
            points, target = timed, fitted.units
        else:
            points = [(units[d], v) for d in depths if (v := pick(computed[d], index, "cpu_s")) is not None]
            target = goal
        counted = [pick(computed[d], index, "pairwise") for d in depths]
        if all(pairwise and pairwise["check_s"] is not None for pairwise in counted):
            figure, error, fitted.pairwise = _with_checks(points, target, fit, depths, counted, full_layers)
        else:
            figure, error = fit(points, target, count=False)
        if figure is not None:
            fitted.cpu_s = round(figure, 4)
            fitted.extrapolated = {"samples": samples, "error": None if error is None else round(error, 3)}
        elif step.cpu_s is not None:
            fitted.complete, fitted.why = False, "no sample computed it within its budget: not extrapolated"
        steps.append(fitted)
    metadata, _ = fit([(units[d], c.metadata_file_bytes) for d, c in computed.items() if c.metadata_file_bytes],
                      goal, count=False)
    return RankCosts(job.engine, job.world_size, steps,
                     metadata_file_bytes=None if metadata is None else int(round(metadata)),
                     every_rank_reads_metadata=template.every_rank_reads_metadata,
                     computed_with=template.computed_with, budget_s=template.budget_s,
                     spent_s=round(sum(c.spent_s or 0.0 for c in [sums, *computed.values()]), 3),
                     peak_rss_bytes=max(c.peak_rss_bytes or 0 for c in [sums, *computed.values()]),
                     method="extrapolated",
                     samples=samples, rank0_units=goal,
                     notes=[f"the global steps were computed at {job.world_size:,} ranks with "
                            f"{', '.join(map(str, depths))} of the model's {full_layers} layers and fitted to its "
                            "depth (counts on a line, CPU on a power law): each is marked extrapolated with the "
                            "fit's error; --rank-costs-exact computes the job itself (minutes; cached)",
                            *([f"the restart's load plan of every shard a rank holds, a sum over the ranks, was "
                               f"computed at the job's size over "
                               f"{sampled['ranks']} of its {job.world_size:,} ranks' plans (at least two of each "
                               "class of ranks holding the same model shards), scaled by the items the job's ranks "
                               "hold (marked rank_sample, with its error)"]
                              if (sampled := next((s.rank_sample for s in sums.steps if s.rank_sample), None))
                              else []),
                            *([f"in the copies, the fully parallel distribution's greedy assignment was timed over a "
                               f"sample of its shards and scaled ({assigned['timed']:,} of {assigned['shards']:,} at "
                               f"{depths[-1]} layers)"]
                              if (assigned := next((s.assignment for s in template.steps if s.assignment), None))
                              else [])])


def _with_checks(points: list[tuple[float, float]], target: float, fit, depths: list[int], counted: list[dict],
                 full_layers: int) -> tuple[float | None, float | None, dict]:
    """(CPU, error, pairwise) at the job's depth of a global plan whose validation's pairwise checks were counted in
    each copy (`pairwise_checks`): the rest of the step fitted as any step's CPU (`points` less each copy's checks),
    the checks on the quadratic in layers through the deepest three copies (each chunk of a layer checked against
    the others': exact where the layers are alike, Llama 3.1 70B's 8,404,992, 33,669,120 and 134,774,784 at 2, 4
    and 8 layers and 539,295,744 at 16), each at the least of the copies' times a check. The error weighs each part's:
    the rest's fit; the checks' how far a power law in layers through the same counts lands from the quadratic (a
    pattern of layers not alike), never below `CHECK_SPREAD`."""
    by_depth = dict(zip(depths, counted, strict=True))
    rest = [(x, max(0.0, cpu - pairwise["checks"] * pairwise["check_s"]))
            for (x, cpu), pairwise in zip(points, counted, strict=True)]
    rest_s, rest_error = fit(rest, target, count=False)
    deepest = sorted(depths)[-3:]
    counts = [(depth, by_depth[depth]["checks"]) for depth in deepest]
    checks = _quadratic(counts, full_layers)
    power = fit_axis(counts, full_layers)
    # The least of the copies' times a check, as the least of a step's timings: the one other work disturbed least (a
    # check costs no more at the model's depth: Llama 3.1 70B's linear_fc2 alone, 0.69, 0.64 and 0.42 us at 2, 8 and
    # 80 layers); its error what torch's own validation moves between processes.
    check_s = min(by_depth[depth]["check_s"] for depth in deepest)
    checks_error = max(CHECK_SPREAD, abs(power - checks) / checks if checks else 0.0)
    checks_s = checks * check_s
    total = (rest_s or 0.0) + checks_s
    if rest_error is None:
        error = None
    else:
        error = ((rest_s or 0.0) * rest_error + checks_s * checks_error) / total if total else 0.0
    return total, error, {"checks": int(round(checks)), "timed": 0, "check_s": check_s}


def _quadratic(points: list[tuple[float, float]], x: float) -> float:
    """The quadratic through three points (fewer: the line, or the value) at `x`."""
    if len(points) < 3:
        return _line(points, x)[0]
    total = 0.0
    for i, (xi, yi) in enumerate(points):
        term = yi
        for j, (xj, _) in enumerate(points):
            if j != i:
                term *= (x - xj) / (xi - xj)
        total += term
    return max(0.0, total)


def _spread(xs: list[float]) -> bool:
    """Whether a step's own units grow enough from copy to copy (each of the deepest three at least `_MIN_GROWTH`
    times the one before) for its CPU to be fitted along them."""
    xs = sorted(set(xs))[-3:]
    return len(xs) >= 2 and all(deeper >= shallower * _MIN_GROWTH for shallower, deeper in itertools.pairwise(xs))


def _line(points: list[tuple[float, float]], goal: float) -> tuple[float, float | None]:
    """(value at `goal`, error) of the line through the two largest `points`; its error how far the line through
    the two before misses the largest (None with fewer than three)."""
    points = sorted(points)[-3:]
    if len(points) < 2:
        return points[0][1], None
    (x1, y1), (x2, y2) = points[-2], points[-1]
    value = y1 + (y2 - y1) * (goal - x1) / (x2 - x1) if x2 != x1 else y2
    error = None
    if len(points) == 3:
        x0, y0 = points[0]
        missed = y0 + (y1 - y0) * (x2 - x0) / (x1 - x0) if x1 != x0 else y1
        error = abs(missed - y2) / y2 if y2 else 0.0
    return max(0.0, value), error
