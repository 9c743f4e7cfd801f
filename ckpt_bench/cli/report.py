"""Report checkpoint saves and loads from logs: `python ckpt_report.py --help`.

    python ckpt_report.py PATH... [--ckpt-dir DIR] [--output report.json] [--format json|table] [--html FILE]
                          [--mtbf-hours H | --gpu-mttf-hours H [--gpus N]] [--restart-overhead S]
                          [--checkpoint-budget PCT] [--storage-write-gbps GB/S ...: the projection's figures]
    python ckpt_report.py --compare A B [C ...] [--format json|table]

PATH: a Megatron-LM stdout log (also under `srun --label`), a Megatron-DeepSpeed, NeMo 2 or torchtitan log
(or a snippet of one), a Primus log file or folder (logs/pre_trainer/), a folder of logs (read below it,
by content), a run directory of ours, or a sweep directory; the format is found by content. Logs that
are not one job's are reported as runs apart (`runs`). On a terminal the summary is printed, JSON when
piped (`--format` chooses). `--compare` puts the reports of run directories, report.json files and sweep
directories side by side. Errors are one line on stderr, never a traceback, and exit 2 (bad input: bad usage,
a file that cannot be read, logs with no checkpoint event). Lines that cannot be read are skipped and
counted in the report's notes.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ckpt_bench.cli.common import click_option, entry_point, fail, given_options, wants_table
from ckpt_bench.core.collector import collector_paused
from ckpt_bench.core.errors import ConfigError, ReportError, SchemaError
from ckpt_bench.core.rundir import sweep_results_file
from ckpt_bench.projection.inputs import ProjectionOptions
from ckpt_bench.report.advice import AdviceOptions, add_advice
from ckpt_bench.report.assembly import log_report_and_operations, to_json


def _advice_options(command):
    """The advice's options and the projection's (a run directory's projection of the whole job, again with
    other figures)."""
    for name, flag in reversed({**AdviceOptions.flags(), **ProjectionOptions.flags()}.items()):
        command = click_option(name, flag, option=click.option)(command)
    return command


def _with_projection(report: dict, figures: dict) -> dict:
    """A run directory's report with its projection of the whole job: projected again where `figures` (those
    given on the command line) replace the run's own, or where the report has none yet."""
    run_dir = (report.get("run") or {}).get("dir")
    if not run_dir or (not figures and "projection" in report):
        return report
    from ckpt_bench.projection import add_projection  # the model and its engines: only for a run directory

    return add_projection(report, Path(run_dir), figures)


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text)
    except OSError as error:
        fail(f"cannot write {path}: {error.strerror or error}")


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.argument("paths", nargs=-1)
@click.option("--primus-log-dir", multiple=True, help="A Primus log folder (same as giving it as PATH).")
@click.option("--ckpt-dir", help="Checkpoint folder to measure iter_* sizes (and so bandwidth) from.")
@click.option("--output", type=click.Path(dir_okay=False), help="Also write the JSON report here.")
@click.option("--format", "output_format", type=click.Choice(["json", "table"]), default=None,
              help="What to print: the summary (table; the default on a terminal) or JSON (the default when piped).")
@click.option("--html", "html_file", type=click.Path(dir_okay=False),
              help="Also write a self-contained HTML report here (of logs, a run directory or a sweep directory).")
@click.option("--compare", is_flag=True, help="Compare PATH... (run directories, report.json files, sweep "
              "directories): every headline metric side by side, with its ratio to the first.")
@_advice_options
def report(paths, primus_log_dir, ckpt_dir, output, output_format, html_file, compare, **advice_values):
    """Build the checkpoint report of PATH... (log files, Primus log folders, a run directory or a sweep
    directory), or compare reports."""
    try:
        figures = {name: advice_values.pop(name) for name in ProjectionOptions.flags()}
        ProjectionOptions.from_values(figures)  # checked now: one line for a bad figure
        # Only the figures given replace the run's own (--rank-costs-budget's default is no choice of the user's).
        given = given_options(click.get_current_context())
        figures = {name: value for name, value in figures.items() if name in given}
        advice = AdviceOptions.from_values(advice_values)
        if compare:
            _compare(paths, primus_log_dir, ckpt_dir, html_file, advice, figures, output, output_format)
        elif len(paths) == 1 and not primus_log_dir and sweep_results_file(paths[0]) is not None:
            _sweep(Path(paths[0]), html_file, output, output_format)
        else:
            _report([*paths, *primus_log_dir], ckpt_dir, html_file, advice, figures, output, output_format)
    except (ReportError, ConfigError, SchemaError) as error:  # SchemaError: a report.json of another version
        fail(str(error), getattr(error, "exit_code", 2))


def _report(paths, ckpt_dir, html_file, advice, figures, output, output_format) -> None:
    with collector_paused():
        data, operations = log_report_and_operations(paths, ckpt_dir=ckpt_dir)
        runs = data.get("runs")  # logs of several runs: a report of each (report.schema.LogRuns)
        if runs is not None and html_file:
            raise ReportError(f"--html draws one run; these logs are {len(runs)} runs: give the logs of one of them")
        for one in runs or [data]:
            add_advice(_with_projection(one, figures), advice)
        text = to_json(data)
    if output:
        _write(output, text + "\n")
    if runs is not None:
        if wants_table(output_format):
            from ckpt_bench.present.summary import print_runs
            from ckpt_bench.report.schema import LogRuns

            print_runs(LogRuns.from_json(json.loads(text)))
        else:
            click.echo(text)
        return
    if not (html_file or wants_table(output_format)):
        click.echo(text)
        return
    from ckpt_bench.report.schema import Report  # the types: for a summary or a page, not for JSON

    report = Report.from_json(json.loads(text))  # as written (a non-finite number is null), typed
    if html_file:
        from ckpt_bench.present import html as html_report

        run_dir = report.run.dir if report.run else None
        rows = html_report.run_timeline(run_dir) if run_dir else html_report.timeline(operations)
        _write(html_file, html_report.render_report(report, rows, source=", ".join(map(str, paths))))
    if wants_table(output_format):  # the same summary as ckpt_launch.py's
        from ckpt_bench.present.summary import print_report

        print_report(report)
    else:
        click.echo(text)


def _sweep(folder: Path, html_file, output, output_format) -> None:
    from ckpt_bench.present.html import load_results, render_sweep
    from ckpt_bench.report.sweep_results import SweepResults
    from ckpt_bench.sweep.run import summary

    try:
        data = load_results(folder)
        results = SweepResults.from_json(data)
    except (OSError, ValueError, TypeError) as error:  # TypeError: a key the results need is missing
        raise ReportError(f"cannot read the sweep results in {folder}: {error}") from None
    text = to_json(summary(results))
    if output:
        _write(output, text + "\n")
    if html_file:
        _write(html_file, render_sweep(results))
    if wants_table(output_format):
        from ckpt_bench.present.summary import print_sweep

        print_sweep(json.loads(text), results)
    else:
        click.echo(text)


def _compare(paths, primus_log_dir, ckpt_dir, html_file, advice, figures, output, output_format) -> None:
    from ckpt_bench.benchmark.registry import FRAMEWORKS
    from ckpt_bench.present.compare import compare, load_sources

    for given, option in ((primus_log_dir, "--primus-log-dir"), (ckpt_dir, "--ckpt-dir"), (html_file, "--html")):
        if given:
            raise ReportError(f"{option} applies to one report, not to --compare")
    if len(paths) < 2 and not (paths and Path(paths[0]).is_dir() and sweep_results_file(paths[0])):
        raise ReportError(f"--compare needs at least two reports (run directories, report.json files or sweep "
                          f"directories; a sweep directory alone compares its jobs); got {len(paths)}")
    sources = [source for path in paths for source in load_sources(path)]
    for source in sources:
        add_advice(_with_projection(source.report, figures), advice)
    comparison = compare(sources, FRAMEWORKS)
    text = to_json(comparison.to_json())
    if output:
        _write(output, text + "\n")
    if wants_table(output_format):
        from ckpt_bench.present.summary import print_comparison

        print_comparison(comparison)
    else:
        click.echo(text)


def main(argv: list[str] | None = None) -> None:
    """The `ckpt-report` entry point."""
    entry_point(report, argv)
