"""Logs in, one stream of checkpoint events out, and what the logs say beside events.

Several logs are one run's logs in order (e.g. the job before and after a restart): `seq` counts
their lines as one, so the report engine sees one timeline. A line that cannot be read (a date that
does not exist, a timer value `2250..0`) is skipped and counted in the notes: one bad line must not
cost the report of a gigabyte of good ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from ckpt_bench.core.events import CheckpointEvent
from ckpt_bench.report.parsers import LogParser
from ckpt_bench.report.parsers.iterations import IterationTimes
from ckpt_bench.report.parsers.lines import Counted, locate
from ckpt_bench.report.parsers.sources import LogSource, cannot_read, log_sources

DUMP = "arguments dump"


class LogSession:
    """Parses log sources in order; collects their configuration (`run_info`, and where each key
    came from in `provenance`), how many arguments dumps they hold, how many lines were skipped,
    and notes. `seq`: the lines read before (the logs before these, read by another session)."""

    def __init__(self, seq: int = 0) -> None:
        self.seq = seq
        self.skipped = 0
        self.run_info: dict = {}
        self.provenance: dict[str, str] = {}
        self.dumps = 0
        self.notes: list[str] = []
        self.iteration_times = IterationTimes()

    def events(self, sources: Iterable[LogSource]) -> Iterator[CheckpointEvent]:
        for source in sources:
            yield from self._parse(source)

    def merge(self, later: LogSession) -> None:
        """Takes in what `later`, the session of logs read after this one's, collected: as if this session
        had read them too (so logs can be parsed one by one, then reported together)."""
        self.seq = later.seq
        self.skipped += later.skipped
        self.dumps += later.dumps
        self.iteration_times.merge(later.iteration_times)
        self.notes.extend(note for note in later.notes if note not in self.notes)
        self.run_info.update(later.run_info)
        self.provenance.update(later.provenance)

    def _parse(self, source: LogSource) -> Iterator[CheckpointEvent]:
        parser = source.parser_class()
        self.notes.append(f"parsed {source.description}")
        skipped, first = 0, None
        try:
            for files, number, text in source.lines(self.notes):
                if isinstance(text, Counted):
                    parser.count(text)
                    continue
                self.seq += 1
                try:
                    events = parser.feed(text, self.seq)
                except (ValueError, OverflowError) as error:
                    skipped += 1
                    first = first or (files, number, error)
                    continue
                yield from events
        except OSError as error:
            raise cannot_read(source.path, error) from error
        yield from parser.finish()
        self._absorb(parser)
        self.skipped += skipped
        if skipped:
            files, number, error = first
            path, line = locate(files, number)
            self.notes.append(f"{skipped} line{'s' * (skipped > 1)} of {source.path} could not be read and "
                              f"{'were' if skipped > 1 else 'was'} skipped; the first: {path} line {line} ({error})")

    def _absorb(self, parser: LogParser) -> None:
        self.notes.extend(note for note in parser.notes if note not in self.notes)
        dumped = parser.arguments.run_info()
        self.dumps += parser.arguments.dumps
        self.iteration_times.merge(parser.iteration_times)
        for key, (value, where) in parser.observed.items():
            if key not in dumped:
                self.run_info[key] = value
                self.provenance[key] = where
        for key, value in dumped.items():
            self.run_info[key] = value
            self.provenance[key] = DUMP


def events_of(paths: Iterable[str | Path]) -> Iterator[CheckpointEvent]:
    """Checkpoint events of log files and folders read as one run's logs, in order. Raises
    `ReportError` for a path that is not a log; lines that cannot be read are skipped (for the notes
    saying so: `session = LogSession()`, `session.events(log_sources(paths))`, `session.notes`)."""
    return LogSession().events(log_sources(paths))
