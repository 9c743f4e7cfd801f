"""The headline figures of a report, once: their keys, what a person calls them, their units. The
terminal summary, report.html, `--compare`, sweeps and `--repeat` all list these, in this order."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One top-level figure of a report."""

    key: str  # its key in report.json
    label: str  # what a person calls it, with its unit: "save block time (s)"
    column: str  # a table's column header: "save block s"
    unit: str  # "s" | "MiB/s"
    steady_figure: str | None = None  # a save's figure in `stats`: compared runs show its steady median

    @property
    def digits(self) -> int:
        """Decimals shown: milliseconds for times, a tenth of a MiB/s for bandwidths."""
        return 1 if self.unit == "MiB/s" else 3

    def steady(self, report: dict) -> float | None:
        """The figure where runs are compared (sweeps, --repeat): a save's steady median (`steady_median`),
        falling back to the top-level key (a log without stats); a load's top-level value."""
        if self.steady_figure is not None:
            value = steady_median(report, self.steady_figure)
            if value is not None:
                return value
        return report.get(self.key)


HEADLINE = (
    Metric("save_block_time", "save block time (s)", "save block s", "s", "block_time"),
    Metric("save_total_time", "save total time (s)", "save total s", "s", "total_time"),
    Metric("save_bandwidth_in_mbps", "save bandwidth (MiB/s)", "save MiB/s", "MiB/s", "bandwidth"),
    Metric("load_time", "load time (s)", "load s", "s"),
    Metric("load_bandwidth_in_mbps", "load bandwidth (MiB/s)", "load MiB/s", "MiB/s"),
)
HEADLINE_KEYS = tuple(metric.key for metric in HEADLINE)
BY_KEY = {metric.key: metric for metric in HEADLINE}


# --- the steady figures: one definition for every reader ---------------------------------------------
# The first save of a process pays one-off costs (megatron-core starts its writer's helper process, a
# spawn-context Manager that imports torch: seconds), so it is shown apart, and the figure every later
# checkpoint of a long job costs is the median of the saves after it: "steady". The summary, report.html,
# --compare, sweeps, --repeat, the storage baseline's fraction of peak and the advice all take it here.

STEADY = "median of the saves after the first"
STEADY_FIGURES = {"block_time": "save block time", "total_time": "save total time", "bandwidth": "save bandwidth"}


def steady_saves(saves: list[dict]) -> list[dict]:
    """The complete saves a steady figure is taken over: those after the first of each process (a
    `--repeat` series tags each save with its `repetition`, each in fresh processes), or all of them
    when no process made more than one."""
    complete = [save for save in saves if save.get("complete")]
    seen: set = set()
    later = []
    for save in complete:
        process = save.get("repetition")
        if process in seen:
            later.append(save)
        seen.add(process)
    return later or complete


def first_saves(saves: list[dict]) -> list[dict]:
    """The first complete save of each process, when later saves are summarised without it."""
    later = steady_saves(saves)
    return [save for save in saves if save.get("complete") and not any(save is other for other in later)]


def summary_stats(values: list[float], digits: int = 3) -> dict | None:
    """{n, min, median, mean, max, stdev} of `values`, rounded; None without values."""
    if not values:
        return None
    return {
        "n": len(values),
        "min": round(min(values), digits),
        "median": round(statistics.median(values), digits),
        "mean": round(statistics.fmean(values), digits),
        "max": round(max(values), digits),
        "stdev": round(statistics.stdev(values), digits) if len(values) > 1 else None,
    }


def save_stats(saves: list[dict]) -> dict | None:
    """The report's `stats`: block time, total time and bandwidth over every complete save, the first
    save apart (`first_save`; of the first process, in a --repeat series), and `excluding_first` over the
    steady saves (None when no process saved twice)."""
    complete = [save for save in saves if save.get("complete")]
    if not complete:
        return None

    def over(group: list[dict]) -> dict:
        return {figure: summary_stats([s[figure] for s in group if s.get(figure) is not None],
                                      2 if figure == "bandwidth" else 3) for figure in STEADY_FIGURES}

    steady = steady_saves(complete)
    first = complete[0]
    return {
        **over(complete),
        "first_save": {k: first.get(k) for k in ("iteration", "block_time", "total_time", "bandwidth")},
        "excluding_first": over(steady) if len(steady) < len(complete) else None,
    }


def steady_stats(report: dict) -> dict:
    """{figure: {n, min, median, mean, max, stdev}} over the steady saves (`stats.excluding_first`, or
    `stats` itself when there is one save); {} without saves."""
    stats = report.get("stats") or {}
    return stats.get("excluding_first") or {key: stats[key] for key in STEADY_FIGURES if stats.get(key)}


def steady_median(report: dict, figure: str) -> float | None:
    """The steady median of `figure` ("block_time", "total_time" or "bandwidth")."""
    return (steady_stats(report).get(figure) or {}).get("median")


def first_save_apart(report: dict) -> dict | None:
    """The first save ({iteration, block_time, total_time, bandwidth}) when later saves are summarised
    without it; None with one save or none."""
    stats = report.get("stats") or {}
    return stats.get("first_save") if stats.get("excluding_first") else None


def fsync(report: dict) -> bool | None:
    """Whether a save counted as complete only once fsynced (None: object storage, or not known: see
    `says_fsync`)."""
    for section in (report.get("measurement"), report.get("config")):
        if isinstance(section, dict) and "fsync" in section:
            return section["fsync"]
    return None


def says_fsync(report: dict) -> bool:
    """Whether the report knows if its saves were fsynced (a run does; a log does not say)."""
    return any(isinstance(section, dict) and "fsync" in section
               for section in (report.get("measurement"), report.get("config")))
