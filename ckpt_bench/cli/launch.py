"""The launcher's command line: `ckpt_launch.py` calls `main` here, and nothing else parses arguments.

The command is composed from the registry (`ckpt_bench.benchmark.registry.sections`): common options, then
the checkpoint and storage options, then a section per backend and framework mode, then cluster jobs
and sweeps. Parsed values become a typed `LaunchConfig` through `registry.build_launch`, the one
function that picks what runs (sweeps and `--emit` use it too).

Every user mistake is a `ConfigError` or a click usage error: one line on stderr and exit code 2,
never a traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
import cloup

from ckpt_bench.benchmark import registry
from ckpt_bench.cli.common import click_option, entry_point, fail, given_options, wants_table
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.options import Flag
from ckpt_bench.core.rundir import write_atomic
from ckpt_bench.launcher.resources import device_environment
from ckpt_bench.report.advice import plan_advice
from ckpt_bench.report.assembly import to_json
from ckpt_bench.report.sweep_results import SweepResults
from ckpt_bench.sweep.limits import DEFAULT_MAX_JOBS

SWEEP_SECTION = "Sweeps"  # options of this command itself: they drive sweeps, never a single run
PEER_OVERRIDES = "hydra_overrides"  # positional KEY=VALUE arguments: for another benchmark's sweep file only
PEER_OVERRIDES_HELP = ("HYDRA_OVERRIDES: only after --sweep FILE with an s3torchbenchmarking Hydra config: its "
                       "KEY=VALUE overrides as its scripts pass them, e.g. +path=./nvme/ s3.region=eu-west-1 "
                       "+world_size=2 (docs/peers.md).")


def _click_option(name: str, flag: Flag, readers: tuple[str, ...]):
    """The click option for a Flag; `readers` (the runners that read it, when not all) end its help."""
    tag = f" [{', '.join(readers)}]" if readers and set(readers) != set(registry.RUNNERS) else ""
    return click_option(name, flag, tag)


def _compose(callback):
    """`callback` as the cloup command of every registered option, grouped by section (decorators
    apply bottom-up: the last section first)."""
    callback = cloup.option_group(
        SWEEP_SECTION,
        cloup.option("sweep", "--sweep", type=click.Path(dir_okay=False),
                     help="Run the jobs of a sweep file (options given here too become fixed settings of every "
                     "job)."),
        cloup.option("resume", "--resume", type=click.Path(file_okay=False),
                     help="Resume a sweep directory: run only its jobs without a result."),
        cloup.option("max_jobs", "--max-jobs", type=click.IntRange(min=1),
                     help=f"Refuse a sweep of more jobs than this (default {DEFAULT_MAX_JOBS}; counted before any "
                     "job is built)."),
    )(callback)
    # After `--sweep FILE`, an s3torchbenchmarking config's Hydra overrides, as its scripts pass them.
    callback = click.argument(PEER_OVERRIDES, nargs=-1, metavar="[HYDRA_OVERRIDES]...")(callback)
    for title, flags, readers in reversed(registry.sections()):
        callback = cloup.option_group(title, *(_click_option(n, f, readers[n]) for n, f in flags.items()))(callback)
    return cloup.command(
        name="ckpt_launch.py",
        epilog=PEER_OVERRIDES_HELP,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
        show_constraints=False,
    )(callback)


def parse_argv(argv: list[str]) -> tuple[dict, set[str]]:
    """Parse one command line as `ckpt_launch.py` would: (option values, the options given); a usage
    error is a ConfigError with click's message."""
    try:
        with launch.make_context("ckpt_launch.py", list(argv)) as context:
            return dict(context.params), given_options(context)
    except click.ClickException as error:
        raise ConfigError(error.format_message()) from None


def check_output(output: str | None) -> None:
    """`--output FILE` must be writable before anything runs: a run of minutes must not end in a file it
    cannot write. ConfigError (one line) otherwise."""
    if not output:
        return
    path = Path(output).expanduser()
    folder = path.parent
    if path.is_dir():
        raise ConfigError(f"--output {output}: is a folder; give a file name")
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"--output {output}: cannot write there ({folder} is not a folder you can write to)")


def write_output(text: str, output: str | None) -> None:
    """`--output FILE`: written whole (`write_atomic`); a disk that refuses it now is one line, not a traceback."""
    if not output:
        return
    try:
        write_atomic(Path(output).expanduser(), text + "\n")
    except OSError as error:
        click.echo(f"error: could not write --output {output} ({error.strerror or error}): the report is on "
                   "stdout only", err=True)


def print_report(report: dict, output: str | None, output_format: str | None = None,
                 sweep_results: SweepResults | None = None) -> None:
    """The report on stdout (a summary table or JSON, see `wants_table`); `--output` always gets JSON."""
    text = to_json(report)
    write_output(text, output)
    if not wants_table(output_format):
        click.echo(text)
        return
    from ckpt_bench.present import summary

    if sweep_results is not None:
        summary.print_sweep(report, sweep_results)
    else:
        summary.print_report(report)


def print_preview(preview: dict, output: str | None, output_format: str | None) -> None:
    """What a run would do (`Backend.preview`): JSON, or a table on a terminal; `--output` gets JSON."""
    text = to_json(preview)
    write_output(text, output)
    if wants_table(output_format):
        from ckpt_bench.present import summary

        summary.print_preview(preview)
    else:
        click.echo(text)


def _launch(**values) -> None:
    """Run a checkpoint benchmark under torchrun and print its report (a summary on a terminal, else JSON)."""
    given = given_options(click.get_current_context())
    try:
        check_output(values.get("output"))
    except ConfigError as error:
        fail(str(error))
    if values["sweep"] or values["resume"]:
        run_sweep_command(values, given)
    if values["max_jobs"] is not None:
        fail("--max-jobs applies to a sweep (--sweep FILE) only")
    if values[PEER_OVERRIDES]:
        fail(f"unexpected argument {values[PEER_OVERRIDES][0]!r}: KEY=VALUE arguments are Hydra overrides of an "
             "s3torchbenchmarking config given with --sweep FILE")
    # --device cpu hides the GPUs from the launch, before any option asks torch which it sees.
    with device_environment(values.get("device")):
        try:
            launch_config, emit = registry.build_launch(values, given, os.environ)
            if emit.emit:
                from ckpt_bench.benchmark.emit import check_job, render

                script = render(emit, launch_config, values, given, registry.all_flags())
                check_job(registry.runner_for(launch_config), launch_config, emit, values.get("host_memory_gb"))
                click.echo(script, nl=False)
                sys.exit(0)
            runner = registry.runner_for(launch_config)
            if launch_config.plan_only:
                preview = runner.preview(launch_config)
                if launch_config.asked:  # the advice's options: the interval at the job's size, from its projection
                    preview["advice"] = plan_advice(preview, launch_config)
                print_preview(preview, launch_config.output, launch_config.format)
                sys.exit(0)
            from ckpt_bench.benchmark.repeat import run

            result = run(runner, launch_config)
        except ConfigError as error:
            fail(str(error))
        print_report(result.report, launch_config.output, launch_config.format)
        sys.exit(result.exit_code)


launch = _compose(_launch)


def run_sweep_command(values: dict, given: set[str]) -> None:
    """`--sweep FILE [--resume DIR] [HYDRA_OVERRIDES]`: options given explicitly on the command line become
    fixed settings; KEY=VALUE arguments are Hydra overrides of an s3torchbenchmarking config."""
    from ckpt_bench.sweep.run import RESERVED, run_sweep, summary

    overrides = {name: values[name] for name in given if name not in (*RESERVED, PEER_OVERRIDES)}
    try:
        _root, results = run_sweep(values["sweep"], values["runs_dir"], values["resume"], overrides, parse_argv,
                                   tuple(values[PEER_OVERRIDES]), values["max_jobs"] or DEFAULT_MAX_JOBS)
    except ConfigError as error:
        fail(str(error))
    print_report(summary(results), values.get("output"), values.get("format"), sweep_results=results)
    interrupted = [job for job in results.jobs if job.status == "interrupted" and job.exit_code]
    sys.exit(interrupted[0].exit_code if interrupted else 0 if all(job.status == "ok" for job in results.jobs) else 1)


def main(argv: list[str] | None = None) -> None:
    """The `ckpt-launch` entry point."""
    entry_point(launch, argv)
