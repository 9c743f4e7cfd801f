"""Progress on the phases that take seconds, on stderr: a line where each starts, saying what it does.

A run can spend a minute before its first save (a 70B subset allocates 14 GiB a rank), and a user who sees
nothing for that long cannot tell work from a hang. So the slow phases say when they start, with one call:

    say(text)        anywhere: in the launcher it is shown at once; in a rank (under torchrun) global rank 0
                     writes it, marked, to its stdout (in order with its other lines: torchrun tees stdout
                     and stderr apart), and the launcher, which reads every pass's output, shows it under the
                     pass's name whatever the backend's own filter of lines
    say_once(text)   the same, once a process (the first save's one-off costs)
    show(text, src)  the launcher's line: `[src] text`; rich where stderr is a terminal (the source in colour,
                     the seconds since the launcher started), plain otherwise

No torch here, and rich only where a terminal shows it: the ranks import this too.
"""

from __future__ import annotations

import os
import sys
import time
from functools import cache

# Said before the first save of a process by the workers whose first save pays one-off costs.
FIRST_SAVE = ("a process's first save can take seconds more than the later ones (one-off costs: megatron-core's "
              "writer process starting, a save plan made); the report shows it apart (stats.first_save)")
MARK = "ckpt-bench progress: "  # a rank's `say` line, as the launcher finds it in the pass's output
_STARTED = time.monotonic()
_said_once: set[str] = set()


@cache
def _console():
    """rich's console on stderr where it is a terminal, else None (plain lines for logs and pipes)."""
    if not sys.stderr.isatty():
        return None
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def show(text: str, source: str | None = None) -> None:
    """One progress line of the launcher on stderr."""
    console = _console()
    if console is None:
        print(f"[{source}] {text}" if source else text, file=sys.stderr, flush=True)
        return
    from rich.text import Text

    console.print(Text.assemble((f"{time.monotonic() - _STARTED:6.1f}s ", "dim"),
                                (f"[{source}] " if source else "", "bold cyan"), text))


def _in_a_rank() -> bool:
    return "LOCAL_RANK" in os.environ  # torchrun sets it for the processes it starts, never for the launcher


def say(text: str) -> None:
    """A phase that takes seconds starts: the launcher shows `text` (see the module docstring)."""
    if not _in_a_rank():
        show(text)
    elif os.environ.get("RANK") == "0":
        print(MARK + text, flush=True)


def say_once(text: str) -> None:
    """`say(text)` the first time this process calls it with `text`."""
    if text not in _said_once:
        _said_once.add(text)
        say(text)


def from_rank(line: str) -> str | None:
    """The text of a rank's `say` line (torchrun's prefix already removed), or None for any other line."""
    return line.strip()[len(MARK):] if line.startswith(MARK) else None
