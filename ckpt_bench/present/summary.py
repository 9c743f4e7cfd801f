"""The terminal summary (`--format table`, the default on a terminal): rich tables of one report, of a
sweep and of a comparison. The rows come from `ckpt_bench.present.rows`; this only lays them out."""

from __future__ import annotations

import re
import shutil
import sys
from typing import TextIO

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ckpt_bench.present import projection as pp
from ckpt_bench.present import rows as p
from ckpt_bench.present.compare import Comparison
from ckpt_bench.report.schema import Advice, LogRuns, Projection, Report, RunSection
from ckpt_bench.report.sweep_results import SweepResults

WIDTH = 120  # when stdout is not a terminal (--format table into a pipe or a file)


def console(file: TextIO | None = None) -> Console:
    file = file or sys.stdout
    terminal = hasattr(file, "isatty") and file.isatty()
    width = None if terminal else max(WIDTH, shutil.get_terminal_size((WIDTH, 40)).columns)
    return Console(file=file, width=width, highlight=False, soft_wrap=False)


def _titled(title: str, table: Table) -> Group:
    """A table under its title (a title of its own line: a table's title wraps at the table's width)."""
    return Group(Text(title, style="bold"), table)


def _pairs(title: str, rows: list[tuple[str, str]]) -> Group:
    table = Table(show_header=False, box=box.SIMPLE, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for label, value in rows:
        table.add_row(label, value)
    return _titled(title, table)


# A cell that is a figure: no letters once its units are taken out (1,648.5; 66 %; 2.261 (0.130); 15.3 MiB;
# x1.20; yes).
_UNITS = re.compile(r"\b(?:[KMG]iB(?:/s)?|B|s|yes|no)\b|(?<![\w.])x(?=\d)")
_LETTER = re.compile(r"[A-Za-z]")
LABEL_WIDTH = 24  # a first column's labels up to this wide are never wrapped
UNBOUNDED = 100_000  # the width a table is measured at, to know how wide it would be unwrapped


def _is_figure(cell: str) -> bool:
    return not _LETTER.search(_UNITS.sub("", cell))


def _lines(text: str, width: int) -> str:
    """`text` wrapped at its spaces into lines of at most `width` (a longer word on a line of its own)."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "\n".join(lines)


class _Grid:
    """A titled table that fits the terminal: where it would not, its headers wrap at their words, a figure
    is never split (columns of figures keep their width; the label and text columns wrap), and the text of a
    `remarks` column becomes numbered notes under the table, each text once."""

    def __init__(self, title: str, columns: list[str], rows: list[list[str]], first_left: bool = True,
                 remarks: int | None = None, lettered: bool = False, text_columns: tuple[int, ...] = (),
                 label_width: int = LABEL_WIDTH):
        self.title, self.columns, self.rows = title, columns, rows
        self.first_left, self.remarks, self.lettered = first_left, remarks, lettered
        self.text_columns = text_columns  # words, left-aligned (numbers are right-aligned)
        self.label_width = label_width  # first-column labels up to this wide are never wrapped

    def _table(self, columns: list[str], rows: list[list[str]], compact: bool) -> Table:
        # Compact: one space between columns (the box's divider), none beside it.
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0) if compact else (0, 1))
        for index, column in enumerate(columns):
            cells = [row[index] for row in rows if row[index]]
            widest = max(map(len, cells), default=0)
            keep = all(map(_is_figure, cells)) if index else widest <= self.label_width
            header = _lines(column, max(widest, *map(len, column.split()))) if compact and keep else column
            left = (self.first_left and index == 0) or index in self.text_columns
            # A kept column is as wide as its widest figure and header line: measured so, it is never squeezed.
            least = max(widest, *map(len, header.splitlines())) if keep else None
            table.add_column(header, justify="left" if left else "right", no_wrap=keep, overflow="fold",
                             min_width=least)
        for row in rows:
            table.add_row(*row)
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions):
        yield Text(self.title, style="bold")
        table = self._table(self.columns, self.rows, compact=False)
        # It fits when its figures, its labels and its headers do, each on one line (text wraps at its words).
        if Measurement.get(console, options.update_width(UNBOUNDED), table).minimum <= options.max_width:
            yield table
            return
        columns, rows, notes = self.columns, self.rows, {}
        if self.lettered:  # long column names (a comparison's sources) as A, B, ..., each named once below
            notes = {f"{letter}: {name}": letter for letter, name in zip(LETTERS, columns[1:], strict=False)}
            columns = [columns[0], *LETTERS[:len(columns) - 1]]
        if self.remarks is not None:  # its texts as notes: [1] in the table, the text once below it
            columns = [*columns[:self.remarks], "note", *columns[self.remarks + 1:]]
            rows = [list(row) for row in rows]
            for row in rows:
                if row[self.remarks]:
                    row[self.remarks] = f"[{notes.setdefault(row[self.remarks], len(notes) + 1)}]"
        compact = self._table(columns, rows, compact=True)
        if self._fits(compact, console, options):
            yield compact
        else:  # still too wide: the columns in groups, each beside the labels, so that no header or figure is cut
            for group in self._groups(columns, rows, console, options):
                yield self._table([columns[0], *(columns[i] for i in group)],
                                  [[row[0], *(row[i] for i in group)] for row in rows], compact=True)
        if notes:
            yield Text("\n".join(text if self.lettered else f"[{number}] {text}" for text, number in notes.items())
                       + "\n")


    @staticmethod
    def _fits(table: Table, console: Console, options: ConsoleOptions) -> bool:
        return Measurement.get(console, options.update_width(UNBOUNDED), table).minimum <= options.max_width

    def _groups(self, columns: list[str], rows: list[list[str]], console: Console,
                options: ConsoleOptions) -> list[list[int]]:
        """The columns after the first, in consecutive groups as wide as the terminal takes beside it."""
        groups: list[list[int]] = []
        for index in range(1, len(columns)):
            trial = [*(groups[-1] if groups else []), index]
            table = self._table([columns[0], *(columns[i] for i in trial)],
                                [[row[0], *(row[i] for i in trial)] for row in rows], compact=True)
            if groups and self._fits(table, console, options):
                groups[-1].append(index)
            else:
                groups.append([index])
        return groups


def _grid(title: str, columns: list[str], rows: list[list[str]], first_left: bool = True,
          remarks: int | None = None, text_columns: tuple[int, ...] = (), label_width: int = LABEL_WIDTH) -> _Grid:
    return _Grid(title, columns, rows, first_left, remarks, text_columns=text_columns, label_width=label_width)


LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def report_renderables(report: Report) -> list[RenderableType]:
    """One report: its saves and load, the headline, the advice when asked, where its files are."""
    parts: list[RenderableType] = []
    if report.saves is None:  # a comms run, or a follower node of a multi-node run: no checkpoint
        return _without_checkpoints(report)
    columns = p.save_columns(report)
    rows = p.save_rows(report)
    loads = p.load_rows(report)
    if rows or loads:
        parts.append(_grid("Saves and load (seconds; slowest rank: the longest total time)", columns, rows + loads,
                           remarks=len(columns) - 1, text_columns=(1,) if "tier" in columns else ()))
    phases = p.phase_table(report)
    if phases:
        parts.append(_grid("Where the time went: phases (the slowest rank's; docs/report.md)", *phases))
    parts.append(_pairs("Summary", p.headline_rows(report)))
    if report.mlperf is not None:
        parts.append(_pairs("MLPerf Storage's figures (docs/workloads.md)", p.mlperf_rows(report.mlperf)))
    if report.projection is not None:
        parts += projection_renderables(report.projection)
    if report.advice is not None:
        parts += advice_renderables(report.advice)
    if report.notes:
        parts.append(_notes("notes:\n", report.notes))
    return parts


def _notes(title: str, notes: list[str]) -> Text:
    return Text(title + "\n".join(f"  - {note}" for note in notes))


def _without_checkpoints(report: Report) -> list[RenderableType]:
    run = report.run or RunSection()
    parts: list[RenderableType] = [_pairs("Summary", [("status", f"{run.status} ({run.backend or p.NONE})")])]
    comms = report.comms
    if comms is not None:
        parts.append(_grid(f"Collectives ({comms.dist_backend}, {comms.world_size} ranks; time: mean per op on the "
                           "slowest rank; GB/s = 1e9 bytes/s)", *p.comms_table(comms)))
    if report.notes:
        parts.append(_notes("notes:\n", report.notes))
    return parts


def projection_renderables(projection: Projection) -> list[RenderableType]:
    """The whole job's save and restart: the headline, each time's terms, the engine's global steps."""
    parts: list[RenderableType] = [_pairs(pp.projection_title(projection), pp.projection_rows(projection))]
    bought = pp.purchase_rows(projection)
    if bought:
        parts.append(_grid("What each storage buys (one computation of the global steps, priced at each ceiling)",
                           pp.PURCHASE_COLUMNS, bought, text_columns=(1, 2, 3)))
    changes = pp.change_rows(projection)
    if changes:
        parts.append(_grid("What to change (each projected again with that setting, the most effective first)",
                           pp.CHANGE_COLUMNS, changes, text_columns=(1, 2, 3), label_width=48))
    settings = pp.setting_rows(projection)
    if settings:
        parts.append(_grid("The checkpoint settings projected (the experiment's, each with where it came from)",
                           pp.SETTING_COLUMNS, settings, text_columns=(2,)))
    for title, time in (("save (a process's first)", projection.save), ("restart", projection.load)):
        if time is not None and time.terms:
            parts.append(_grid(f"Projected {title}: its terms (steps one after another; the slowest transfer "
                               "limit counts)", pp.TERM_COLUMNS, pp.term_rows(time), text_columns=(2,)))
    steps = pp.step_rows(projection)
    if steps:
        parts.append(_grid("The engine's global steps at the job's size (computed here with its own code)",
                           pp.STEP_COLUMNS, steps))
    if projection.notes:
        parts.append(_notes("", projection.notes))
    return parts


def advice_renderables(advice: Advice) -> list[RenderableType]:
    parts: list[RenderableType] = [_pairs("Checkpoint interval advice", p.advice_rows(advice))]
    if advice.what_if:
        parts.append(_grid(f"What if the job were larger ({p.what_if_basis(advice)}; job MTBF = GPU MTTF / GPUs)",
                           p.WHAT_IF_COLUMNS, p.what_if_rows(advice)))
    if advice.purchase:
        parts.append(_grid("What each storage buys: C, R, Daly's interval and the goodput there (ranges where the "
                           "projection's are bounds)", p.PURCHASE_ADVICE_COLUMNS, p.purchase_advice_rows(advice)))
    if advice.notes:
        parts.append(_notes("", advice.notes))
    return parts


def _print_paths(out: Console, rows: list[tuple[str, str]]) -> None:
    """Where the files are, one per line, never wrapped (a path is copied from here)."""
    out.print()
    for label, path in rows:
        out.print(f"{label}: {path}", soft_wrap=True, markup=False)


def print_report(report: Report | dict, file: TextIO | None = None) -> None:
    report = p.as_report(report)
    out = console(file)
    out.print(Group(*report_renderables(report)))
    _print_paths(out, p.where_rows(report))


def print_runs(report: LogRuns | dict, file: TextIO | None = None) -> None:
    """Logs of several runs (`ckpt_report.py` on logs that are not one job's): each run's summary under its
    sources, then why they are apart."""
    report = report if isinstance(report, LogRuns) else LogRuns.from_json(report)
    out = console(file)
    for index, run in enumerate(report.runs, 1):
        out.print(Text(f"Run {index} of {len(report.runs)}: {', '.join(run.sources or [])}", style="bold reverse"),
                  soft_wrap=True)
        out.print(Group(*report_renderables(run)))
        out.print()
    out.print(_notes("", report.notes), soft_wrap=True)


def print_sweep(summary: dict, results: SweepResults | dict, file: TextIO | None = None) -> None:
    """A sweep: one row per job, then where its files are (`summary`: sweep.run.summary's, not a report)."""
    results = p.as_results(results)
    where = [(label, summary[key]) for label, key in (("sweep directory", "dir"), ("results", "results"),
                                                       ("csv", "csv"), ("sweep_report.html", "report_html"))
             if summary.get(key)]
    counts = ", ".join(f"{n} {status}" for status, n in results.summary.items())
    out = console(file)
    out.print(_grid(f"Sweep {results.name}: {counts}", p.sweep_columns(results), p.sweep_rows(results)))
    peak = p.sweep_peak_table(results)
    if peak is not None:
        out.print(_grid("the storage's own peak (--storage-baseline, each job's I/O shape)", *peak))
    phases = p.sweep_phase_table(results)
    if phases is not None:
        out.print(_grid("phases: steady median seconds, the slowest rank's (docs/report.md)", *phases))
    mlperf = p.sweep_mlperf_table(results)
    if mlperf is not None:
        out.print(_grid(f"MLPerf Storage's figures ({p.MLPERF_COLUMNS_MEAN})", *mlperf))
    _print_paths(out, where)


def print_comparison(comparison: Comparison, file: TextIO | None = None) -> None:
    """`ckpt_report.py --compare`: every headline metric side by side, each column named by its source (on a
    narrow terminal by a letter, named under the table), with its ratio to the first."""
    sources = comparison.sources
    rows = []
    for metric in comparison.metrics:
        row = [metric]
        for index, source in enumerate(sources):
            value = p.fmt(source.metrics.get(metric), 2 if "bandwidth" in metric else 3)
            ratio = source.ratio_to_first.get(metric)
            row.append(value if index == 0 or ratio is None else f"{value}\nx{ratio:.2f}")
        rows.append(row)
    out = console(file)
    out.print(_Grid(f"Comparison (under each value: its ratio to the first source's, {sources[0].label})",
                    ["metric", *(source.label for source in sources)], rows, lettered=True))
    if comparison.meanings:
        out.print(Text("\n".join(f"  {name}: {meaning}" for name, meaning in comparison.meanings.items())))
    _print_paths(out, [(source.label, source.path) for source in sources])


PREVIEW_RANKS_SHOWN = 16
# The mappings and lists of a plan shown on a terminal, one line each (the JSON has every one): the layout, the
# spread of bytes over the ranks, the optimizer states' saved dtypes, the arguments the run will not act on.
PREVIEW_NESTED_SHOWN = ("parallel", "rank_bytes", "subset_rank_bytes", "optimizer_states_saved", "not_acted_on")
PREVIEW_LABELS = {"total_bytes": "bytes a save of the job", "run_bytes": "bytes a save of the ranks that run",
                  "rank_bytes": "bytes a rank of the job", "subset_rank_bytes": "bytes a rank of the subset"}


def _plan_fact(key: str, value: object) -> str:
    """A plan's value as text: a size where `key` counts bytes (not where it names a rank), a mapping as its
    items, a list as its items (a list of lists as its lists joined by '+': a pipeline rank's model chunks)."""
    if isinstance(value, dict):
        return ", ".join(f"{name.replace('_', ' ')} {_plan_fact(name if 'rank' in name else key, item)}"
                         for name, item in value.items())
    if isinstance(value, list):
        return " ".join("+".join(map(str, item)) if isinstance(item, list) else _plan_fact(key, item)
                        for item in value)
    return p.size(value) if key.endswith("bytes") and isinstance(value, int) else p.fmt(value)


def print_preview(preview: dict, file: TextIO | None = None) -> None:
    """What a run would do (`--plan`): its scalar facts, then per rank its bytes and files (the first
    ranks and the largest one, when there are many)."""
    out = console(file)
    facts = [(PREVIEW_LABELS.get(key) or key.removesuffix("_bytes").replace("_", " "),
              _plan_fact(key, value)) for key, value in preview.items()
             if not isinstance(value, (list, dict)) or key in PREVIEW_NESTED_SHOWN]
    out.print(_pairs("plan (nothing was run)", facts))
    layout = preview.get("layout") or []
    if layout:
        columns = list(layout[0])
        more = f"; the first {PREVIEW_RANKS_SHOWN}" if len(layout) > PREVIEW_RANKS_SHOWN else ""
        out.print(_grid(f"layout ({len(layout)} ranks{more})", columns,
                        [[str(rank[c]) for c in columns] for rank in layout[:PREVIEW_RANKS_SHOWN]]))
    ranks = preview.get("ranks") or []
    if ranks:
        shown = ranks[:PREVIEW_RANKS_SHOWN]
        largest = max(ranks, key=lambda r: r["bytes"], default=None)
        if largest is not None and largest not in shown:
            shown.append(largest)
        rows = [[str(r["rank"]), p.size(r["bytes"]), str(len(r["files"])), ", ".join(r["files"][:2])
                 + (f", ... ({len(r['files']) - 2} more)" if len(r["files"]) > 2 else "")] for r in shown]
        more = f"; the first {PREVIEW_RANKS_SHOWN} and the largest" if len(ranks) > PREVIEW_RANKS_SHOWN else ""
        of_job = (f" that runs ({len(ranks)} of the job's {preview['world_size']}" if preview.get("subset") else
                  f" ({len(ranks)} ranks")
        out.print(_grid(f"per rank{of_job}{more})", ["rank", "bytes", "files", "names"], rows))
    if preview.get("hosts"):
        out.print(_pairs(*pp.hosts_rows(preview["hosts"])))
    if preview.get("projection"):
        for part in projection_renderables(Projection.from_json(preview["projection"])):
            out.print(part)
    if preview.get("advice"):
        for part in advice_renderables(Advice.from_json(preview["advice"])):
            out.print(part)
