"""`ckpt_report.py --compare A B [C ...]`: reports side by side, every headline metric with its ratio
to the first source's.

A source is a run directory (its report.json, or its report rebuilt from the run directory), a
report.json file (a run's, a repetition series', a sweep job's), or a sweep directory (each of its
jobs with a report becomes one column). Anything else holds no report: `ReportError`, one line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from ckpt_bench.core.errors import ReportError
from ckpt_bench.core.rundir import RunDir, sweep_results_file
from ckpt_bench.present.rows import number
from ckpt_bench.report.metrics import HEADLINE_KEYS, STEADY, first_save_apart, fsync, steady_median


def _at(path: str) -> Callable[[dict], object]:
    """The value at a dotted path of a report (None where a key is missing)."""
    def get(report: dict):
        value = report
        for key in path.split("."):
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        return value
    return get


def _steady(figure: str) -> Callable[[dict], object]:
    return lambda report: steady_median(report, figure)


def _first(figure: str) -> Callable[[dict], object]:
    return lambda report: (first_save_apart(report) or {}).get(figure)


# (metric, how to read it from a report), in table order. The steady figures are report.metrics' one
# definition (the median of the saves after the first), as in the summary, sweeps and the advice.
METRICS: tuple[tuple[str, Callable[[dict], object]], ...] = (
    ("world_size", _at("world_size")),
    ("ckpt_format", _at("ckpt_format")),
    ("async_save", _at("async_save")),
    ("fsync", fsync),
    ("num_saved", _at("num_saved")),
    ("accurate", _at("accurate")),
    ("verified", _at("verified")),
    ("save_block_time", _at("save_block_time")),
    ("save_total_time", _at("save_total_time")),
    ("save_bandwidth_in_mbps", _at("save_bandwidth_in_mbps")),
    ("steady_block_time", _steady("block_time")),
    ("steady_total_time", _steady("total_time")),
    ("steady_bandwidth", _steady("bandwidth")),
    ("first_save_total_time", _first("total_time")),
    ("iter_folder_size", _at("iter_folder_size")),
    ("load_time", _at("load_time")),
    ("load_bandwidth_in_mbps", _at("load_bandwidth_in_mbps")),
    ("save_fraction_of_peak", _at("save_fraction_of_peak")),
    ("load_fraction_of_peak", _at("load_fraction_of_peak")),
    ("training_save_impact_time", _at("training.save_impact_time")),
    ("training_save_impact_percent", _at("training.save_impact_percent")),
    ("checkpoint_cost_s", _at("advice.checkpoint_cost_s")),
    ("restart_cost_s", _at("advice.restart_cost_s")),
    ("daly_interval_s", _at("advice.daly_interval_s")),
    ("goodput_at_optimum", _at("advice.goodput_at_optimum")),
    ("goodput_at_configured", _at("advice.goodput_at_configured")),
)
# Always shown, even when no source has them (the rest only when one source does).
CORE = (*HEADLINE_KEYS, "verified", "fsync")
# What a metric's name does not say by itself.
MEANINGS = {
    "fsync": "a save counted as complete only once fsynced (no: page cache only; none: object storage)",
    "steady_block_time": STEADY, "steady_total_time": STEADY, "steady_bandwidth": STEADY,
    "first_save_total_time": "the first save, counted apart (one-off start-up)",
    "save_block_time": "the last complete save", "save_total_time": "the last complete save",
    "save_bandwidth_in_mbps": "the last complete save",
}


def _is_report(data) -> bool:
    return isinstance(data, dict) and ("saves" in data or "save_block_time" in data)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ReportError(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None


def _sweep_sources(folder: Path, results: dict) -> list[dict]:
    sources = []
    for job in results.get("jobs") or []:
        if _is_report(job.get("report")):
            params = ", ".join(f"{k}={v}" for k, v in (job.get("params") or {}).items())
            sources.append({"label": f"{results.get('name', folder.name)} job {job.get('index')} ({params})",
                            "path": str(folder / str(job.get("index")) / "report.json"), "report": job["report"]})
    if not sources:
        raise ReportError(f"{folder}: a sweep directory with no job report yet")
    return sources


def load_sources(path: str | os.PathLike) -> list[dict]:
    """The reports `path` holds: [{label, path, report}]; raises ReportError when it holds none."""
    path = Path(path)
    if not path.exists():
        raise ReportError(f"no such file or folder: {path}")
    if path.is_file():
        data = _read_json(path) if path.suffix == ".json" else None
        if _is_report(data):
            return [{"label": path.parent.name if path.name == "report.json" else path.stem, "path": str(path),
                     "report": data}]
        if isinstance(data, dict) and "jobs" in data:
            return _sweep_sources(path.parent, data)
        raise ReportError(f"{path} holds no report (give a run directory, a report.json or a sweep directory)")
    if (results := sweep_results_file(path)) is not None:
        return _sweep_sources(path, _read_json(results))
    if (path / "report.json").is_file():
        data = _read_json(path / "report.json")
        if _is_report(data):
            return [{"label": path.name, "path": str(path / "report.json"), "report": data}]
    if RunDir.is_run_dir(path):
        from ckpt_bench.report.assembly import run_report

        return [{"label": path.name, "path": str(path), "report": run_report(path)}]
    raise ReportError(f"{path} holds no report (give a run directory, a report.json or a sweep directory)")


def _ratio(value, first) -> float | None:
    value, first = number(value), number(first)
    if value is None or first is None or first == 0:
        return None
    return round(value / first, 4)


def compare(sources: list[dict]) -> dict:
    """Every metric of every source, and its ratio to the first source's (numbers only)."""
    if len(sources) < 2:
        raise ReportError("--compare needs at least two reports (run directories, report.json files or sweep "
                          "directories)")
    values = [{name: get(s["report"]) for name, get in METRICS} for s in sources]
    metrics = [name for name, _ in METRICS if name in CORE or any(v[name] is not None for v in values)]
    return {
        "baseline": sources[0]["label"],
        "metrics": metrics,
        "meanings": {name: MEANINGS[name] for name in metrics if name in MEANINGS},
        "sources": [
            {"label": source["label"], "path": source["path"],
             "metrics": {name: figures[name] for name in metrics},
             "ratio_to_first": {name: _ratio(figures[name], values[0][name]) for name in metrics}}
            for source, figures in zip(sources, values, strict=True)
        ],
        "ratio": "value / the first source's value (numbers only; null when either is missing or the first is 0)",
    }
