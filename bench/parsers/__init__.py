"""Log parsers: checkpoint events from logs of runs ckpt-bench never launched.

One parser per source format, each behind the same small interface (`LogParser`), each producing
the `bench.events` vocabulary, so `bench.report` builds the same report as for our own runs:

* `megatron.MegatronParser`: Megatron-LM stdout; also the one grammar of Megatron's messages.
* `primus.PrimusParser`: Primus file/console lines; strips the prefix, hands the message over.
* `sources`: what a PATH is (sniffed), which files to read, and `build_log_report`.
"""

from __future__ import annotations

from typing import Protocol

from bench.events import CheckpointEvent
from bench.parsers.arguments import ArgumentsDump


class LogParser(Protocol):
    """Feed a log's lines in order; collect the events; read `run_info` once the log is done."""

    format: str
    arguments: ArgumentsDump  # the log's arguments dump(s)
    observed: dict  # configuration the log shows outside a dump (save lines, Primus prefix)

    def feed(self, line: str, seq: int) -> list[CheckpointEvent]:
        """Events the line completes; `seq` orders them (a line counter over all logs)."""

    def finish(self) -> list[CheckpointEvent]:
        """Events the end of the log implies: saves still open never finished."""

    @property
    def run_info(self) -> dict:
        """Configuration keys of the report the log holds, with real types."""
