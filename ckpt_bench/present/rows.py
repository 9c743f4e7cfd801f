"""What a person reads of a report: the rows of its summary, shared by the terminal (`ckpt_bench.present.summary`,
rich tables) and the HTML report (`ckpt_bench.present.html`). Only presents the report's values: every
figure shown is a key of the JSON report (`advice`, `training`, `storage_baseline` included)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ckpt_bench.core.units import MIB
from ckpt_bench.report.metrics import HEADLINE

NONE = "-"


def number(value) -> float | None:
    """A plain number, or None (bools and non-finite values are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def fmt(value, digits: int = 3) -> str:
    """One cell: '-' for None, yes/no for bools, numbers without noise."""
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return NONE
        if value != 0 and abs(value) < 10 ** -digits:
            return f"{value:.2g}"
        return f"{value:,.{digits}f}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(", ", ": "), default=str)
    return str(value)


def seconds(value) -> str:
    return NONE if number(value) is None else f"{fmt(float(value))} s"


def duration(value) -> str:
    """Seconds with a human unit beside them when long (advice intervals, MTBF)."""
    value = number(value)
    if value is None:
        return NONE
    for unit, scale in (("d", 86400), ("h", 3600), ("min", 60)):
        if value >= scale:
            return f"{value:,.1f} s ({value / scale:.2f} {unit})"
    return f"{value:.3g} s"


def size(nbytes: int) -> str:
    """A message or file size in binary units (64 KiB, 1 MiB)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def mib(nbytes) -> str:
    return NONE if number(nbytes) is None else f"{nbytes / MIB:,.1f} MiB"


def mibps(value) -> str:
    return NONE if number(value) is None else f"{fmt(float(value), 1)} MiB/s"


def percent(fraction, digits: int = 2) -> str:
    return NONE if number(fraction) is None else f"{100 * fraction:.{digits}f} %"


def peak_rss(save: dict) -> float | None:
    """A save's peak RSS in bytes (`saves[].peak_rss_bytes`: a number, or per-rank figures with a max)."""
    value = save.get("peak_rss_bytes")
    if isinstance(value, dict):
        value = value.get("max", max((v for v in value.values() if number(v) is not None), default=None))
    return number(value)


def baseline_mibps(report: dict, direction: str) -> float | None:
    """The storage baseline's bandwidth for `direction` ('write' or 'read') in MiB/s, when measured:
    the first number in `storage_baseline` whose key path names the direction and a bandwidth."""
    baseline = report.get("storage_baseline")
    if not isinstance(baseline, dict):
        return None
    aliases = {"write": ("write", "save"), "read": ("read", "load")}[direction]

    def leaves(value, path):
        if isinstance(value, dict):
            for key, inner in value.items():
                yield from leaves(inner, f"{path}.{key}".lower())
        elif number(value) is not None:
            yield path, value

    for path, value in leaves(baseline, ""):
        if any(a in path for a in aliases) and any(u in path for u in ("mbps", "mib", "bandwidth", "bw")):
            return float(value)
    return None


def _stats_line(stats: dict | None, key: str, render) -> str:
    figures = (stats or {}).get(key) or {}
    if not figures:
        return NONE
    return f"median {render(figures.get('median'))} (min {render(figures.get('min'))}, max " \
           f"{render(figures.get('max'))}, n={figures.get('n')})"


def headline_rows(report: dict) -> list[tuple[str, str]]:
    """The report in a few lines: (label, value)."""
    run = report.get("run") or {}
    saves = report.get("saves") or []
    stats = report.get("stats") or {}
    later = stats.get("excluding_first") or stats
    last = [part for part in (f"block {seconds(report.get('save_block_time'))}",
                              f"total {seconds(report.get('save_total_time'))}",
                              mibps(report.get("save_bandwidth_in_mbps")), mib(report.get("iter_folder_size")))
            if not part.endswith(NONE)]
    rows = [
        ("status", f"{run['status']} ({run.get('backend') or NONE})" if run.get("status") else "from logs"),
        ("format", f"{fmt(report.get('ckpt_format'))}, async save: {fmt(report.get('async_save'))}"),
        ("world size", f"{fmt(report.get('world_size'))} (data parallel {fmt(report.get('data_parallel_size'))})"),
        ("saves complete", f"{fmt(report.get('num_saved'))} of {len(saves)}, accurate (no overlap): "
                           f"{fmt(report.get('accurate'))}"),
        ("last save", ", ".join(last) or NONE),
    ]
    after = " (after the first)" if stats.get("excluding_first") else ""
    for key, label, render in (("total_time", "save total time", seconds), ("bandwidth", "save bandwidth", mibps)):
        if (later or {}).get(key):
            rows.append((label + after, _stats_line(later, key, render)))
    load = report.get("load")
    if load:
        slowest = (load.get("time_per_rank") or {}).get("max_rank")
        rows.append(("load", f"{seconds(load.get('time'))}, {mibps(load.get('bandwidth'))}, cache "
                             f"{fmt(load.get('cache'))}, slowest rank {fmt(slowest)}"))
    verified = report.get("verified")
    rows.append(("verified", "not checked" if verified is None else fmt(verified)))
    write, read = baseline_mibps(report, "write"), baseline_mibps(report, "read")
    if report.get("storage_baseline") is not None:
        tool = report["storage_baseline"].get("tool") if isinstance(report["storage_baseline"], dict) else None
        rows.append(("storage baseline", f"write {mibps(write)}, read {mibps(read)}" + (f" ({tool})" if tool else "")))
    for key, label in (("save_fraction_of_peak", "save fraction of peak"),
                       ("load_fraction_of_peak", "load fraction of peak")):
        if report.get(key) is not None:
            rows.append((label, percent(report[key], 1)))
    training = report.get("training")
    if isinstance(training, dict) and training.get("save_impact_time") is not None:
        rows.append(("training impact", f"{seconds(training.get('save_impact_time'))} for "
                                        f"{fmt(training.get('saves'))} saves "
                                        f"({fmt(training.get('save_impact_percent'), 1)} %)"))
    resolution = fmt(report.get("time_resolution_s"))
    rows.append(("time source", f"{fmt(report.get('time_source'))} (resolution {resolution} s)"))
    return rows


def save_columns(report: dict) -> list[str]:
    columns = ["iteration", "block s", "total s", "MiB/s", "size MiB", "slowest rank", "complete"]
    if any(peak_rss(s) is not None for s in report.get("saves") or []):
        columns.append("peak RSS MiB")
    return columns


def save_rows(report: dict) -> list[list[str]]:
    """One row per save (columns: `save_columns`), then one per load."""
    memory = "peak RSS MiB" in save_columns(report)
    rows = []
    for save in report.get("saves") or []:
        slowest = (save.get("total_time_per_rank") or save.get("block_time_per_rank") or {}).get("max_rank")
        row = [fmt(save.get("iteration")), fmt(save.get("block_time")), fmt(save.get("total_time")),
               fmt(save.get("bandwidth"), 1),
               NONE if number(save.get("bytes")) is None else f"{save['bytes'] / MIB:,.1f}",
               fmt(slowest), fmt(save.get("complete")) + (" (overlapped)" if save.get("overlapped") else "")]
        if memory:
            rss = peak_rss(save)
            row.append(NONE if rss is None else f"{rss / MIB:,.1f}")
        rows.append(row)
    return rows


def load_rows(report: dict) -> list[list[str]]:
    """One row per load, in `save_columns` (the peak RSS column too, when the saves have one)."""
    memory = "peak RSS MiB" in save_columns(report)
    rows = []
    for load in report.get("loads") or ([report["load"]] if report.get("load") else []):
        row = [f"load {fmt(load.get('iteration'))}", NONE, fmt(load.get("time")), fmt(load.get("bandwidth"), 1),
               NONE if number(load.get("bytes")) is None else f"{load['bytes'] / MIB:,.1f}",
               fmt((load.get("time_per_rank") or {}).get("max_rank")), fmt(load.get("complete"))]
        if memory:
            rss = peak_rss(load)
            row.append(NONE if rss is None else f"{rss / MIB:,.1f}")
        rows.append(row)
    return rows


def advice_rows(advice: dict) -> list[tuple[str, str]]:
    if advice.get("error"):
        return [("advice", advice["error"])]
    rows = [
        ("checkpoint cost C", f"{duration(advice.get('checkpoint_cost_s'))} -- {advice.get('checkpoint_cost_from')}"),
        ("restart cost R", f"{duration(advice.get('restart_cost_s'))} -- {advice.get('restart_cost_from')}"),
        ("job MTBF M", f"{duration(advice.get('mtbf_s'))} -- {advice.get('mtbf_from')}"),
        ("Young interval sqrt(2CM)", _interval(advice, "young")),
        ("Daly interval", _interval(advice, "daly")),
        ("goodput at Daly's interval", percent(advice.get("goodput_at_optimum"))),
    ]
    configured = advice.get("configured_interval_iterations")
    if configured is not None and advice.get("configured_interval_s") is not None:
        rows.append(("configured interval", f"{fmt(configured)} iterations = "
                                            f"{duration(advice.get('configured_interval_s'))}"))
        rows.append(("goodput at the configured interval", percent(advice.get("goodput_at_configured"))))
    elif configured is not None:
        rows.append(("configured interval", f"{fmt(configured)} iterations (no iteration time: no goodput for it)"))
    if advice.get("iteration_time_s") is not None:
        rows.append(("iteration time", f"{seconds(advice['iteration_time_s'])} -- {advice.get('iteration_time_from')}"))
    return rows


def _interval(advice: dict, which: str) -> str:
    text = duration(advice.get(f"{which}_interval_s"))
    iterations = advice.get(f"{which}_interval_iterations")
    return text + (f" = {iterations:,} iterations" if iterations is not None else "")


WHAT_IF_COLUMNS = ["GPUs", "job MTBF", "Young interval", "Daly interval", "Daly (iterations)", "goodput"]


def what_if_rows(advice: dict) -> list[list[str]]:
    return [[f"{row['gpus']:,}", duration(row.get("mtbf_s")), duration(row.get("young_interval_s")),
             duration(row.get("daly_interval_s")), fmt(row.get("daly_interval_iterations")),
             percent(row.get("goodput_at_optimum"))] for row in advice.get("what_if") or []]


def where_rows(report: dict) -> list[tuple[str, str]]:
    """Where the run's files are (those that exist)."""
    folder = (report.get("run") or {}).get("dir")
    if not folder:
        return []
    path = Path(folder)
    rows = [("run directory", str(path))]
    for name in ("report.json", "report.html"):
        if (path / name).is_file():
            rows.append((name, str(path / name)))
    return rows


# --- sweeps ----------------------------------------------------------------------------------------

def sweep_columns(results: dict) -> list[str]:
    return ["job", "status", *(results.get("sweep") or {}).get("sweep", {}), *(m.column for m in HEADLINE),
            "verified"]


def sweep_rows(results: dict) -> list[list[str]]:
    lists = (results.get("sweep") or {}).get("sweep", {})
    rows = []
    for job in results.get("jobs") or []:
        report = job.get("report") or {}
        rows.append([str(job.get("index")), str(job.get("status")), *(fmt(job["params"].get(k)) for k in lists),
                     *(fmt(report.get(m.key), m.digits) for m in HEADLINE),
                     fmt(report.get("verified"))])
    return rows
