"""What `ckpt_report.py PATH...` points at, and the report built from it.

A PATH is a log file (Megatron stdout or Primus console/file lines, told apart by sniffing its first
lines), a Primus log folder (`.../logs/pre_trainer/` with `rank-N/` below it, or a folder above it),
or one of our run directories. Several log PATHs are one run's logs in order (e.g. the job before
and after a restart): one report covers all their saves. A run directory already holds its events
and is reported on its own, by `bench.rundir`.

Values come from the logs only. Whatever the report's configuration keys cannot be filled from is
left null and named in the notes; bandwidth needs folder sizes, so it is left out unless
`--ckpt-dir` points at the checkpoints to measure.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.checkpoint_dir import iter_dir_name, iteration_folder_sizes
from bench.events import CheckpointEvent
from bench.parsers.lines import ANSI, candidate_lines, is_indented, read_lines
from bench.parsers.megatron import MegatronParser
from bench.parsers.primus import PrimusParser, files_to_read, find_rank_dirs, is_primus_line, merged_lines
from bench.report import CONFIG_KEYS, ReportBuilder

SNIFF_LINES = 200


class ReportError(Exception):
    """A user-facing failure: one line on stderr and `exit_code`."""

    exit_code = 2


class NoEvents(ReportError):
    exit_code = 1


@dataclass
class LogSource:
    """One log to parse: the lines worth parsing, and the parser for its format."""

    path: Path
    parser_class: type
    streams: list[list[Path]]  # per rank read: its files, oldest first (one stream for a single file)
    description: str

    def lines(self) -> Iterator[str]:
        if self.parser_class is PrimusParser:
            return merged_lines(self.streams)
        raw = itertools.chain.from_iterable(read_lines(f) for f in self.streams[0])
        return (text for _, text in candidate_lines(raw, is_indented))


@dataclass
class RunSource:
    path: Path


def resolve(path: str | Path) -> LogSource | RunSource:
    path = Path(path)
    if not path.exists():
        raise ReportError(f"no such file or folder: {path}")
    if path.is_dir():
        return _resolve_folder(path)
    parser_class = PrimusParser if _sniff_primus(path) else MegatronParser
    return LogSource(path, parser_class, [[path]], f"{parser_class.format} log {path}")


def _resolve_folder(path: Path) -> LogSource | RunSource:
    from bench.rundir import RunDir  # imports torch: only when a run directory is given

    if RunDir.is_run_dir(path):
        return RunSource(path)
    rank_dirs = find_rank_dirs(path)
    streams = files_to_read(rank_dirs) if rank_dirs else []
    if not streams:
        raise ReportError(
            f"{path} is neither a log file, a Primus log folder (logs/pre_trainer/rank-N/*.log) "
            "nor a run directory"
        )
    read = "; ".join(
        f"{files[0].parent.name}/{files[-1].name} ({len(files)} file{'s' * (len(files) > 1)})"
        for files in streams
    )
    return LogSource(path, PrimusParser, streams, f"Primus log folder {path}: read {read}")


def _sniff_primus(path: Path) -> bool:
    try:
        for raw in itertools.islice(read_lines(path), SNIFF_LINES):
            if is_primus_line(ANSI.sub(b"", raw).decode("utf-8", "replace")):
                return True
    except OSError as error:
        raise ReportError(f"cannot read {path}: {error.strerror or error}") from error
    return False


@dataclass
class _Session:
    """Parses log sources in order into one stream of events; collects what they say beside events."""

    seq: int = 0
    run_info: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)  # config key -> where its value came from
    notes: list = field(default_factory=list)
    dumps: int = 0

    def events(self, sources: list[LogSource]) -> Iterator[CheckpointEvent]:
        for source in sources:
            parser = source.parser_class()
            self.notes.append(f"parsed {source.description}")
            try:
                for line in source.lines():
                    self.seq += 1
                    yield from parser.feed(line, self.seq)
            except OSError as error:
                raise ReportError(f"cannot read {source.path}: {error.strerror or error}") from error
            yield from parser.finish()
            self._absorb(parser)

    def _absorb(self, parser) -> None:
        dumped = parser.arguments.run_info()
        self.dumps += parser.arguments.dumps
        for key, value in parser.observed.items():
            if key not in dumped:
                self.run_info[key] = value
                self.provenance[key] = "the Primus line prefix" if key == "world_size" else "the save lines"
        for key, value in dumped.items():
            self.run_info[key] = value
            self.provenance[key] = "arguments dump"

    def config_notes(self) -> list[str]:
        notes = []
        if self.dumps == 0:
            notes.append("the log holds no arguments dump")
        elif self.dumps > 1:
            notes.append(f"{self.dumps} arguments dumps (restarts): the configuration is the last one's")
        derived = sorted(k for k, source in self.provenance.items() if source != "arguments dump")
        for key in derived:
            notes.append(f"{key} comes from {self.provenance[key]}, not from an arguments dump")
        missing = [key for key in CONFIG_KEYS if key not in self.run_info]
        if missing:
            notes.append(f"not in the log, left null: {', '.join(missing)}")
        return notes


def build_log_report(paths: list[str | Path], ckpt_dir: str | Path | None = None) -> dict:
    """The report of the logs (or run directory) at `paths`; raises `ReportError`."""
    if not paths:
        raise ReportError("give a log file, a Primus log folder or a run directory")
    if ckpt_dir is not None and not Path(ckpt_dir).is_dir():
        raise ReportError(f"--ckpt-dir {ckpt_dir} is not a folder")
    sources = [resolve(p) for p in paths]
    if any(isinstance(s, RunSource) for s in sources):
        if len(sources) > 1:
            raise ReportError("a run directory is reported on its own: give it as the only PATH")
        from bench.rundir import build_run_report

        return build_run_report(sources[0].path, ckpt_dir=ckpt_dir)

    session = _Session()
    builder = ReportBuilder().add_all(session.events(sources))
    if not builder.has_events:
        raise NoEvents(f"no checkpoint save or load found in {', '.join(str(p) for p in paths)}")
    notes = session.notes + session.config_notes()
    folder_sizes = None
    if ckpt_dir is not None:
        folder_sizes = iteration_folder_sizes(ckpt_dir)
        notes.append(f"sizes and bandwidth from the iter_* folders in {ckpt_dir}")
    notes.append("environment is null: a log does not describe the machine it ran on")
    report = builder.build(run_info=session.run_info, folder_sizes=folder_sizes, notes=notes)
    if folder_sizes is not None:
        for save in report["saves"]:
            if save["complete"] and save["iteration"] not in folder_sizes:
                report["notes"].append(
                    f"no {iter_dir_name(save['iteration'])} folder in {ckpt_dir}: "
                    "that save's size and bandwidth are left out"
                )
    return report
