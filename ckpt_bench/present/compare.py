"""`ckpt_report.py --compare A B [C ...]`: reports side by side, every headline metric with its ratio
to the first source's.

A source is a run directory (its report.json, or its report rebuilt from the run directory), a
report.json file (a run's, a repetition series', a sweep job's), or a sweep directory (each of its
jobs with a report becomes one column). Anything else holds no report: `ReportError`, one line.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from ckpt_bench.core.errors import ReportError
from ckpt_bench.core.rundir import RunDir, sweep_results_file
from ckpt_bench.present.rows import MLPERF_KEYS, as_report, as_results, mlperf_figures, mlperf_meanings, number
from ckpt_bench.report.metrics import HEADLINE_KEYS, STEADY
from ckpt_bench.report.schema import Report, RunSection, SchemaError


# (metric, how to read it from a report), in table order. The steady figures are report.metrics' one
# definition (the median of the saves after the first), as in the summary, sweeps and the advice.
def _framework(report: Report, frameworks: Collection[str]) -> str | None:
    """The --framework that ran the job (Primus, Megatron-LM); None: a backend's own worker, or logs."""
    backend = (report.run or RunSection()).backend
    return backend if backend in frameworks else None


METRICS: tuple[tuple[str, Callable[..., object]], ...] = (
    # What each source is: sources named alike (two runs of one experiment) are told apart here.
    ("backend", lambda report: (report.run or RunSection()).backend or "none (logs)"),
    ("framework", _framework),  # with the frameworks' runner names, bound by `compare`
    ("engine", lambda report: report.engine),
    ("experiment", lambda report: report.experiment),
    ("workload", lambda report: report.workload),
    ("world_size", lambda report: report.world_size),
    ("ckpt_format", lambda report: report.ckpt_format),
    ("async_save", lambda report: report.async_save),
    ("fsync", lambda report: report.fsync),
    ("num_saved", lambda report: report.num_saved),
    ("accurate", lambda report: report.accurate),
    ("verified", lambda report: report.verified),
    ("save_block_time", lambda report: report.save_block_time),
    ("save_total_time", lambda report: report.save_total_time),
    ("save_bandwidth_in_mbps", lambda report: report.save_bandwidth_in_mbps),
    ("steady_block_time", lambda report: report.steady_median("block_time")),
    ("steady_total_time", lambda report: report.steady_median("total_time")),
    ("steady_bandwidth", lambda report: report.steady_median("bandwidth")),
    ("steady_total_time_at_least", lambda report: report.steady_median("total_time_at_least")),
    ("first_save_total_time", lambda report: report.first_save_apart and report.first_save_apart.total_time),
    ("iter_folder_size", lambda report: report.iter_folder_size),
    ("load_time", lambda report: report.load_time),
    ("load_bandwidth_in_mbps", lambda report: report.load_bandwidth_in_mbps),
    ("save_fraction_of_peak", lambda report: report.save_fraction_of_peak),
    ("load_fraction_of_peak", lambda report: report.load_fraction_of_peak),
    ("save_above_peak", lambda report: report.save_above_peak and report.save_above_peak.ratio),
    ("load_above_peak", lambda report: report.load_above_peak and report.load_above_peak.ratio),
    ("training_save_impact_time", lambda report: report.training and report.training.save_impact_time),
    ("training_save_impact_percent", lambda report: report.training and report.training.save_impact_percent),
    ("checkpoint_cost_s", lambda report: report.advice and report.advice.checkpoint_cost_s),
    ("checkpoint_cost_from", lambda report: report.advice and report.advice.checkpoint_cost_from),
    ("restart_cost_s", lambda report: report.advice and report.advice.restart_cost_s),
    ("daly_interval_s", lambda report: report.advice and report.advice.daly_interval_s),
    ("goodput_at_optimum", lambda report: report.advice and report.advice.goodput_at_optimum),
    ("goodput_at_configured", lambda report: report.advice and report.advice.goodput_at_configured),
    # A workload run's MLPerf Storage figures, under both definitions, and its comparability verdict.
    *((key, lambda report, key=key: mlperf_figures(report).get(key)) for key in MLPERF_KEYS),
)
# Always shown, even when no source has them (the rest only when one source does).
CORE = ("backend", *HEADLINE_KEYS, "verified", "fsync")
# What a metric's name does not say by itself.
MEANINGS = {
    "backend": "what ran it: the --backend, or the --framework",
    "framework": "the --framework that ran the job (none: the backend's own worker)",
    "engine": "a workload run's checkpoint engine (--engine)",
    "experiment": "the experiment file the run came from, beside its exp_name",
    "fsync": "a save counted as complete only once fsynced (no: page cache only; none: object storage)",
    "steady_block_time": STEADY, "steady_total_time": STEADY, "steady_bandwidth": STEADY,
    "steady_total_time_at_least": f"{STEADY}, of saves timed only from their call's return (their start not in "
                                  "the log): a lower bound on their total time",
    "first_save_total_time": "the first save, counted apart (one-off start-up)",
    "save_block_time": "the last complete save", "save_total_time": "the last complete save",
    "save_bandwidth_in_mbps": "the last complete save",
    "save_above_peak": "the steady save beat the storage baseline's fastest round by this factor: no fraction "
                       "of peak for it (its report says why)",
    "load_above_peak": "the loads beat the storage baseline's fastest cold read by this factor: no fraction",
    "checkpoint_cost_s": "what a save costs training (report.advice, one definition for sync and async saves: "
                         "the training loop's measured cost when there is one); where from: checkpoint_cost_from",
}
# Per phase (docs/report.md, "Phases"), after the metrics above: which phase makes one source slower.
STEADY_PHASE, LOAD_PHASE = "steady_phase:", "load_phase:"
PHASE_MEANINGS = {STEADY_PHASE: "seconds of this phase, the slowest rank's: median over the steady saves",
                  LOAD_PHASE: "seconds of this phase in the last load, the slowest rank's"}
RATIO = "value / the first source's value (numbers only; null when either is missing or the first is 0)"


@dataclass
class Source:
    """A report to compare, named for its column, and where it was read."""

    label: str
    path: str
    report: Report | dict  # report.json as read (`--compare` adds the advice to it), or typed


@dataclass
class Column:
    """One source's figures in the comparison."""

    label: str
    path: str
    metrics: dict[str, object]
    ratio_to_first: dict[str, float | None]


@dataclass
class Comparison:
    """`--compare`'s table: every metric a source has (and CORE), per source, with its ratio to the first's."""

    baseline: str
    metrics: list[str]
    meanings: dict[str, str]
    sources: list[Column]
    ratio: str = RATIO

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _is_report(data) -> bool:
    return isinstance(data, dict) and ("saves" in data or "save_block_time" in data)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ReportError(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None


def _sweep_sources(folder: Path, data: dict) -> list[Source]:
    try:
        results = as_results(data)
    except (ValueError, TypeError) as error:  # a key it does not declare, or one it needs missing
        raise ReportError(f"{folder}: the sweep results are not of this version ({error})") from None
    sources = [Source(f"{results.name} job {job.index} ({', '.join(f'{k}={v}' for k, v in job.params.items())})",
                      str(folder / str(job.index) / "report.json"), job.report_json)
               for job in results.jobs if _is_report(job.report_json)]
    if not sources:
        raise ReportError(f"{folder}: a sweep directory with no job report yet")
    return sources


def load_sources(path: str | os.PathLike) -> list[Source]:
    """The reports `path` holds, as read; raises ReportError when it holds none."""
    path = Path(path)
    if not path.exists():
        raise ReportError(f"no such file or folder: {path}")
    if path.is_file():
        data = _read_json(path) if path.suffix == ".json" else None
        if _is_report(data):
            return [Source(path.parent.name if path.name == "report.json" else path.stem, str(path), data)]
        if isinstance(data, dict) and "jobs" in data:
            return _sweep_sources(path.parent, data)
        raise ReportError(f"{path} holds no report (give a run directory, a report.json or a sweep directory)")
    if (results := sweep_results_file(path)) is not None:
        return _sweep_sources(path, _read_json(results))
    if (path / "report.json").is_file():
        data = _read_json(path / "report.json")
        if _is_report(data):
            return [Source(path.name, str(path / "report.json"), data)]
    if RunDir.is_run_dir(path):
        from ckpt_bench.report.assembly import run_report

        return [Source(path.name, str(path), run_report(path))]
    raise ReportError(f"{path} holds no report (give a run directory, a report.json or a sweep directory)")


def _ratio(value, first) -> float | None:
    value, first = number(value), number(first)
    if value is None or first is None or first == 0:
        return None
    return round(value / first, 4)


def _typed(source: Source) -> Report:
    try:
        return as_report(source.report)
    except SchemaError as error:
        raise ReportError(f"{source.path}: not a report of this version ({error})") from None


def _phases(report: Report) -> dict[str, float]:
    """A report's phases as metrics: the steady saves' median per phase, the last load's."""
    loads = [load for load in report.every_load if load.phases]
    return {**{STEADY_PHASE + name: seconds for name, seconds in report.steady_phases().items()},
            **{LOAD_PHASE + name: seconds for name, seconds in (loads[-1].phase_seconds() if loads else {}).items()}}


def compare(sources: list[Source], frameworks: Collection[str]) -> Comparison:
    """Every metric of every source, and its ratio to the first source's (numbers only). `frameworks`: the
    runner names that are frameworks (`benchmark.registry.FRAMEWORKS`: the registry stands above us)."""
    if len(sources) < 2:
        raise ReportError("--compare needs at least two reports (run directories, report.json files or sweep "
                          "directories)")
    reports = [_typed(source) for source in sources]
    getters = {**dict(METRICS), "framework": functools.partial(_framework, frameworks=frameworks)}
    values = [{name: get(report) for name, get in getters.items()} for report in reports]
    metrics = [name for name, _ in METRICS if name in CORE or any(v[name] is not None for v in values)]
    phases = [_phases(report) for report in reports]
    phase_metrics = list(dict.fromkeys(name for figures in phases for name in figures))
    for figures, phase_figures in zip(values, phases, strict=True):
        figures.update({name: phase_figures.get(name) for name in phase_metrics})
    metrics += phase_metrics
    meanings = {**{name: MEANINGS[name] for name in metrics if name in MEANINGS}, **mlperf_meanings(metrics)}
    meanings.update({name: PHASE_MEANINGS[prefix] for name in phase_metrics for prefix in PHASE_MEANINGS
                     if name.startswith(prefix)})
    return Comparison(
        baseline=sources[0].label,
        metrics=metrics,
        meanings=meanings,
        sources=[Column(source.label, source.path, {name: figures[name] for name in metrics},
                        {name: _ratio(figures[name], values[0][name]) for name in metrics})
                 for source, figures in zip(sources, values, strict=True)],
    )
