"""What both commands share: a `ckpt_bench.core.options.Flag` as a click option (`click_option`; the
launcher's options, and the advice options `ckpt-report` shares with it), the one-line error (`fail`),
what goes to stdout (`wants_table`), and the entry point that turns click's usage errors into that line
too (`entry_point`)."""

from __future__ import annotations

import sys

import click
from click.core import ParameterSource

from ckpt_bench.core.options import Flag


def click_type(flag: Flag):
    if flag.choices:
        return click.Choice(flag.choices)
    if flag.type is int and (flag.min is not None or flag.max is not None):
        return click.IntRange(flag.min, flag.max)
    return flag.type


def click_option(name: str, flag: Flag, tag: str = "", option=None):
    """The click option for a Flag; `tag` (e.g. the runners that read it) ends its help. `option` builds it:
    cloup's by default (the launcher groups its options); ckpt-report passes click's own, which spares a log
    report cloup's import (a twentieth of its CPU on a 1 GiB log tree)."""
    kwargs = {"help": flag.help + tag, "metavar": flag.metavar, "show_default": flag.show_default}
    decls = list(flag.decls)
    if flag.type is bool and flag.toggle:
        decls[0] = f"{decls[0]}/{flag.toggle}"
        kwargs["default"] = None
    elif flag.type is bool:
        kwargs.update(is_flag=True, default=False)
    else:
        kwargs.update(type=click_type(flag), default=flag.default, multiple=flag.multiple)
    if option is None:
        import cloup

        option = cloup.option
    return option(name, *decls, **kwargs)


def wants_table(output_format: str | None) -> bool:
    """`--format table`, or no `--format` and stdout a terminal: pipes and scripts keep getting JSON."""
    return output_format == "table" or (output_format is None and sys.stdout.isatty())


def fail(message: str, code: int = 2):
    """A user mistake: one line on stderr and exit `code`, never a traceback."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def entry_point(command: click.Command, argv: list[str] | None = None) -> None:
    """Run a click command as an entry point: its usage errors as one line too, Ctrl-C as exit 130."""
    try:
        sys.exit(command.main(argv, standalone_mode=False))
    except click.ClickException as error:
        fail(error.format_message(), error.exit_code)
    except click.Abort:
        sys.exit(130)


def given_options(context: click.Context) -> set[str]:
    """The options set on the command line (not defaults)."""
    return {name for name in context.params if context.get_parameter_source(name) == ParameterSource.COMMANDLINE}
