"""Log parsers: checkpoint events from logs of runs ckpt-bench never launched.

One parser per source format, each behind the same small interface (`LogParser`), each producing
the `ckpt_bench.core.events` vocabulary, so `ckpt_bench.report.engine` builds the same report as for our own runs:

* `megatron.MegatronParser`: Megatron-LM (and Megatron-Bridge) stdout; also the one grammar of
  Megatron's messages.
* `srun.SrunMegatronParser`: Megatron-LM stdout under `srun --label` (`13: ` before every line).
* `primus.PrimusParser`: Primus file/console lines; strips the prefix, hands the message over (to
  Megatron's grammar, and to torchtitan's for Primus's torchtitan backend).
* `nemo.NemoParser`: NeMo 2 / BioNeMo logs (`[NeMo I 2025-05-15 23:42:47 nemo_logging:393] ...`).
* `torchtitan.TorchtitanParser`: torchtitan logs (`[titan] 2025-05-15 23:42:47,123 - root - INFO - ...`).
* `deepspeed.DeepSpeedParser`: Megatron-DeepSpeed and DeepSpeed logs (`[2023-08-15 07:22:31,767] [INFO]
  [logging.py:96:log_dist] [Rank 0] [Torch] Checkpoint global_step2500 is about to be saved!`).
* `launchers`: what launchers put before a rank's lines (srun, nemo-run, torchrun, torch's excepthook),
  stripped in one place for every format (`base.LogFormat.feed`), and their own lines (ft_launcher).
* `sources`: what a PATH is (sniffed with `PARSERS`: by a format's header or by its checkpoint wording,
  so a snippet is read too) and which files to read.
* `session`: logs in order -> one stream of events (`events_of`), and what they say beside events.

A new format is a module with its parser class (a `base.LogFormat`), and one line in `PARSERS`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from ckpt_bench.core.events import CheckpointEvent
from ckpt_bench.report.parsers.arguments import ArgumentsDump
from ckpt_bench.report.parsers.deepspeed import DeepSpeedParser
from ckpt_bench.report.parsers.iterations import IterationTimes
from ckpt_bench.report.parsers.lines import Counted, Grammar, Line
from ckpt_bench.report.parsers.megatron import MegatronParser
from ckpt_bench.report.parsers.nemo import NemoParser
from ckpt_bench.report.parsers.primus import PrimusParser
from ckpt_bench.report.parsers.srun import SrunMegatronParser
from ckpt_bench.report.parsers.torchtitan import TorchtitanParser


class LogParser(Protocol):
    """A format: how its files are recognised and read (class methods), then one parser per log:
    feed the log's lines in order, collect the events, read `run_info` once the log is done."""

    format: str  # names the format in the report's notes
    folder_layout: str | None  # what a log folder of this format is, for messages; None: single files only
    arguments: ArgumentsDump  # the log's arguments dump(s)
    observed: dict[str, tuple[object, str]]  # configuration seen outside a dump: key -> (value, where)
    iteration_times: IterationTimes  # the training lines' iteration times (the advice's iteration time)
    grammar: Grammar  # which lines of its files can matter (`ckpt_bench.report.parsers.lines`)

    @classmethod
    def sniff(cls, first_lines: list[str]) -> bool:
        """Whether a file starting with these lines (ANSI colours removed) is in this format."""

    @classmethod
    def folder_streams(cls, folder: Path) -> list[list[Path]]:
        """The files to read when `folder` is (or holds) a log folder of this format: per stream, its
        files oldest first; [] when it is not. Only asked of formats with a `folder_layout`."""

    @classmethod
    def lines(cls, streams: list[list[Path]], notes: list[str]) -> Iterator[Line]:
        """The lines worth feeding, in order; `notes` gets what was damaged (a `.gz` cut short)."""

    def feed(self, line: str, seq: int) -> list[CheckpointEvent]:
        """Events the line (as the file holds it, a launcher's prefix included) completes; `seq` orders
        them (a line counter over all logs). A line that cannot be read (a date that does not exist)
        raises ValueError or OverflowError, having changed nothing that would give its events to another
        save or load."""

    def count(self, lines: Counted) -> None:
        """Lines the scan counts rather than hands over (a `lines.Counted`: lines holding the grammar's
        `counted` keyword, none kept), in their place among the lines fed: the parser reads what it counts
        in them as if each had been fed."""

    def finish(self) -> list[CheckpointEvent]:
        """Events the end of the log implies: saves still open never finished."""

    @property
    def run_info(self) -> dict:
        """Configuration keys of the report the log holds, with real types."""

    @property
    def notes(self) -> list[str]:
        """What the report should say about the log beside its numbers; read once the log is done."""


# Sniffed in this order; the last one takes any file.
PARSERS: tuple[type[LogParser], ...] = (PrimusParser, NemoParser, TorchtitanParser, DeepSpeedParser, SrunMegatronParser,
                                        MegatronParser)
