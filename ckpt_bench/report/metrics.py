"""The headline figures of a report, once: their keys, what a person calls them, their units. The
terminal summary, report.html, `--compare`, sweeps and `--repeat` all list these, in this order."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One top-level figure of a report."""

    key: str  # its key in report.json
    label: str  # what a person calls it, with its unit: "save block time (s)"
    column: str  # a table's column header: "save block s"
    unit: str  # "s" | "MiB/s"

    @property
    def digits(self) -> int:
        """Decimals shown: milliseconds for times, a tenth of a MiB/s for bandwidths."""
        return 1 if self.unit == "MiB/s" else 3


HEADLINE = (
    Metric("save_block_time", "save block time (s)", "save block s", "s"),
    Metric("save_total_time", "save total time (s)", "save total s", "s"),
    Metric("save_bandwidth_in_mbps", "save bandwidth (MiB/s)", "save MiB/s", "MiB/s"),
    Metric("load_time", "load time (s)", "load s", "s"),
    Metric("load_bandwidth_in_mbps", "load bandwidth (MiB/s)", "load MiB/s", "MiB/s"),
)
HEADLINE_KEYS = tuple(metric.key for metric in HEADLINE)
BY_KEY = {metric.key: metric for metric in HEADLINE}
