"""The errors a user sees: each message is the one line printed, and each class has its exit code.

Every layer raises these for a user mistake or an input that cannot be read; the commands
(`ckpt_bench.cli`) print the message alone, never a traceback.
"""

import difflib
from collections.abc import Iterable


class ConfigError(ValueError):
    """A user mistake in a command line, an experiment or a sweep file: exit code 2."""


class SchemaError(ValueError):
    """A report that does not have the declared shape (`report.schema`: a report.json of another version)."""


class ReportError(Exception):
    """Logs or a run directory that cannot be turned into a report: one line on stderr and `exit_code`."""

    exit_code = 2


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """'; did you mean a, b?' naming the valid names nearest a mistyped `name` (difflib's ratio), or ''."""
    near = difflib.get_close_matches(name, sorted(names), n=3, cutoff=0.6)
    return f"; did you mean {', '.join(near)}?" if near else ""
