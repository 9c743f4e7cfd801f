"""Report assembly: the report dict of one of our runs or of logs, and the JSON written of it.

`ckpt_bench.report.engine` turns checkpoint events into numbers; this puts a whole report together around them:
what a run directory recorded beside its events (passes, verification, what a worker measured), or
what logs say beside theirs (their configuration, and where each key came from), sizes measured
from a checkpoint folder, and the notes saying what is missing and why.

Values come from the source only. Whatever the report's configuration keys cannot be filled from is
left null and named in the notes; bandwidth needs folder sizes, so for logs it is left out unless
`ckpt_dir` points at the checkpoints to measure.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ckpt_bench.core.checkpoint_dir import iter_dir_name, iteration_folder_sizes
from ckpt_bench.core.errors import ReportError
from ckpt_bench.core.events import CheckpointEvent, event_files, read_event_files
from ckpt_bench.core.run_facts import RunFacts
from ckpt_bench.core.rundir import MEASUREMENTS_FILE, RUN_FILE, RunDir
from ckpt_bench.report import SCHEMA_VERSION
from ckpt_bench.report.engine import CONFIG_KEYS, SEMANTICS, Operation, ReportBuilder, fractions_of_peak
from ckpt_bench.report.mlperf import comparability, mlperf_section
from ckpt_bench.report.parsers.session import DUMP, LogSession
from ckpt_bench.report.parsers.sources import LogFolder, LogSource, NoEvents, RunSource, cannot_read, resolve


def run_report(run_dir: str | os.PathLike, ckpt_dir: str | os.PathLike | None = None,
               facts: RunFacts | None = None) -> dict:
    """The report of one of our runs, from its run directory alone (or with `ckpt_dir` re-measured). The
    launcher gives the run `facts` it holds (its disk may have refused run.json)."""
    from ckpt_bench.worker import integrity  # hashlib: not for a report of logs

    run = RunDir(run_dir)
    if facts is None:
        try:
            facts = run.read_run()
        except (OSError, ValueError) as error:
            raise ReportError(f"cannot read {run.path / RUN_FILE}: {error}") from error
    if ckpt_dir is not None:
        folder_sizes = _measure(ckpt_dir)
    else:
        folder_sizes = facts.folder_sizes or None
    passes = facts.passes
    failed = [p for p in passes if not p["ok"]]

    launcher = facts.launcher
    notes = list(facts.notes)
    if launcher.get("finished") is False:  # run.json as set up, never completed: the launcher died (or runs)
        notes.append(f"the launcher (pid {launcher.get('pid')} on {launcher.get('host')}) did not finish this run: "
                     "it was killed, or is still running; what follows is what the events recorded until then")

    def run_section(status: str) -> dict:
        section = {"dir": str(run.path), "backend": facts.backend, "status": status, "passes": passes}
        if facts.interrupted:  # Ctrl-C or SIGTERM (ckpt_bench.launcher.interrupts): that is the status
            section.update(status="interrupted", interrupted=facts.interrupted)
        elif launcher.get("finished") is False:
            section.update(status="incomplete", launcher=launcher)
        return section

    if not facts.checkpoints:
        # A backend without checkpoints (the comms sweep): its report is what its passes measured.
        return {
            "comms": run.comms_results("comms"),
            "config": facts.run_info,
            "environment": facts.environment,
            "notes": notes,
            "schema_version": SCHEMA_VERSION,
            "run": run_section("failed" if failed else "ok"),
        }
    load_ran = any(p["name"] == "load" for p in passes)
    verdicts, unreadable = run.load_verdicts()
    notes += [f"a load verdict could not be read, its rank is not counted as verified: {file}" for file in unreadable]
    verifies = facts.verifies  # a framework's load pass checks nothing for us
    verification = integrity.combine(verdicts) if (verdicts or (load_ran and verifies)) else None
    builder = ReportBuilder().add_all(_recorded_events(run))
    report = builder.build(
        run_info=facts.run_info,
        folder_sizes=folder_sizes,
        verification=verification,
        environment=facts.environment,
        load_cache=facts.load_cache,
        notes=notes,
    )
    checkpoint_bytes = facts.run_info.get("mlperf_checkpoint_bytes")
    if checkpoint_bytes is not None:  # a workload run: MLPerf Storage's figures too, from the same events
        report["mlperf"] = mlperf_section(builder.operations(), checkpoint_bytes)
    if any(p["name"] == "preflight" for p in passes):
        report["preflight"] = run.comms_results("preflight")  # the fabric, measured just before
    measurements = run.path / MEASUREMENTS_FILE
    if measurements.is_file():  # what a worker measured beyond checkpoints (Lightning: training-time impact)
        report.update(json.loads(measurements.read_text()))
    if facts.storage_baseline_asked:  # --storage-baseline: the storage's own peak, and how close we came
        report["storage_baseline"] = facts.storage_baseline
        report.update(fractions_of_peak(report, facts.storage_baseline))
    if facts.not_cleaned_up:  # checkpoints the run created and could not remove (the storage failed)
        report["not_cleaned_up"] = facts.not_cleaned_up
    _name_failure_causes(report, failed)
    report["measurement"] = _measurement_labels(report, facts)
    if "mlperf" in report:  # whether it could stand beside published MLPerf results, from the whole report
        report["mlperf"]["comparable"] = comparability(report)
    # A mismatch is the verdict whatever else failed: the load pass of ranks that exit 3 (a mismatch) fails too.
    mismatch = bool((report.get("verification") or {}).get("mismatched"))
    report["run"] = run_section("verification-failed" if mismatch else "failed" if failed else "ok")
    return report


def _measurement_labels(report: dict, facts: RunFacts) -> dict:
    """What each figure is, in words: fsync, cache, baseline. A reader should not have to guess."""
    fsync = facts.run_info.get("fsync")
    baseline = report.get("storage_baseline")
    return {
        "fsync": fsync,
        "fsync_means": {True: "every file was fsynced before a save counted as complete",
                        False: "files were not fsynced: a save is complete once written to the page cache",
                        None: "not applicable (object storage: an upload is durable once acknowledged)"}[fsync],
        "load_cache": facts.load_cache,
        "load_cache_means": _load_cache_means(facts.load_cache, fsync),
        "storage_baseline": (f"measured with {baseline.get('tool')} after the benchmark, same I/O shape "
                             f"({baseline.get('peak') or 'one round'}): {baseline.get('method')}"
                             if isinstance(baseline, dict) else "asked for but not measured: see the notes"
                             if "storage_baseline" in report else "not measured (add --storage-baseline)"),
        "time": "per rank from its own monotonic clock; a save's times are its slowest rank's",
        "memory": "peak_rss_bytes: each rank's peak resident memory from the operation's start to its end (the "
                  "kernel's VmHWM, reset at the start; not a writer in another process), the highest rank's "
                  "shown; peak_device_bytes: "
                  "the CUDA allocator's peak over the same span",
    }


def _load_cache_means(cache: str | None, fsync: bool | None) -> str:
    if cache == "cold" and fsync is None:  # object storage: nothing of it is cached on this host
        return "cold: every load read the checkpoint from the object store"
    if cache == "cold":
        return "cold: the checkpoint was evicted from the page cache (fsync + posix_fadvise DONTNEED) before each load"
    return "warm: loads may have read from the page cache"


def stored_report(path: str | Path) -> dict | None:
    """The report a run left, when `path` is its report.json or a folder holding one but no events to
    rebuild it from (a --repeat series); None otherwise."""
    path = Path(path)
    if path.is_dir() and (path / "report.json").is_file() and not (path / RUN_FILE).is_file():
        path = path / "report.json"
    if not (path.is_file() and path.suffix == ".json"):
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "saves" in data else None


def _name_failure_causes(report: dict, failed_passes: list[dict]) -> None:
    """A failed pass's storage cause (a full disk, a dead endpoint: ckpt_bench.benchmark.lifecycle) leads the
    error of the save or load it left incomplete: the rank's own error is often a symptom (torch's zip
    writer says `unexpected pos` on a full disk)."""
    for failed_pass in failed_passes:
        cause = failed_pass.get("cause")
        operations = report["saves"] if failed_pass["name"] == "save" else [report.get("load") or {}]
        for operation in operations:
            if cause and operation and not operation.get("complete", True):
                error = operation.get("error")
                operation["error"] = f"{cause} ({error})" if error and cause not in error else (error or cause)


def _recorded_events(run: RunDir) -> Iterator[CheckpointEvent]:
    try:
        yield from read_event_files(event_files(run.events_dir))
    except (ValueError, KeyError, TypeError) as error:  # not JSON, or not an event's fields
        raise ReportError(f"cannot read the events in {run.events_dir}: {error!r}") from error


def log_report(paths: list[str | Path], ckpt_dir: str | Path | None = None) -> dict:
    """The report of the logs (or of the one run directory) at `paths`; raises `ReportError`."""
    return log_report_and_operations(paths, ckpt_dir)[0]


def log_report_and_operations(paths: list[str | Path], ckpt_dir: str | Path | None = None,
                              ) -> tuple[dict, list[Operation] | None]:
    """`log_report`, and the paired operations it was built from (for report.html's timeline: the logs
    are read once); None for a run directory, whose events are on disk, and for logs of several runs.

    Logs that are not one job's (`_jobs`) are reported as runs apart: `{"runs": [report, ...], "notes":
    [why]}`, each report with its `sources`. The logs of one job give its report as they always did."""
    if not paths:
        raise ReportError("give a log file, a log folder or a run directory")
    if ckpt_dir is not None and not Path(ckpt_dir).is_dir():
        raise ReportError(f"--ckpt-dir {ckpt_dir} is not a folder")
    stored = stored_report(paths[0]) if len(paths) == 1 and ckpt_dir is None else None
    if stored is not None:  # a report.json, or a --repeat series' folder: the report it holds
        return stored, None
    resolved = [resolve(p) for p in paths]
    if any(isinstance(s, RunSource) for s in resolved):
        if len(resolved) > 1:
            raise ReportError("a run directory is reported on its own: give it as the only PATH")
        return run_report(resolved[0].path, ckpt_dir=ckpt_dir), None
    sources = [source for r in resolved for source in (r.sources if isinstance(r, LogFolder) else [r])]
    folder_notes = [note for r in resolved if isinstance(r, LogFolder) for note in r.notes]
    jobs = _jobs(sources)
    reported = [job for job in jobs if job.builder.has_events or job.builder.orphans()]
    if not reported:
        skipped = sum(job.session.skipped for job in jobs)
        unread = f" ({skipped} unreadable lines skipped)" if skipped else ""
        raise NoEvents(f"no checkpoint save or load found in {', '.join(str(p) for p in paths)}{unread}")
    silent = [str(source.path) for job in jobs if job not in reported for source in job.sources]
    if silent:
        folder_notes.append(f"no checkpoint save or load in {', '.join(silent)}")
    if len(reported) == 1:
        (job,) = reported
        return _job_report(job, ckpt_dir, folder_notes), job.builder.operations()
    runs = [{**_job_report(job, ckpt_dir, []), "sources": [str(s.path) for s in job.sources]} for job in reported]
    why = [job.split for job in reported if job.split]
    return {"runs": runs, "notes": [f"these logs are {len(runs)} runs, reported apart", *why, *folder_notes]}, None


@dataclass
class _Job:
    """Logs read as one job's (a run and its restarts): their events, what they said beside them."""

    sources: list[LogSource]
    session: LogSession
    builder: ReportBuilder = field(default_factory=ReportBuilder)
    spans: list[tuple[int, int]] = field(default_factory=list)  # each log's first and last time of day
    split: str | None = None  # why its first log is not one of an earlier job's

    def conflicts(self, source: LogSource, session: LogSession, span: tuple[int, int] | None) -> list[str]:
        """Why a log (its source, session and span of times) is not this job's: nothing when it may be."""
        why = [f"{source.parser_class.format} log vs {self.sources[0].parser_class.format}"
               ] if source.parser_class.format != self.sources[0].parser_class.format else []
        why += [f"{key} {session.run_info[key]} vs {self.session.run_info[key]}" for key in JOB_KEYS
                if session.run_info.get(key) is not None and self.session.run_info.get(key) is not None
                and session.run_info[key] != self.session.run_info[key]]
        if span is not None and any(span[0] < end and start < span[1] for start, end in self.spans):
            why.append("their times overlap")
        return why


# What tells two jobs apart when their logs say it: a restart of a job keeps them.
JOB_KEYS = ("world_size", "data_parallel_size", "tensor_model_parallel_size", "pipeline_model_parallel_size",
            "context_parallel_size", "expert_model_parallel_size", "num_layers", "hidden_size", "ckpt_format", "save")


def _jobs(sources: list[LogSource]) -> list[_Job]:
    """The logs grouped into jobs. One log is one job, read as it streams. Of several, each joins the first
    job it may belong to (the same format; the same world size, parallel layout, model and checkpoint
    folder as far as the logs say; times that do not overlap), in order, else starts a job of its own. A
    log that says nothing of a run (no event, no configuration) is a job of its own, reported as such."""
    if len(sources) == 1:
        job = _Job(sources, LogSession())
        job.builder.add_all(job.session.events(sources))
        return [job]
    jobs: list[_Job] = []
    silent: list[_Job] = []  # logs of no run (a README in a folder of logs)
    seq = 0
    for source in sources:
        session = LogSession(seq)
        events = list(session.events([source]))
        seq = session.seq
        if not events and not session.run_info:
            silent.append(_Job([source], session))
            continue
        walls = [event.wall_ns for event in events if event.wall_ns is not None]
        span = (min(walls), max(walls)) if walls else None
        conflicts = [(job, job.conflicts(source, session, span)) for job in jobs]
        job = next((job for job, why in conflicts if not why), None)
        if job is None:
            job = _Job([], LogSession())
            if conflicts:
                job.split = f"{source.path} is not a log of " + "; ".join(
                    f"run {index} ({', '.join(why)})" for index, (_, why) in enumerate(conflicts, 1))
            jobs.append(job)
        job.sources.append(source)
        job.session.merge(session)
        job.builder.add_all(events)
        if span is not None:
            job.spans.append(span)
    return jobs + silent


def _job_report(job: _Job, ckpt_dir: str | Path | None, extra_notes: list[str]) -> dict:
    """The report of one job's logs."""
    session = job.session
    notes = session.notes + extra_notes + _config_notes(session)
    folder_sizes = None
    if ckpt_dir is not None:
        folder_sizes = _measure(ckpt_dir)
        notes.append(f"sizes and bandwidth from the iter_* folders in {ckpt_dir}")
    notes.append("environment is null: a log does not describe the machine it ran on")
    report = job.builder.build(run_info=session.run_info, folder_sizes=folder_sizes, notes=notes)
    if folder_sizes is not None:
        for save in report["saves"]:
            if save["complete"] and save["iteration"] not in folder_sizes:
                report["notes"].append(
                    f"no {iter_dir_name(save['iteration'])} folder in {ckpt_dir}: "
                    "that save's size and bandwidth are left out"
                )
    report["notes"] += _semantics_notes(report["saves"])
    training = session.iteration_times.training()
    if training is not None:
        report["training"] = training
    orphans = job.builder.orphans()
    if orphans:
        report["unmatched_ends"] = [_unmatched(event) for event in orphans]
        report["notes"].append(f"{len(orphans)} end line{'s' * (len(orphans) > 1)} of a save or load whose start is "
                               "not in the log (it begins mid-save, or its start lines were cut): unmatched_ends, "
                               "never counted as saves")
    return report


def _semantics_notes(saves: list[dict], listed: int = 10) -> list[str]:
    """In words, what the source's figures measure where they are not the whole save (`source_semantics`);
    the saves named by iteration, the first `listed` of them."""
    notes = []
    for figure in ("block_time", "total_time"):
        by_meaning: dict[str, list] = {}
        for save in saves:
            meaning = (save.get("source_semantics") or {}).get(figure)
            if meaning is not None and meaning != "durable":
                by_meaning.setdefault(meaning, []).append(save["iteration"])
        for meaning, iterations in by_meaning.items():
            many = len(iterations) > 1
            named = ", ".join(map(str, iterations[:listed])) + (
                f" and {len(iterations) - listed} more" if len(iterations) > listed else "")
            notes.append(f"{figure} of the save{'s' * many} at iteration{'s' * many} {named} is the source's "
                         f"'{meaning}' figure: {SEMANTICS[meaning]}")
    return notes


def _unmatched(event: CheckpointEvent) -> dict:
    """An end event without its start, as the report lists it (its time as the log wrote it)."""
    at = None if event.wall_ns is None else datetime.fromtimestamp(event.wall_ns / 1e9, timezone.utc)
    return {"kind": event.kind.value, "rank": event.rank, "iteration": event.iteration, "path": event.path,
            "time": at.replace(tzinfo=None).isoformat(timespec="milliseconds") if at else None,
            "time_source": event.source.value}


def _measure(ckpt_dir: str | os.PathLike) -> dict[int, int]:
    try:
        return iteration_folder_sizes(ckpt_dir)
    except OSError as error:
        raise cannot_read(Path(ckpt_dir), error) from error


def _config_notes(session: LogSession) -> list[str]:
    """Where the configuration keys came from, when not from one arguments dump, and which are missing."""
    notes = []
    if session.dumps == 0:
        notes.append("the log holds no arguments dump")
    elif session.dumps > 1:
        notes.append(f"{session.dumps} arguments dumps (restarts): the configuration is the last one's")
    for key in sorted(k for k, where in session.provenance.items() if where != DUMP):
        notes.append(f"{key} comes from {session.provenance[key]}, not from an arguments dump")
    missing = [key for key in CONFIG_KEYS if key not in session.run_info]
    if missing:
        notes.append(f"not in the log, left null: {', '.join(missing)}")
    return notes


def to_json(data) -> str:
    """Strict JSON of `data`: JSON has no NaN or Infinity (Python writes them, most readers then fail),
    so a non-finite float is written as null, and a report (a dict with `notes`) says where."""
    replaced: list[str] = []
    finite = _finite(data, "", replaced)
    if replaced and isinstance(finite, dict) and "notes" in finite:
        finite["notes"] = [*(finite["notes"] or []),
                           f"not a finite number, written as null: {', '.join(replaced)}"]
    return json.dumps(finite, indent=2, allow_nan=False)


def _finite(value, where: str, replaced: list[str]):
    """A copy of `value` with non-finite floats replaced by None; `replaced` gets their places."""
    if isinstance(value, float) and not math.isfinite(value):
        replaced.append(where or "the value")
        return None
    if isinstance(value, dict):
        return {k: _finite(v, f"{where}.{k}" if where else str(k), replaced) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v, f"{where}[{i}]", replaced) for i, v in enumerate(value)]
    return value
