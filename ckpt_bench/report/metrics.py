"""The headline figures of a report, once: their keys, what a person calls them, their units. The
terminal summary, report.html, `--compare`, sweeps and `--repeat` all list these, in this order."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


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
# checkpoint of a long job costs is the median of the saves after it: "steady". `save_stats` writes it
# into the report (`stats.excluding_first`); everything that shows or compares it (the summary,
# report.html, --compare, sweeps, --repeat, the storage baseline's fraction of peak) reads it through
# report.schema.Report's `steady`, `steady_median`, `first_saves` and `compared`.

STEADY = "median of the saves after the first"
STEADY_FIGURES = {"block_time": "save block time", "total_time": "save total time", "bandwidth": "save bandwidth"}
# A lower bound on the total time of saves the source times only in part (report.engine: from the call's return);
# in `stats` only where a save has one.
AT_LEAST = "total_time_at_least"


def split_first_saves(complete: list[T], process: Callable[[T], object]) -> tuple[list[T], list[T]]:
    """(the first save of each process, the later ones) of complete saves in order; `process` names a save's
    process (a `--repeat` series tags each save with its `repetition`, each in fresh processes). The one
    rule for saves as report.json holds them (dicts) and as report.schema types them."""
    seen: set = set()
    first, later = [], []
    for save in complete:
        (later if process(save) in seen else first).append(save)
        seen.add(process(save))
    return first, later


def steady_saves(saves: list[dict]) -> list[dict]:
    """The complete saves a steady figure is taken over: those after the first of each process, or all of
    them when no process made more than one."""
    complete = [save for save in saves if save.get("complete")]
    _first, later = split_first_saves(complete, lambda save: save.get("repetition"))
    return later or complete


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
    """The report's `stats`: block time, total time and bandwidth (and `total_time_at_least` where a save has
    one) over every complete save, the first save apart (`first_save`; of the first process, in a --repeat
    series), and `excluding_first` over the steady saves (None when no process saved twice)."""
    complete = [save for save in saves if save.get("complete")]
    if not complete:
        return None

    figures = [*STEADY_FIGURES, *([AT_LEAST] if any(AT_LEAST in save for save in complete) else [])]

    def over(group: list[dict]) -> dict:
        return {figure: summary_stats([s[figure] for s in group if s.get(figure) is not None],
                                      2 if figure == "bandwidth" else 3) for figure in figures}

    steady = steady_saves(complete)
    first = complete[0]
    return {
        **over(complete),
        "first_save": {k: first.get(k) for k in ("iteration", "block_time", "total_time", AT_LEAST, "bandwidth")
                       if k != AT_LEAST or k in first},
        "excluding_first": over(steady) if len(steady) < len(complete) else None,
    }
