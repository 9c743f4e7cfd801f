"""What every format's parser shares: `LogFormat` (a launcher's prefix stripped from each line, the training
lines counted in bulk) and `OneFileFormat` (a format whose logs are single files)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ckpt_bench.core.events import CheckpointEvent
from ckpt_bench.report.parsers.launchers import split
from ckpt_bench.report.parsers.lines import Counted, Grammar, Line, scan_lines


class LogFormat:
    """A format's parser: `feed` strips the launcher prefix of a line and hands the rest, with the rank
    the prefix names, to the format's `feed_line`."""

    def feed(self, line: str, seq: int) -> list[CheckpointEvent]:
        rank, message = split(line)
        return self.feed_line(message, seq, rank)

    def feed_line(self, message: str, seq: int, rank: int | None) -> list[CheckpointEvent]:
        raise NotImplementedError

    def count(self, lines: Counted) -> None:
        """Counted lines (a `lines.Counted`): the training lines' iteration times in them."""
        self.iteration_times.count(lines)


class OneFileFormat:
    """A format whose logs are single files (no folder layout), read with its `grammar`."""

    folder_layout = None
    grammar: Grammar

    @classmethod
    def lines(cls, streams: list[list[Path]], notes: list[str]) -> Iterator[Line]:
        (files,) = streams
        return scan_lines(files, cls.grammar, notes)
