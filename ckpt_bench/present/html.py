"""`report.html` and `sweep_report.html`: one self-contained file each, readable offline.

Plots are drawn with matplotlib (no GUI backend: `matplotlib.figure.Figure` alone) and inlined as SVG,
text kept as text; the style sheet is inline too. Nothing is fetched when the file opens: no script,
no font, no stylesheet, no image from anywhere. Only presents the report's values, plus, for a run
directory or logs, the checkpoint events themselves for the per-rank timeline.

    report.html         summary table, saves and load, advice, timeline per rank (blocking and
                        background part of every save, every load), bandwidth per save against the
                        storage baseline, per-rank spread, memory per save, comms preflight, training
                        impact, repeats, configuration, environment, notes
    sweep_report.html   each metric against each swept parameter, and the table of jobs
"""

from __future__ import annotations

import dataclasses
import html
import io
import json
import os
import re
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ckpt_bench.core.events import Phase, event_files, read_event_files
from ckpt_bench.core.rundir import SWEEP_RESULTS_FILES, sweep_results_file, write_atomic
from ckpt_bench.present import projection as pp
from ckpt_bench.present import rows as p
from ckpt_bench.report.advice import per_save_training_cost
from ckpt_bench.report.engine import CONFIG_KEYS, Operation, pair
from ckpt_bench.report.metrics import HEADLINE, STEADY
from ckpt_bench.report.schema import Comms, MLPerf, PhaseTime, Projection, Report, RunSection
from ckpt_bench.report.sweep_results import JobRecord, SweepResults

REPORT_HTML = "report.html"
SWEEP_HTML = "sweep_report.html"
# CKPT_BENCH_HTML=0: no report.html / sweep_report.html written by runs and sweeps (drawing costs about
# half a second of CPU per run: the test suite, which runs a hundred benchmarks, sets it).
HTML_ENV = "CKPT_BENCH_HTML"

BLOCK_COLOR = "#c0392b"  # the save's blocking part: training waits
BACKGROUND_COLOR = "#f1948a"  # the rest of the save: written in the background
LOAD_COLOR = "#2471a3"
TOTAL_COLOR = "#2e4053"
BASELINE_COLOR = "#117a65"
FIRST_SAVE_COLOR = "#e6b0aa"  # the first save, counted apart
PALETTE = ("#2471a3", "#c0392b", "#117a65", "#af601a", "#7d3c98", "#2e4053", "#b7950b", "#1abc9c")
# A colour per phase (ckpt_bench.core.events.Phase), in the order a save runs them; a name not here is grey.
PHASE_COLORS = {
    Phase.STATE_DICT: "#7f8c8d", Phase.VALIDATE_COMMON: "#8e44ad", Phase.PLAN: "#2980b9",
    Phase.EXCHANGE: "#5dade2", Phase.PLAN_EXCHANGE: "#2e86c1", Phase.STAGE: "#f39c12", Phase.SCHEDULE: "#d35400",
    Phase.QUEUED: "#d5d8dc", Phase.WRITE: "#c0392b", Phase.WRITE_FSYNC: "#c0392b", Phase.PLAN_WRITE: "#a93226",
    Phase.FSYNC: "#78281f", Phase.COLLECT: "#e59866", Phase.WRITE_FINALIZE: "#cd6155",
    Phase.AWAITING_FINALIZE: "#eaeded",
    Phase.FINALIZE: "#27ae60", Phase.METADATA: "#76d7c4",
    Phase.READ: "#2471a3", Phase.COPY_IN: "#1abc9c",
}
OTHER_PHASE_COLOR = "#aab7b8"
MAX_TIMELINE_OPERATIONS = 4000  # bars drawn at most; a longer run shows its first operations

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1c2833; margin: 0;
       background: #f4f6f7; }
main { max-width: 1200px; margin: 0 auto; padding: 24px 32px 48px; background: #fff; }
h1 { font-size: 1.6em; margin: 0 0 4px; }
h2 { font-size: 1.25em; margin: 32px 0 8px; padding-bottom: 4px; border-bottom: 2px solid #d5dbdb; }
h3 { font-size: 1.05em; margin: 20px 0 6px; }
p.meta, p.hint { color: #566573; margin: 4px 0 12px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 0.92em; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e5e8e8; text-align: right; vertical-align: top; }
th { background: #eaf2f8; font-weight: 600; }
td:first-child, th:first-child { text-align: left; }
table.pairs th { text-align: left; background: none; white-space: nowrap; }
table.pairs td { text-align: left; }
table.terms td:last-child, table.terms th:last-child { text-align: left; }
table.pairs td code, td code { font-size: 0.95em; word-break: break-all; }
figure { margin: 8px 0 20px; }
figure svg { display: block; max-width: 100%; height: auto; }
figcaption { color: #566573; font-size: 0.9em; margin-top: 2px; }
ul.notes li { margin: 3px 0; }
nav a { margin-right: 12px; color: #2471a3; text-decoration: none; }
.bad { color: #c0392b; font-weight: 600; }
.good { color: #117a65; font-weight: 600; }
"""


# --- the timeline of a run, from its events --------------------------------------------------------


@dataclass
class TimedOperation:
    """One save or load of one rank on the run's time axis (`timeline`)."""

    rank: int | None
    kind: str  # "save" | "load"
    iteration: int | None
    start_s: float  # from the earliest start of the run
    block_s: float | None  # a save's blocking part
    total_s: float | None
    complete: bool
    phases: list[PhaseTime] | None = None  # the rank's phases (report.engine.Operation.phases), from its start


def timeline(operations: Iterable[Operation]) -> list[TimedOperation]:
    """Every save and load of every rank, as the report engine paired them (`ckpt_bench.report.engine.pair`),
    start_s from the earliest start (wall clock, comparable across hosts), durations as the report defines
    them. Operations without a start time are left out (a log without clocks gives none)."""
    operations = [op for op in operations if op.start is not None and op.start.wall_ns is not None]
    if not operations:
        return []
    origin = min(op.start.wall_ns for op in operations)
    return [TimedOperation(op.rank, op.kind, op.iteration, (op.start.wall_ns - origin) / 1e9,
                           op.block_s() if op.kind == "save" else None, op.total_s(), op.complete,
                           [PhaseTime(**phase) for phase in op.phases() or []] or None)
            for op in operations]


def run_timeline(run_dir: str | os.PathLike) -> list[TimedOperation]:
    """The timeline of one of our run directories (its events/rank-R.jsonl)."""
    try:
        return timeline(pair(read_event_files(event_files(Path(run_dir) / "events"))))
    except (OSError, ValueError, KeyError, TypeError):
        return []


# --- plots ------------------------------------------------------------------------------------------


def _figure(width: float, height: float, left: float = 0.9, right: float = 0.25, top: float = 0.4,
            bottom: float = 0.55, wspace: float = 0.0, hspace: float = 0.0, columns: int = 1, rows: int = 1):
    """A figure with fixed margins and gaps, in inches (a layout engine costs more than the drawing)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=96)
    panel_width = (width - left - right - wspace * (columns - 1)) / columns
    panel_height = (height - top - bottom - hspace * (rows - 1)) / rows
    figure.subplots_adjust(left=left / width, right=1 - right / width, top=1 - top / height, bottom=bottom / height,
                           wspace=wspace / panel_width, hspace=hspace / panel_height)
    return figure


def _bottom(count: int) -> float:
    """The bottom margin under category labels (turned when many: see `_rotate`)."""
    return 1.0 if count > 8 else 0.45


def _svg(figure) -> str:
    """The figure as inline SVG (text as text, no XML prolog, scales with the page)."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "ckpt-bench"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None,
                                                       "Type": None})
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    # Drop the fixed size: the viewBox keeps the aspect ratio and the style sheet sets the width.
    return re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1 role="img"', text, count=1)


def _style(axes, title: str, xlabel: str, ylabel: str) -> None:
    axes.set_title(title, loc="left", fontsize=11)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(True, axis="both", color="#e5e8e8", linewidth=0.8)
    axes.set_axisbelow(True)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)


def _label(value) -> str:
    return "?" if value is None else str(value)


def _lanes(operations: list[TimedOperation]) -> tuple[list[int], dict]:
    """A lane per operation so that operations of one rank that overlap in time (an async save still
    writing when the next starts) are drawn side by side; and the number of lanes of each rank."""
    ends: dict = defaultdict(list)  # rank -> each lane's end
    lanes = []
    for op in operations:
        end = op.start_s + (op.total_s or op.block_s or 0.0)
        free = [i for i, lane_end in enumerate(ends[op.rank]) if lane_end <= op.start_s]
        if free:
            lane = free[0]
            ends[op.rank][lane] = end
        else:
            lane = len(ends[op.rank])
            ends[op.rank].append(end)
        lanes.append(lane)
    return lanes, {rank: len(lane_ends) for rank, lane_ends in ends.items()}


def plot_timeline(report: Report, operations: list[TimedOperation]) -> str | None:
    """Per rank, every save (blocking part, then background part) and load on one time axis; without
    clock positions, each save's slowest-rank block and total time as bars."""
    from matplotlib.patches import Patch

    if operations:
        shown = operations[:MAX_TIMELINE_OPERATIONS]
        ranks = sorted({op.rank for op in shown}, key=lambda r: (r is None, r if r is not None else 0))
        figure = _figure(11, min(1.5 + 0.32 * len(ranks), 14), left=0.85, bottom=0.9, top=0.35)
        axes = figure.add_subplot()
        position = {rank: index for index, rank in enumerate(ranks)}
        lanes, lane_count = _lanes(shown)
        for op, lane in zip(shown, lanes, strict=True):
            count = lane_count[op.rank]
            height = 0.7 / count
            y = position[op.rank] - 0.35 + height * (lane + 0.5)  # overlapping saves side by side
            total = op.total_s
            if op.kind == "load":
                axes.barh(y, total if total is not None else 0.0, left=op.start_s, height=height * 0.9,
                          color=LOAD_COLOR)
                continue
            block = op.block_s if op.block_s is not None else total
            if block is not None:
                axes.barh(y, block, left=op.start_s, height=height * 0.9, color=BLOCK_COLOR)
            if total is not None and block is not None and total > block:
                axes.barh(y, total - block, left=op.start_s + block, height=height * 0.9, color=BACKGROUND_COLOR)
            if not op.complete:
                axes.plot([op.start_s], [y], marker="x", color="black")
        axes.set_yticks(range(len(ranks)), [f"rank {r}" if r is not None else "job" for r in ranks])
        axes.invert_yaxis()
        _style(axes, "Saves and loads per rank", "seconds since the first save started", "")
        axes.grid(False, axis="y")
        handles = [Patch(color=BLOCK_COLOR, label="save: blocking part (training waits)"),
                   Patch(color=BACKGROUND_COLOR, label="save: background part (until complete on storage)"),
                   Patch(color=LOAD_COLOR, label="load")]
        figure.legend(handles=handles, loc="lower center", ncols=3, frameon=False, fontsize=9)
        return _svg(figure)
    saves = [s for s in report.saves or [] if s.block_time is not None or s.total_time]
    loads = [x for x in report.every_load if x.time]
    if not saves and not loads:
        return None
    figure = _figure(11, min(1.2 + 0.3 * (len(saves) + len(loads)), 12), left=1.2, bottom=0.6, top=0.35)
    axes = figure.add_subplot()
    labels = [f"save {_label(s.iteration)}" for s in saves]
    blocks = [s.block_time or 0.0 for s in saves]
    rests = [max(0.0, (s.total_time or 0.0) - (s.block_time or 0.0)) for s in saves]
    axes.barh(labels, blocks, color=BLOCK_COLOR, label="save: blocking part")
    axes.barh(labels, rests, left=blocks, color=BACKGROUND_COLOR, label="save: background part")
    if loads:
        axes.barh([f"load {_label(x.iteration)}" + (f" #{i}" if len(loads) > 1 else "")
                   for i, x in enumerate(loads, 1)], [x.time for x in loads], color=LOAD_COLOR, label="load")
    axes.invert_yaxis()
    _style(axes, "Every save and load, slowest rank (the source gives no start times to place them in time)",
           "seconds", "")
    axes.legend(frameon=False, fontsize=9)
    return _svg(figure)


def _unplaced_words(report: Report, operations: list[TimedOperation]) -> str:
    """The saves and loads of the report the timeline cannot place, said under it: a log that times an
    operation without a clock for its start (Megatron-LM's load lines carry no timestamp; its load-checkpoint
    timer gives the duration alone)."""
    if not operations:  # no clock at all: the plot draws every save and load by its durations instead
        return ""
    placed = {(op.kind, op.iteration) for op in operations}
    missing = [f"save {_label(save.iteration)} ({p.seconds(save.total_time)})" for save in report.saves or []
               if ("save", save.iteration) not in placed and save.total_time is not None]
    missing += [f"load {_label(load.iteration)} ({p.seconds(load.time)})" for load in report.every_load
                if ("load", load.iteration) not in placed and load.time is not None]
    if not missing:
        return ""
    return (f" Not on the time axis, the source giving no start time for it: {', '.join(missing)} (its figures are "
            "in the tables).")


MAX_PANELS = 12  # operations drawn one by one under the timeline


def _grouped(operations: list[TimedOperation]) -> list[tuple[str, list[TimedOperation]]]:
    """The operations as checkpoints: the k-th save (or load) of iteration I on every rank is one."""
    groups: dict[tuple, list[TimedOperation]] = {}
    seen: dict[tuple, int] = defaultdict(int)
    for op in operations:
        seen[(op.rank, op.kind, op.iteration)] += 1
        groups.setdefault((op.kind, op.iteration, seen[(op.rank, op.kind, op.iteration)]), []).append(op)
    repeated = {(kind, iteration) for kind, iteration, n in groups if n > 1}
    return [(f"{kind} {_label(iteration)}" + (f" #{n}" if (kind, iteration) in repeated else ""), ops)
            for (kind, iteration, n), ops in groups.items()]


def plot_operations(operations: list[TimedOperation]) -> str | None:
    """Each save (and, beside them, each load) on a time axis of its own start: one band per
    checkpoint, one thin bar per rank in it, split into the rank's phases where it recorded them, else a
    save into its blocking and background part."""
    groups = _grouped(operations)[:MAX_PANELS]
    if not groups:
        return None
    ranks = sorted({op.rank for _, ops in groups for op in ops}, key=lambda r: (r is None, r or 0))
    kinds = [kind for kind in ("save", "load") if any(ops[0].kind == kind for _, ops in groups)]
    bands = max(sum(ops[0].kind == kind for _, ops in groups) for kind in kinds)
    band = 0.3 + min(0.6, 0.08 * len(ranks))
    names = list(dict.fromkeys(phase.phase for _, ops in groups for op in ops for phase in op.phases or []))
    legend = 0.3 if names else 0.0
    figure = _figure(11, 0.95 + legend + bands * band, left=0.9, right=0.2, top=0.35, bottom=0.5 + legend,
                     wspace=1.1, columns=len(kinds))
    width_ratios = [2, 1] if len(kinds) == 2 else [1]
    panels = figure.subplots(1, len(kinds), squeeze=False, gridspec_kw={"width_ratios": width_ratios})[0]
    bar = 0.8 / len(ranks)
    position = {rank: index for index, rank in enumerate(ranks)}
    for axes, kind in zip(panels, kinds, strict=True):
        mine = [(name, ops) for name, ops in groups if ops[0].kind == kind]
        parts: dict[str, tuple[list, list, list]] = {color: ([], [], []) for color in
                                                      (BLOCK_COLOR, BACKGROUND_COLOR, LOAD_COLOR)}
        for index, (_name, ops) in enumerate(mine):
            origin = min(op.start_s for op in ops)
            for op in ops:
                y = index - 0.4 + bar * (position[op.rank] + 0.5)
                start, total = op.start_s - origin, op.total_s or 0.0
                block = total if kind == "load" or op.block_s is None else op.block_s
                pieces = [(LOAD_COLOR, start, total)] if kind == "load" else [
                    (BLOCK_COLOR, start, block), (BACKGROUND_COLOR, start + block, max(0.0, total - block))]
                if op.phases:  # where the time went on this rank
                    pieces = [(_phase_color(phase.phase), start + phase.start, phase.seconds) for phase in op.phases]
                for color, left, length in pieces:
                    parts.setdefault(color, ([], [], []))
                    parts[color][0].append(y)
                    parts[color][1].append(length)
                    parts[color][2].append(left)
        for color, (ys, lengths, lefts) in parts.items():
            if ys:  # one call per colour: hundreds of ranks stay cheap to draw
                axes.barh(ys, lengths, left=lefts, height=bar * 0.85, color=color)
        axes.set_yticks(range(len(mine)), [name for name, _ in mine], fontsize=9)
        axes.set_ylim(len(mine) - 0.5, -0.5)
        _style(axes, f"Each {kind}, from its start", "seconds", "")
        axes.title.set_fontsize(10)
        axes.grid(False, axis="y")
    if names:
        _phase_legend(figure, names)
    return _svg(figure)


def _phase_color(name: str) -> str:
    return PHASE_COLORS.get(name, OTHER_PHASE_COLOR)


def _phase_legend(figure, names: list[str]) -> None:
    from matplotlib.patches import Patch

    figure.legend(handles=[Patch(color=_phase_color(name), label=name) for name in names], loc="lower center",
                  ncols=min(len(names), 9), frameon=False, fontsize=8)


def plot_phases(report: Report) -> str | None:
    """A stacked bar per save and load: its slowest rank's phases, in the order they ran; an async save's
    background phases hatched. None when no record carries phases."""
    records = [(f"save {_label(s.iteration)}", s) for s in report.saves or [] if s.phases]
    records += [(f"load {_label(x.iteration)}" + (f" #{i}" if len(report.every_load) > 1 else ""), x)
                for i, x in enumerate(report.every_load, 1) if x.phases]
    if not records:
        return None
    records = records[:MAX_PANELS * 4]
    figure = _figure(11, min(1.5 + 0.3 * len(records), 14), left=1.2, bottom=0.9, top=0.35)
    axes = figure.add_subplot()
    for index, (_, record) in enumerate(records):
        left = 0.0
        for phase in record.phases:
            axes.barh(index, phase.seconds, left=left, height=0.7, color=_phase_color(phase.phase),
                      hatch="//" if phase.blocking is False else None, edgecolor="white", linewidth=0.3)
            left += phase.seconds
    axes.set_yticks(range(len(records)), [label for label, _ in records], fontsize=9)
    axes.invert_yaxis()
    _style(axes, "Where each save's and load's time went (its slowest rank)", "seconds", "")
    axes.grid(False, axis="y")
    _phase_legend(figure, list(dict.fromkeys(phase.phase for _, record in records for phase in record.phases)))
    return _svg(figure)


def plot_bandwidth(report: Report) -> str | None:
    saves = report.saves or []
    loads = report.every_load
    first = _first_save_index(report)
    bars = [(f"save {_label(s.iteration)}", s.bandwidth, FIRST_SAVE_COLOR if i == first else BLOCK_COLOR)
            for i, s in enumerate(saves)]
    repeated = len({x.iteration for x in loads}) < len(loads)
    bars += [(f"load {_label(x.iteration)}" + (f" #{i}" if repeated else ""), x.bandwidth, LOAD_COLOR)
             for i, x in enumerate(loads, 1)]
    if not any(p.number(value) is not None for _, value, _ in bars):
        return None
    figure = _figure(11, 3.0 + _bottom(len(bars)) - 0.45, bottom=_bottom(len(bars)))
    axes = figure.add_subplot()
    axes.bar([label for label, _, _ in bars], [p.number(v) or 0.0 for _, v, _ in bars],
             color=[color for _, _, color in bars], width=0.6)
    top = max(p.number(v) or 0.0 for _, v, _ in bars)
    if first is not None:
        from matplotlib.patches import Patch

        axes.legend(handles=[Patch(color=FIRST_SAVE_COLOR, label=f"first save: {p.first_save_reason(report)[0]}, "
                                                                  "counted apart")])
        axes.add_artist(axes.get_legend())
        steady = report.steady_median("bandwidth")
        if steady is not None:
            axes.axhline(steady, color=BLOCK_COLOR, linestyle=":", linewidth=1.4,
                         label=f"steady save ({STEADY}): {steady:,.1f} MiB/s")
    measured = report.storage_baseline
    for direction, style, baseline in (("write", "-", measured and measured.write_bandwidth),
                                       ("read", "--", measured and measured.read_bandwidth)):
        if baseline is not None:
            top = max(top, baseline)
            axes.axhline(baseline, color=BASELINE_COLOR, linestyle=style, linewidth=1.6,
                         label=f"storage baseline, {direction}: {baseline:,.1f} MiB/s")
    _style(axes, "Bandwidth per save and load", "", "MiB/s")
    handles = axes.get_legend_handles_labels()[0]
    if first is not None:
        handles = [*axes.get_legend().legend_handles, *handles]
        axes.get_legend().remove()
    if handles:  # above the bars and lines, never on them
        axes.set_ylim(0, top * 1.35)
        axes.legend(handles=handles, frameon=False, fontsize=9, loc="upper left", ncols=2)
    _rotate(axes, len(bars))
    return _svg(figure)


def _first_save_index(report: Report) -> int | None:
    """Where in `saves` the first save is, when it is counted apart and was unusually slow."""
    for index, save in enumerate(report.saves or []):
        if save.complete:
            return index if any(r.startswith("first save") for r in p.save_remarks(report, save)) else None
    return None


def _rotate(axes, count: int) -> None:
    if count > 8:
        for label in axes.get_xticklabels():
            label.set_rotation(45)
            label.set_horizontalalignment("right")


def plot_spread(report: Report, operations: list[TimedOperation]) -> str | None:
    """Per save, the fastest and slowest rank's block and total time (every rank's when the events are
    at hand), the slowest rank named."""
    saves = [s for s in report.saves or [] if s.total_time_per_rank or s.block_time_per_rank]
    if not saves:
        return None
    figure = _figure(11, 3.6 + _bottom(len(saves)) - 0.45, bottom=_bottom(len(saves)))
    axes = figure.add_subplot()
    per_rank: dict[tuple, list[float]] = defaultdict(list)
    occurrence: dict[tuple, int] = defaultdict(int)
    for op in operations:
        if op.kind == "save":
            occurrence[(op.rank, op.iteration)] += 1
            for part, seconds in (("block", op.block_s), ("total", op.total_s)):
                if seconds is not None:
                    per_rank[(op.iteration, occurrence[(op.rank, op.iteration)], part)].append(seconds)
    seen: dict = defaultdict(int)
    for x, save in enumerate(saves):
        seen[save.iteration] += 1
        for part, spread, color, shift in (("block", save.block_time_per_rank, BLOCK_COLOR, -0.12),
                                           ("total", save.total_time_per_rank, TOTAL_COLOR, 0.12)):
            if spread is None or spread.max is None:
                continue
            points = per_rank.get((save.iteration, seen[save.iteration], part), [])
            if points:
                axes.scatter([x + shift] * len(points), points, s=10, color=color, alpha=0.45, linewidths=0)
            axes.vlines(x + shift, spread.min, spread.max, color=color, linewidth=2.2)
            axes.scatter([x + shift, x + shift], [spread.min, spread.max], color=color, s=22, zorder=3)
            if part == "total":
                axes.annotate(f"r{spread.max_rank}", (x + shift, spread.max), textcoords="offset points",
                              xytext=(4, 2), fontsize=8, color="#566573")
    axes.set_xticks(range(len(saves)), [f"save {_label(s.iteration)}" for s in saves])
    axes.set_xlim(-0.6, len(saves) - 0.4)
    times = [v for s in saves for spread in (s.block_time_per_rank, s.total_time_per_rank) if spread
             for v in (spread.min, spread.max) if p.number(v)]
    logarithmic = bool(times) and max(times) > 10 * min(times)
    if logarithmic:  # one slow save (the first's start-up) would flatten every other save to the floor
        from matplotlib.ticker import FuncFormatter

        axes.set_yscale("log")
        axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    else:
        axes.set_ylim(bottom=0)
    scale = " (log scale: the saves differ by more than 10x)" if logarithmic else ""
    _style(axes, f"Per-rank spread: fastest to slowest rank{scale} (label: the slowest rank)", "", "seconds")
    from matplotlib.lines import Line2D

    parts = ((BLOCK_COLOR, "block time, a rank"), (TOTAL_COLOR, "total time, a rank"))
    axes.legend(handles=[Line2D([], [], color=color, marker="o", linestyle="none", markersize=5, label=label)
                         for color, label in parts],
                frameon=False, fontsize=9, loc="upper right")
    _rotate(axes, len(saves))
    return _svg(figure)


def plot_memory(report: Report) -> str | None:
    """Peak RSS per save and load, against what the rank holds of the checkpoint (its bytes / the ranks):
    how much memory a save needs beyond the state it writes."""
    loads = report.every_load
    bars = [(f"save {_label(s.iteration)}", s, PALETTE[4]) for s in report.saves or []]
    bars += [(f"load {_label(x.iteration)}" + (f" ({i})" if len(loads) > 1 else ""), x, LOAD_COLOR)
             for i, x in enumerate(loads, 1)]
    bars = [(label, record.peak_rss_bytes, record, color) for label, record, color in bars
            if p.number(record.peak_rss_bytes)]
    if not bars:
        return None
    figure = _figure(11, 3.0 + _bottom(len(bars)) - 0.45, bottom=_bottom(len(bars)))
    axes = figure.add_subplot()
    axes.bar([label for label, *_ in bars], [rss / p.MIB for _, rss, _, _ in bars],
             color=[color for *_, color in bars], width=0.6)
    shares = [record.bytes / record.ranks / p.MIB for _, _, record, _ in bars
              if p.number(record.bytes) and record.ranks]
    if shares:
        share = max(shares)
        axes.axhline(share, color=TOTAL_COLOR, linestyle="--", linewidth=1.4,
                     label=f"a rank's share of the checkpoint: {share:,.1f} MiB")
        highest = max(rss for _, rss, _, _ in bars) / p.MIB
        axes.set_ylim(0, max(highest, share) * 1.3)
        axes.legend(frameon=False, fontsize=9, loc="upper left")
        title = f"Peak resident memory of the highest rank: up to {highest / share:.1f}x its share of the checkpoint"
    else:
        title = "Peak resident memory of the highest rank per save and load"
    _style(axes, title, "", "MiB")
    _rotate(axes, len(bars))
    return _svg(figure)


def plot_preflight(preflight: Comms) -> str | None:
    results = preflight.results
    if not results:
        return None
    figure = _figure(11, 3.4, bottom=0.6)
    axes = figure.add_subplot()
    by_collective: dict[str, list] = defaultdict(list)
    for row in results:
        by_collective[row.collective].append(row)
    for index, (name, rows) in enumerate(by_collective.items()):
        rows.sort(key=lambda r: r.size)
        axes.plot([r.size for r in rows], [r.busbw_gbps for r in rows], marker="o", markersize=3,
                  color=PALETTE[index % len(PALETTE)], label=name)
    axes.set_xscale("log", base=2)
    sizes = sorted({row.size for row in results})
    shown = sizes[::max(1, -(-len(sizes) // 10))]
    axes.set_xticks(shown, [p.size(size) for size in shown])
    axes.minorticks_off()
    _style(axes, f"Comms preflight: bus bandwidth ({preflight.dist_backend}, {preflight.world_size} ranks)",
           "message size (bytes)", "busbw (GB/s)")
    axes.legend(frameon=False, fontsize=9)
    return _svg(figure)


# --- HTML --------------------------------------------------------------------------------------------


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def projection_html(projection: Projection) -> str:
    """The projection's headline, each time's terms and the engine's global steps at the job's size."""
    content = f'<p class="hint">{_e(pp.projection_title(projection))}</p>'
    content += _pairs_table(pp.projection_rows(projection), "projection-table")
    bought = pp.purchase_rows(projection)
    if bought:
        content += ("<h3>What each storage buys</h3><p class=\"hint\">One computation of the global steps, priced "
                    "at each storage ceiling given.</p>"
                    + _grid_table(pp.PURCHASE_COLUMNS, bought, "projection-purchase-table", table_class="terms"))
    changes = pp.change_rows(projection)
    if changes:
        content += ("<h3>What to change</h3><p class=\"hint\">Each setting projected again from the same global "
                    "steps, the most effective first.</p>"
                    + _grid_table(pp.CHANGE_COLUMNS, changes, "projection-changes-table", table_class="terms"))
    settings = pp.setting_rows(projection)
    if settings:
        content += ("<h3>The checkpoint settings projected</h3><p class=\"hint\">The experiment's own, each with "
                    "the file it came from (or Megatron-LM's default).</p>"
                    + _grid_table(pp.SETTING_COLUMNS, settings, "projection-settings-table", table_class="terms"))
    for title, time, table_id in (("Save (a process's first)", projection.save, "projection-save-table"),
                                  ("Restart", projection.load, "projection-load-table")):
        if time is not None and time.terms:
            content += (f"<h3>{title}: {_e(pp.time_words(time))}</h3><p class=\"hint\">Global steps run one after "
                        "another; of the transfer limits (client, storage, requests) the slowest counts.</p>"
                        + _grid_table(pp.TERM_COLUMNS, pp.term_rows(time), table_id, table_class="terms"))
    steps = pp.step_rows(projection)
    if steps:
        content += ("<h3>The engine's global steps at the job's size</h3><p class=\"hint\">Computed here with the "
                    "engine's own code over every rank's inputs: CPU on one core of this machine; the bytes the "
                    "busiest host's network carries for each.</p>" + _grid_table(pp.STEP_COLUMNS, steps,
                                                                               "projection-steps-table"))
    return content + _notes(projection.notes)


def _pairs_table(rows: list[tuple[str, str]], table_id: str | None = None) -> str:
    attrs = f' id="{table_id}"' if table_id else ""
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f'<table class="pairs"{attrs}>{body}</table>'


def _grid_table(columns: list[str], rows: list[list[str]], table_id: str | None = None, raw: bool = False,
                table_class: str | None = None) -> str:
    attrs = (f' id="{table_id}"' if table_id else "") + (f' class="{table_class}"' if table_class else "")
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{cell if raw else _e(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table{attrs}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure_html(svg: str | None, caption: str, empty: str) -> str:
    if svg is None:
        return f'<p class="hint">{_e(empty)}</p>' if empty else ""
    return f"<figure>{svg}<figcaption>{_e(caption)}</figcaption></figure>"


def _flat(data: dict | None, prefix: str = "") -> list[tuple[str, str]]:
    rows = []
    for key, value in (data or {}).items():
        if isinstance(value, dict) and value:
            rows += _flat(value, f"{prefix}{key}.")
        else:
            rows.append((f"{prefix}{key}", p.fmt(value)))
    return rows


def _page(title: str, heading: str, meta: str, sections: list[tuple[str, str, str]]) -> str:
    nav = " ".join(f'<a href="#{sid}">{_e(name)}</a>' for sid, name, _ in sections)
    body = "".join(f'<section id="{sid}"><h2>{_e(name)}</h2>{content}</section>' for sid, name, content in sections)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(title)}</title><style>{CSS}</style></head>"
            f'<body><main><h1>{_e(heading)}</h1><p class="meta">{meta}</p><nav>{nav}</nav>{body}</main>'
            "</body></html>\n")


def render_report(report: Report | dict, operations: list[TimedOperation] | None = None,
                  source: str | None = None) -> str:
    """The HTML report of one report (any source); `operations` from `timeline` when at hand."""
    report = p.as_report(report)
    operations = operations or []
    run = report.run or RunSection()
    verified = report.verified
    verdict = ('<span class="good">verified</span>' if verified else '<span class="bad">verification failed</span>'
               if verified is False else "not verified")
    heading = f"Checkpoint benchmark: {p.run_title(report)}"
    meta = " · ".join(x for x in (_e(source or run.dir or ""), _e(run.status or ""), verdict) if x)
    columns = p.save_columns(report)
    rows = p.save_rows(report) + p.load_rows(report)
    sections = [("summary", "Summary",
                 _pairs_table(p.headline_rows(report), "summary-table")
                 + _grid_table(columns, rows, "saves-table"))]
    if report.projection is not None:
        sections.append(("projection", "Projection of the whole job", projection_html(report.projection)))
    advice = report.advice
    if advice is not None:
        content = _pairs_table(p.advice_rows(advice), "advice-table")
        if advice.what_if:
            content += (f"<h3>What if the job were larger</h3><p class=\"hint\">{_e(p.what_if_basis(advice))}; job "
                        "MTBF = GPU MTTF / GPUs.</p>" + _grid_table(p.WHAT_IF_COLUMNS, p.what_if_rows(advice),
                                                                     "what-if-table"))
        if advice.purchase:
            content += ("<h3>What each storage buys</h3><p class=\"hint\">C, R, Daly's interval and the goodput "
                        "there, ranges where the projection's figures are bounds.</p>"
                        + _grid_table(p.PURCHASE_ADVICE_COLUMNS, p.purchase_advice_rows(advice),
                                      "purchase-advice-table"))
        content += _notes(advice.notes)
        content += f'<p class="hint">{_e(advice.model or "")}</p>'
        sections.append(("advice", "Checkpoint interval advice", content))
    sections.append(("timeline", "Timeline", _figure_html(
        plot_timeline(report, operations),
        "Each bar is one save or load of one rank; a save's dark part blocks training, its light part is written "
        "in the background (async saves) until the checkpoint is complete on storage. x: no end recorded."
        + _unplaced_words(report, operations), "No save or load to draw.") + _figure_html(
        plot_operations(operations), "Each save and load on a time axis of its own start (the first "
                                     f"{MAX_PANELS}): one band per checkpoint, one bar per rank (rank 0 on top).",
        "")))
    phases = p.phase_table(report)
    if phases is not None:
        sections.append(("phases", "Phases", _figure_html(
            plot_phases(report), "Each save's and load's phases, its slowest rank's, in the order they ran (hatched: "
                                 "an async save's background part). They sum to its time; docs/report.md says what "
                                 "each phase holds for each engine.", "") + _grid_table(*phases, "phases-table")))
    sections.append(("bandwidth", "Bandwidth", _figure_html(
        plot_bandwidth(report), "Bytes of the checkpoint folder / the save's total time (loads: / load time); the "
                                "line is the storage's own bandwidth measured with the same I/O shape, when measured.",
        "No bandwidth: the checkpoint sizes are unknown (see the notes).")))
    sections.append(("spread", "Per-rank spread", _figure_html(
        plot_spread(report, operations), "A save's time is its slowest rank's; a wide spread points at one slow rank "
                                         "or node. Dots: every rank, when the events are at hand.",
        "No per-rank times.")))
    memory = plot_memory(report)
    if memory is not None:
        sections.append(("memory", "Memory", _figure_html(
            memory, "Peak RSS of the highest rank from each operation's start to its end (the kernel's high-water "
                    "mark; a writer in another process is not in it), against the checkpoint's bytes / its ranks.",
            "")))
    preflight = report.preflight or report.comms  # a --preflight pass, or a comms run's sweep
    if preflight is not None:
        table = _grid_table(*p.comms_table(preflight), "preflight-table")
        name = "Comms preflight" if report.preflight else "Comms"
        sections.append(("preflight", name, _figure_html(
            plot_preflight(preflight), "Collectives on float32 messages just before the benchmark.",
            "No preflight results.") + table))
    training = report.training
    if training is not None:
        content = _pairs_table(p.training_rows(training), "training-table")
        if training.around_saves:
            costs = per_save_training_cost(dataclasses.asdict(training))  # report.advice reads the section as JSON
            content += _grid_table(["iteration", "iteration time s (with the save)", "next iteration s",
                                    "cost of this save s", "why unusual"],
                                   [[p.fmt(r.iteration), p.fmt(r.iteration_time, 4), p.fmt(r.next_iteration_time, 4),
                                     p.fmt(costs.get(r.iteration), 4),
                                     "first save: counted apart by the advice" if i == 0 else ""]
                                    for i, r in enumerate(training.around_saves)])
            content += ('<p class="hint">The cost of a save: its iteration and the next (when that one saves '
                        "nothing) beyond the median iteration without saves. The advice's checkpoint cost C is the "
                        "median of these after the first save, sync or async alike.</p>")
        sections.append(("training", "Training impact", content))
    if report.mlperf is not None:
        sections.append(("mlperf", "MLPerf Storage", _mlperf(report.mlperf)))
    if report.repeat_stats is not None:
        sections.append(("repeats", "Repeats", _repeats(report)))
    config = {key: getattr(report, key) for key in CONFIG_KEYS}
    config.update(report.config or {})
    sections.append(("configuration", "Configuration", _pairs_table(_flat(config), "config-table")
                     + "<h3>What the figures are</h3>" + _pairs_table(_flat(_fields(report.measurement)))
                     + (("<h3>Storage baseline</h3>" + _pairs_table(_flat(_fields(report.storage_baseline))))
                        if report.storage_baseline is not None else "")))
    sections.append(("environment", "Environment", _pairs_table(_flat(report.environment), "environment-table")
                     if report.environment else '<p class="hint">Not known (a log does not describe the '
                                                "machine it ran on).</p>"))
    sections.append(("notes", "Notes", _notes(report.notes) or '<p class="hint">None.</p>'))
    return _page(f"ckpt-bench: {p.run_title(report)} ({run.dir or source or 'no run directory'})", heading, meta,
                 sections)


def _mlperf(mlperf: MLPerf) -> str:
    """A workload run's MLPerf figures under both definitions, and whether it compares with published results."""
    content = _pairs_table(p.mlperf_rows(mlperf), "mlperf-table")
    if mlperf.comparable is not None:
        content += ("<h3>Could it stand beside published MLPerf Storage results?</h3>"
                    + _grid_table(p.COMPARABLE_COLUMNS, p.comparable_rows(mlperf.comparable), "comparable-table")
                    + f'<p class="hint">{_e(mlperf.comparable.rules or "")}</p>')
    return content + _pairs_table(_flat(mlperf.definitions))


def _repeats(report: Report) -> str:
    """A --repeat series: each figure's spread over the repetitions, then each repetition's figures."""
    rows = []
    for metric in HEADLINE:
        figures = getattr(report.repeat_stats, metric.key)
        n, median, low, high, cv = (None,) * 5 if figures is None else \
            (figures.n, figures.median, figures.min, figures.max, figures.cv)
        rows.append([f"steady {metric.label}" if metric.steady_figure else metric.label,
                     *(p.fmt(value, metric.digits) for value in (n, median, low, high)), p.percent(cv, 1)])
    per_repetition = [[str(r.repetition), str(r.status), *(p.fmt(getattr(r, m.key), m.digits) for m in HEADLINE)]
                      for r in report.repeats or []]
    return (_grid_table(["figure", "n", "median", "min", "max", "cv"], rows, "repeats-table")
            + _grid_table(["repetition", "status", *(f"steady {m.column}" if m.steady_figure else m.column
                                                     for m in HEADLINE)], per_repetition, "repetitions-table")
            + '<p class="hint">Each repetition in fresh processes; its figure is its steady save (the median of its '
              "saves after its first) and its load.</p>")


def _fields(section) -> dict | None:
    """A typed section as its fields and values, to be shown whole."""
    return None if section is None else dataclasses.asdict(section)


def _notes(notes) -> str:
    if not notes:
        return ""
    return '<ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>"


# --- sweeps -----------------------------------------------------------------------------------------

def plot_sweep_parameter(results: SweepResults, parameter: str) -> str | None:
    """Every metric against one swept parameter; one line per combination of the other parameters."""
    lists = p.swept(results)
    values = [str(v) for v in lists.get(parameter, [])]
    numeric = all(p.number(v) is not None for v in lists.get(parameter, []))
    others = [k for k in lists if k != parameter]
    jobs = [j for j in results.jobs if j.report is not None]
    if not jobs:
        return None
    series: dict[str, list[JobRecord]] = defaultdict(list)
    for job in jobs:
        name = (str(job.params.get(others[0])) if len(others) == 1
                else ", ".join(f"{k}={job.params.get(k)}" for k in others) or "all")
        series[name].append(job)
    figure = _figure(11, 6.2, left=0.6, right=0.2, top=0.35, bottom=0.55, wspace=0.55, hspace=0.85, columns=3,
                     rows=2)
    axes_list = figure.subplots(2, 3).flatten()
    for axes, metric in zip(axes_list, HEADLINE, strict=False):
        for index, (name, members) in enumerate(series.items()):
            points = sorted(((values.index(str(j.params.get(parameter))), j.report.compared(metric))
                             for j in members if p.number(j.report.compared(metric)) is not None
                             and str(j.params.get(parameter)) in values), key=lambda xy: xy[0])
            if points:  # a line only between numbers: torch_dist -> torch is no trend
                axes.plot([x for x, _ in points], [y for _, y in points], marker="o", markersize=5,
                          linestyle="-" if numeric else "none", color=PALETTE[index % len(PALETTE)], label=name)
        axes.set_xticks(range(len(values)), values)
        axes.set_xlim(-0.4, len(values) - 0.6)
        axes.set_ylim(bottom=0)
        _style(axes, f"steady {metric.label}" if metric.steady_figure else metric.label, parameter, "")
    legend_axes = axes_list[-1]
    legend_axes.axis("off")
    handles, labels = axes_list[0].get_legend_handles_labels()
    for axes in axes_list[1:-1]:  # a series without a point in the first metric still gets its entry
        for handle, label in zip(*axes.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    if handles and len(handles) <= 16:
        legend_axes.legend(handles, labels, loc="center left", frameon=False, fontsize=9,
                           title=", ".join(others) if others else None, title_fontsize=9)
    return _svg(figure)


def render_sweep(results: SweepResults | dict) -> str:
    """`sweep_report.html` of a sweep's run_results.json."""
    results = p.as_results(results)
    root = Path(results.dir)
    sections = []
    for parameter in p.swept(results):
        sections.append((f"by-{_slug(parameter)}", f"Metrics by {parameter}", _figure_html(
            plot_sweep_parameter(results, parameter), f"Each metric against {parameter}; one colour per combination "
                                                      "of the other swept parameters (lines only between numeric "
                                                      "values).", "No job has a report yet.")))
    columns = [*p.sweep_columns(results), "report"]
    rows = []
    for job, row in zip(results.jobs, p.sweep_rows(results), strict=True):
        link = ""
        run_dir = job.run_dir or (job.report.run.dir if job.report is not None and job.report.run else None)
        if run_dir and (Path(run_dir) / REPORT_HTML).is_file():
            target = os.path.relpath(Path(run_dir) / REPORT_HTML, root)
            link = f'<a href="{_e(target)}">report.html</a>'
        rows.append([*(_e(cell) for cell in row), link])
    errors = [f"job {job.index}: {job.error}" for job in results.jobs if job.error]
    sections.append(("jobs", "Jobs", _grid_table(columns, rows, "jobs-table", raw=True) + _notes(errors)))
    peak = p.sweep_peak_table(results)
    if peak is not None:
        sections.append(("storage-peak", "The storage's own peak", _grid_table(*peak, "peak-table")))
    phases = p.sweep_phase_table(results)
    if phases is not None:
        sections.append(("phases", "Phases", _grid_table(*phases, "phases-sweep-table")
                         + '<p class="hint">Each phase\'s median seconds over a job\'s steady saves, its slowest '
                           "rank's (docs/report.md, \"Phases\").</p>"))
    mlperf = p.sweep_mlperf_table(results)
    if mlperf is not None:
        sections.append(("mlperf", "MLPerf Storage", _grid_table(*mlperf, "mlperf-sweep-table")
                         + f'<p class="hint">{_e(p.MLPERF_COLUMNS_MEAN)}. Comparable: each job\'s verdict '
                           "against MLPerf Storage's rules (its report.html says why).</p>"))
    sections.append(("sweep", "Sweep", _pairs_table(_flat(results.sweep), "sweep-table")))
    sections.append(("environment", "Environment", _pairs_table(_flat(results.environment), "environment-table")))
    counts = ", ".join(f"{n} {status}" for status, n in results.summary.items())
    meta = f"{_e(results.dir)} · {_e(counts)} · updated {_e(results.updated)}"
    return _page(f"ckpt-bench sweep {results.name}", f"Sweep {results.name}", meta, sections)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


# --- writing ----------------------------------------------------------------------------------------


def enabled() -> bool:
    return os.environ.get(HTML_ENV, "1") != "0"


def write_run_html(run_dir: str | os.PathLike, report: Report | dict) -> Path | None:
    """`<run dir>/report.html`; a failure to draw is one line on stderr, never the run's failure."""
    if not enabled():
        return None
    path = Path(run_dir) / REPORT_HTML
    return _write(path, lambda: render_report(report, run_timeline(run_dir)))


def write_sweep_html(root: str | os.PathLike, results: SweepResults | dict) -> Path | None:
    """`<sweep dir>/sweep_report.html`, written with run_results.json (ckpt_bench.sweep.run.ResultsWriter)."""
    if not enabled():
        return None
    return _write(Path(root) / SWEEP_HTML, lambda: render_sweep(results))


def _write(path: Path, render) -> Path | None:
    try:
        write_atomic(path, render())  # whole or not at all: never a truncated page on a full disk
        return path
    except Exception as error:  # the report.json is what counts: say it, go on
        print(f"could not write {path}: {type(error).__name__}: {' '.join(str(error).split())[:300]}",
              file=sys.stderr, flush=True)
        return None


def load_results(path: str | os.PathLike) -> dict:
    """A sweep directory's results (ckpt_bench.core.rundir.sweep_results_file)."""
    results = sweep_results_file(path)
    if results is None:
        raise FileNotFoundError(f"no {' or '.join(SWEEP_RESULTS_FILES)} in {path}")
    return json.loads(results.read_text())
