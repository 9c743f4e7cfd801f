#!/usr/bin/env python3
"""Report checkpoint saves and loads from logs: `python ckpt_report.py --help`.

    python ckpt_report.py PATH... [--ckpt-dir DIR] [--output report.json] [--format json|table]

PATH: a Megatron-LM stdout log (also under `srun --label`), a NeMo 2 or torchtitan log, a Primus log
file or folder (logs/pre_trainer/), or a run directory of ours; the format is found by content. Errors are one line on stderr, never a traceback: exit 1 when no checkpoint event is found,
2 on bad usage or a file that cannot be read. Lines that cannot be read are skipped and counted in
the report's notes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from bench.assembly import log_report, to_json
from bench.parsers.sources import ReportError
from bench.parsers.table import format_table


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.argument("paths", nargs=-1)
@click.option("--primus-log-dir", multiple=True, help="A Primus log folder (same as giving it as PATH).")
@click.option("--ckpt-dir", help="Checkpoint folder to measure iter_* sizes (and so bandwidth) from.")
@click.option("--output", type=click.Path(dir_okay=False), help="Also write the JSON report here.")
@click.option("--format", "output_format", type=click.Choice(["json", "table"]), default="json",
              show_default=True, help="What to print.")
def main(paths, primus_log_dir, ckpt_dir, output, output_format):
    """Build the checkpoint report of PATH... (log files, Primus log folders or a run directory)."""
    try:
        text = to_json(log_report([*paths, *primus_log_dir], ckpt_dir=ckpt_dir))
    except ReportError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(error.exit_code)
    if output:
        try:
            Path(output).write_text(text + "\n")
        except OSError as error:
            click.echo(f"error: cannot write {output}: {error.strerror or error}", err=True)
            sys.exit(2)
    click.echo(format_table(json.loads(text)) if output_format == "table" else text)


if __name__ == "__main__":
    try:
        sys.exit(main.main(standalone_mode=False))
    except click.ClickException as error:
        click.echo(f"error: {error.format_message()}", err=True)
        sys.exit(error.exit_code)
    except click.Abort:
        sys.exit(130)
