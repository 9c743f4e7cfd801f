"""A `bench.options.Flag` as a click option: the one mapping both command lines use (`ckpt_launch.py`
through `bench.cli`, `ckpt_report.py` for the options it shares with the launcher, such as the advice
options of `bench.advice`)."""

from __future__ import annotations

import click
import cloup

from bench.options import Flag


def click_type(flag: Flag):
    if flag.choices:
        return click.Choice(flag.choices)
    if flag.type is int and (flag.min is not None or flag.max is not None):
        return click.IntRange(flag.min, flag.max)
    return flag.type


def click_option(name: str, flag: Flag, tag: str = ""):
    """The click option for a Flag; `tag` (e.g. the runners that read it) ends its help."""
    kwargs = {"help": flag.help + tag, "metavar": flag.metavar, "show_default": flag.show_default}
    decls = list(flag.decls)
    if flag.type is bool and flag.toggle:
        decls[0] = f"{decls[0]}/{flag.toggle}"
        kwargs["default"] = None
    elif flag.type is bool:
        kwargs.update(is_flag=True, default=False)
    else:
        kwargs.update(type=click_type(flag), default=flag.default, multiple=flag.multiple)
    return cloup.option(name, *decls, **kwargs)
