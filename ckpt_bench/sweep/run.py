"""Sweeps: many benchmark runs from one file, each job exactly one command-line invocation.

A sweep file names fixed settings and `sweep:` lists, keyed by the CLI options' names with
underscores (any option of `ckpt_launch.py`, any backend). The jobs are the cartesian product of the
lists, in declaration order (the last list varies fastest), run one after another:

    name: dcp                       # optional; default: the file's name
    backend: dcp                    # fixed settings
    save_calls: 3
    sweep:
      model: [vit-base, gpt2]
      nproc_per_node: [1, 2]
      save_dir: [/tmp/ckpt-bench, s3://my-bucket/ckpt-bench]

Each job's options are parsed by the command line's own parser (defaults, types, choices; `parse`,
given by `ckpt_bench.cli.launch`), so a job is exactly `ckpt_launch.py <its options>`; that command line is
recorded with the job, and it runs through the same `registry.build_launch` as the CLI. Results:

    <runs-dir>/sweeps/<name>/<YYYYmmdd-HHMMSS>/
        sweep.yaml                  the sweep as run (fixed settings, lists, command-line overrides)
        <job>/benchmark.log         everything the job printed
        <job>/report.json           its report; also as results_<values>.json (s3torchbenchmarking's name)
        <job>/job.json              its options, command line, status and error
        <job>/<run directory>/      the run itself (ckpt_bench.core.rundir)
        <job>/attempts/<N>/         an earlier attempt without a result, set aside by --resume
        run_results.json            every job's config and report, tool and library versions, host
        results.csv                 one row per job
        sweep_report.html           each metric against each swept parameter, the table of jobs

A job writes only into its own folder (job.json when it starts and when it ends). The last three files,
the aggregate (`ResultsWriter`, typed as `ckpt_bench.report.sweep_results.SweepResults`), hold every job and
grow with the sweep: each is written whole and atomically when the sweep starts, between jobs at most
every AGGREGATE_INTERVAL_S, and when it stops (done, stopped, or interrupted); --resume rebuilds them
from the jobs' folders.

A job whose run fails is recorded as failed and the sweep goes on; Ctrl-C stops the sweep after
recording the job in flight as interrupted, and says how to resume. `--resume DIR` runs again the
jobs of DIR that have no result (never started, interrupted, or failed) and skips the others. It
deletes nothing but the checkpoints of an earlier attempt (`set_aside`): those its run created, as
their mark proves, and did not keep (`--keep-checkpoints`), on disk or on S3; everything else of the
attempt, its logs first, is moved into `<job>/attempts/<N>/`.

A sweep writes only into a folder it created or one that holds its `sweep.yaml`: another tool's
folder (a Hydra multirun directory named by `hydra.sweep.dir`) is refused, and a job folder without
our `job.json` is left alone. The jobs are counted before any is built (`ckpt_bench.sweep.limits`).

Another benchmark's sweep file (s3torchbenchmarking's Hydra configs) runs as it is: `ckpt_bench.sweep.peers`
translates it into jobs, chooses the folder (`hydra.sweep.dir`) and writes its result files beside
ours (`Outputs`); nothing else here depends on whose file it was.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import difflib
import io
import itertools
import json
import math
import os
import re
import shlex
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ckpt_bench.benchmark import registry
from ckpt_bench.benchmark.repeat import run
from ckpt_bench.core.environment import describe_environment, package_versions
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.options import to_argv
from ckpt_bench.core.rundir import RUN_FILE, RunDir, sweep_results_file, write_atomic
from ckpt_bench.core.yamlfile import read_yaml
from ckpt_bench.launcher.resources import device_environment
from ckpt_bench.present.html import SWEEP_HTML, write_sweep_html
from ckpt_bench.present.rows import MLPERF_KEYS, mlperf_figures
from ckpt_bench.report.assembly import to_json
from ckpt_bench.report.metrics import AT_LEAST, BY_KEY, HEADLINE, STEADY_FIGURES
from ckpt_bench.report.schema import Report
from ckpt_bench.report.sweep_results import FIGURES, JobRecord, SweepResults, status_counts
from ckpt_bench.storage import reopen
from ckpt_bench.sweep.limits import DEFAULT_MAX_JOBS, check_job_count
from ckpt_bench.sweep.peers import translation_for
from ckpt_bench.sweep.peers.outputs import Outputs

# `ckpt_bench.cli.launch.parse_argv`: one command line -> (option values, the options given); ConfigError if it
# cannot be parsed.
Parse = Callable[[list[str]], tuple[dict, set]]

# Options a sweep file may not set: they drive the sweep itself.
RESERVED = ("sweep", "resume", "max_jobs", "output", "format", "runs_dir")
SWEEP_FILE = "sweep.yaml"
JOB_FILE = "job.json"  # in every job folder we made: the proof that it is ours to set aside
ATTEMPTS = "attempts"  # <job>/attempts/<N>/: earlier attempts, set aside by --resume
CSV_FILE = "results.csv"
# The aggregate files (run_results.json, results.csv, sweep_report.html) are rewritten at most this often
# while jobs run, so a watcher sees progress; each job writes its own job.json when it ends.
AGGREGATE_INTERVAL_S = 60.0
# A job's saves by their steady figure (`steady_save_*`, what the tables show), its loads as measured. The
# report's top-level save keys (Primus's: the last complete save) stay in run_results.json, named in `figures`.
CSV_METRICS = (
    "world_size", *(metric.key for metric in HEADLINE if metric.steady_figure is None), "iter_folder_size",
    "num_saved", "verified", "accurate",
    "save_fraction_of_peak", "load_fraction_of_peak",  # with storage_baseline: true
)

ADVICE_COLUMNS = ("checkpoint_cost_s", "checkpoint_cost_from")  # report.advice's, with --mtbf-hours


@dataclass
class Job:
    index: int
    params: dict  # the swept values, in declaration order
    options: dict  # every option, as the command line's parser gave them
    argv: list[str]  # the equivalent command line (after `ckpt_launch.py`)
    given: set = field(default_factory=set)  # the options the job sets (the rest are defaults)

    @property
    def command(self) -> str:
        """The command line the job is, as recorded: `ckpt_launch.py <options>`."""
        return shlex.join(["ckpt_launch.py", *self.argv])

    @property
    def described(self) -> str:
        """The swept values as given (`ckpt_format=torch_dist`), for the progress line; file names use `_label`."""
        return " ".join(f"{key}={value}" for key, value in self.params.items())

    @property
    def report_name(self) -> str:
        """`results_<value>_<value>....json`, the values in declaration order (as s3torchbenchmarking)."""
        return "results_" + "_".join(_label(key, value) for key, value in self.params.items()) + ".json"


@dataclass
class Sweep:
    name: str
    fixed: dict
    lists: dict
    source: str | None = None
    jobs: list[Job] = field(default_factory=list)
    outputs: Outputs = field(default_factory=Outputs)
    root: Path | None = None  # where results go; None: <runs-dir>/sweeps/<name>/<time>/
    saved: dict | None = None  # what sweep.yaml keeps to resume, when not `definition()` (another tool's file)
    notes: list[str] = field(default_factory=list)  # what the sweep file asked that does not apply here

    def definition(self) -> dict:
        return {"name": self.name, **self.fixed, "sweep": self.lists}


def _label(key: str, value) -> str:
    if key == "save_dir":
        return "s3" if str(value).startswith("s3://") else "disk"
    if isinstance(value, bool):
        return key if value else f"no-{key}"
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", str(value)).strip("-") or "none"


def _check_keys(keys, where: str) -> None:
    params = registry.all_flags()
    for key in keys:
        if key in RESERVED:
            raise ConfigError(f"{where}: {key!r} cannot be set in a sweep file (it drives the sweep itself)")
        if key not in params:
            close = difflib.get_close_matches(str(key), params, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}: {key!r} is not an option of ckpt_launch.py{hint}; use the option's name "
                              "with underscores, e.g. nproc_per_node")


def _jobs(source: str, parse: Parse, combinations: list[tuple[dict, dict]]) -> list[Job]:
    """Each (swept values, options) as a job: parsed as the CLI would and checked as a run would be
    (`registry.build_launch`: a model's name, a backend's settings), all before any job starts."""
    jobs = []
    for index, (params, values) in enumerate(combinations):
        argv = to_argv(values, registry.all_flags())
        try:
            options, given = parse(argv)
            with device_environment(options.get("device")):
                registry.build_launch(options, given, os.environ)
        except ConfigError as error:
            described = ", ".join(f"{k}={v}" for k, v in params.items())
            raise ConfigError(f"{source}: job {index} ({described}): {error}") from None
        jobs.append(Job(index, params, options, argv, given))
    return jobs


def sweep_from(definition, source: str, parse: Parse, overrides: dict | None = None,
               peer_overrides: tuple[str, ...] = (), max_jobs: int | None = DEFAULT_MAX_JOBS) -> Sweep:
    """Our sweep file, or another benchmark's (`ckpt_bench.sweep.peers`) with its own command-line overrides;
    at most `max_jobs` jobs (None: no limit)."""
    translation = translation_for(definition, source, peer_overrides, overrides or {}, max_jobs)
    if translation is None:
        if peer_overrides:
            raise ConfigError(f"{peer_overrides[0]}: {source} is a ckpt-bench sweep file, whose settings are options "
                              "(e.g. --thread-count 2); KEY=VALUE overrides apply to s3torchbenchmarking configs")
        return build_sweep(definition, source, parse, overrides, max_jobs)
    return Sweep(translation.name, dict(overrides or {}), translation.lists, source,
                 _jobs(source, parse, translation.jobs), translation, translation.root, translation.saved,
                 translation.notes)


def build_sweep(definition, source: str, parse: Parse, overrides: dict | None = None,
                max_jobs: int | None = DEFAULT_MAX_JOBS) -> Sweep:
    """A validated sweep: every job's options parsed and checked as the CLI would, at most `max_jobs` of them
    (counted first); raises ConfigError (one line)."""
    if not isinstance(definition, dict):
        raise ConfigError(f"{source}: a sweep file is a mapping of options and a `sweep:` mapping of lists")
    definition = dict(definition)
    name = definition.pop("name", None) or Path(source).stem
    lists = definition.pop("sweep", None)
    if not isinstance(lists, dict) or not lists:
        raise ConfigError(f"{source}: `sweep:` must map option names to lists of values, e.g. "
                          "sweep: {thread_count: [1, 2]}")
    for key, values in lists.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{source}: sweep.{key} must be a non-empty list (got {values!r})")
    _check_keys(definition, source)
    _check_keys(lists, f"{source}: sweep")
    both = sorted(set(definition) & set(lists))
    if both:
        raise ConfigError(f"{source}: {', '.join(both)} is both fixed and swept; keep one")
    overrides = overrides or {}
    swept = sorted(set(overrides) & set(lists))
    if swept:
        raise ConfigError(f"{', '.join('--' + k.replace('_', '-') for k in swept)}: swept in {source}; "
                          "remove it from the command line or from the sweep")
    fixed = {**definition, **overrides}
    check_job_count((len(values) for values in lists.values()), source, max_jobs)
    swept = (dict(zip(lists, values, strict=True)) for values in itertools.product(*lists.values()))
    combinations = [(params, {**fixed, **params}) for params in swept]
    return Sweep(str(name), fixed, lists, source, _jobs(source, parse, combinations))


def load_sweep(path: str | os.PathLike, parse: Parse, overrides: dict | None = None,
               peer_overrides: tuple[str, ...] = (), max_jobs: int | None = DEFAULT_MAX_JOBS) -> Sweep:
    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(f"--sweep {path}: sweep file not found")
    try:
        definition = read_yaml(path)
    except ConfigError as error:
        raise ConfigError(f"--sweep {error}") from None
    return sweep_from(definition, str(path), parse, overrides, peer_overrides, max_jobs)


# --- running ------------------------------------------------------------------------------------


def _job_dir(root: Path, job: Job) -> Path:
    return root / str(job.index)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _read_job(root: Path, job: Job) -> JobRecord | None:
    path = _job_dir(root, job) / JOB_FILE
    return JobRecord.from_json(json.loads(path.read_text())) if path.is_file() else None


def _write_job(root: Path, record: JobRecord) -> None:
    """`<job>/job.json`: the job's own record, its report beside it in report.json."""
    _write_json(root / str(record.index) / JOB_FILE, record.to_json(with_report=False))


def _write_json(path: Path, data) -> None:
    write_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def run_job(root: Path, job: Job, outputs: Outputs) -> JobRecord:
    """Run one job as its own CLI invocation would, its output captured in `<job>/benchmark.log`."""
    job_dir = _job_dir(root, job)
    if job_dir.exists():
        if not (job_dir / JOB_FILE).is_file():  # not a folder we made: never touched
            return JobRecord(job.index, job.params, status="failed", error=f"{job_dir} exists and is not a job "
                             f"folder of this sweep (no {JOB_FILE}): left alone")
        set_aside(job_dir, bool(job.options.get("keep_checkpoints")))
    job_dir.mkdir(parents=True, exist_ok=True)
    record = JobRecord(job.index, job.params, job.command, job.options, status="running", started=_now())
    _write_job(root, record)
    values = {**job.options, "runs_dir": str(job_dir)}
    with open(job_dir / "benchmark.log", "w", encoding="utf-8") as log, \
            contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        print(f"$ {record.command}", flush=True)
        try:
            with device_environment(values.get("device")):  # this job's, not the next one's
                launch, _emit = registry.build_launch(values, {*job.given, "runs_dir"}, os.environ)
                result = run(registry.runner_for(launch), launch)
            record.status, record.exit_code = result.status, result.exit_code
            text = to_json(result.report) + "\n"
            write_atomic(job_dir / "report.json", text)
            _link(job_dir / "report.json", job_dir / job.report_name)
            record = dataclasses.replace(record, report_file=job.report_name, report_json=json.loads(text))
            record.run_dir = record.report.run.dir
            if record.status != "ok":
                record.error = _failure(record.report)
        except ConfigError as error:
            print(f"error: {error}", flush=True)
            record.status, record.error = "failed", str(error)
        except Exception as error:  # a job's crash is its own: record it, go on with the sweep
            traceback.print_exc()
            record.status, record.error = "failed", f"{type(error).__name__}: {error}"
    record.finished = _now()
    _write_job(root, record)
    outputs.job_done(job_dir, record)
    return record


def set_aside(job_dir: Path, kept: bool) -> Path:
    """An earlier attempt of a job (interrupted, failed, or killed with its sweep), before the job runs
    again: the checkpoints its runs created (their mark proves it) are removed unless the job kept them
    (`kept`: --keep-checkpoints), wherever they are (inside the run, a --save-dir, S3); everything else,
    its logs first, moves into `<job>/attempts/<N>/`. Returns that folder. Deletes nothing else."""
    attempts = job_dir / ATTEMPTS
    attempt = attempts / str(1 + sum(1 for _ in attempts.iterdir()) if attempts.is_dir() else 1)
    for run_file in job_dir.rglob(RUN_FILE):
        if kept or attempts in run_file.parents:
            continue
        try:
            facts = RunDir(run_file.parent).read_run()
            location, description = facts.checkpoint_dir, facts.storage
            if location and description and reopen(location, description, run_file.parent).remove():
                print(f"removed {location}, left by an earlier attempt of {job_dir}", file=sys.stderr, flush=True)
        except Exception as error:  # an unreadable run.json or an unreachable store: the checkpoints stay
            print(f"could not remove the checkpoints of {run_file.parent}: {type(error).__name__}: {error}",
                  file=sys.stderr, flush=True)
    attempt.mkdir(parents=True)
    for entry in list(job_dir.iterdir()):
        if entry != attempts:
            entry.rename(attempt / entry.name)
    print(f"earlier attempt of {job_dir} moved to {attempt}", file=sys.stderr, flush=True)
    return attempt


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _failure(report: Report) -> str:
    """Why a job has no result, in one line, by its run's status."""
    run_section = report.run
    if run_section.status == "interrupted":
        interrupted = run_section.interrupted
        during = f" during the {interrupted.pass_} pass" if interrupted.pass_ else ""
        return f"interrupted by {interrupted.signal}{during}"
    if run_section.status == "verification-failed":
        verification = dataclasses.asdict(report.verification) if report.verification else None
        return f"verification failed: {json.dumps(verification)}"
    failed = [p for p in run_section.passes if not p.ok]
    if failed:
        return f"{failed[0].name} pass failed (exit code {failed[0].exit_code}); logs in {failed[0].log_dir}"
    return f"the run ended {run_section.status}"


def _job_entry(root: Path, job: Job) -> JobRecord:
    """The job's entry in the sweep's results, from its own files: its job.json with its report.json, or a
    record that it has not run."""
    record = _read_job(root, job)
    if record is None:
        return JobRecord(job.index, job.params, job.command, job.options)
    report = _job_dir(root, job) / "report.json"
    return dataclasses.replace(record, report_json=json.loads(report.read_text())) if report.is_file() else record


def _write_csv(path: Path, sweep: Sweep, jobs: list[JobRecord]) -> None:
    table = io.StringIO()
    writer = csv.writer(table)
    # MLPerf Storage's figures when a job has them (workload runs), by their report keys; the advice's checkpoint
    # cost, with where it came from, when a job has advice (--mtbf-hours).
    mlperf = MLPERF_KEYS if any(record.report is not None and record.report.mlperf for record in jobs) else ()
    advice = ADVICE_COLUMNS if any(record.report is not None and record.report.advice for record in jobs) else ()
    # A lower bound on the total time when a job's saves were timed only from their call's return (a framework's log).
    steady = [*STEADY_FIGURES, *([AT_LEAST] if any(record.report is not None and record.report.steady_median(AT_LEAST)
                                                   is not None for record in jobs) else [])]
    writer.writerow(["job", "status", *sweep.lists, *CSV_METRICS,
                     *(f"steady_save_{figure}" for figure in steady), "fsync", *advice, *mlperf,
                     "report", "error"])
    for job, record in zip(sweep.jobs, jobs, strict=True):
        report = record.report or Report()
        figures = mlperf_figures(report)
        writer.writerow([
            job.index, record.status, *job.params.values(), *(getattr(report, key) for key in CSV_METRICS),
            *(report.steady_median(figure) for figure in steady), report.fsync,
            *(report.advice and getattr(report.advice, key) for key in advice),
            *(figures.get(key) for key in mlperf), record.report_file, record.error,
        ])
    write_atomic(path, table.getvalue())


class ResultsWriter:
    """A sweep's aggregate files: run_results.json (every job's record and report), results.csv and
    sweep_report.html. Rebuilt from every job's own files when the sweep (re)starts, a job's entry re-read
    when it ends; written whole, each file atomically, by `write` and at most every AGGREGATE_INTERVAL_S
    by `write_if_due` (a 10,000-job sweep's run_results.json is tens of MB: rewritten after every job,
    writing it would cost more than the jobs)."""

    def __init__(self, root: Path, sweep: Sweep, started: str) -> None:
        self.root, self.sweep = root, sweep
        environment = describe_environment()
        environment.update(package_versions(("boto3", "click", "s3torchconnectorclient")))
        self.results = SweepResults(
            name=sweep.name, results_file=str(root / sweep.outputs.results_file), sweep_file=sweep.source,
            dir=str(root), started=started, updated=started, sweep=sweep.definition(), environment=environment,
            summary={}, notes=sweep.notes, figures=FIGURES, jobs=[_job_entry(root, job) for job in sweep.jobs])
        self.written_at = -math.inf  # time.monotonic() of the last write

    def update(self, job: Job) -> None:
        """Job `job`'s entry from its own files (after it ran, or was stopped)."""
        self.results.jobs[job.index] = _job_entry(self.root, job)

    def write_if_due(self) -> None:
        if time.monotonic() - self.written_at >= AGGREGATE_INTERVAL_S:
            self.write()

    def write(self) -> SweepResults:
        results = self.results
        results.updated = _now()
        results.summary = status_counts(results.jobs)
        _write_json(self.root / self.sweep.outputs.results_file, results.to_json())
        write_sweep_html(self.root, results)
        _write_csv(self.root / CSV_FILE, self.sweep, results.jobs)
        self.sweep.outputs.sweep_done(self.root)
        self.written_at = time.monotonic()
        return results


def _new_root(runs_dir: Path, name: str) -> Path:
    base = runs_dir / "sweeps" / name / time.strftime("%Y%m%d-%H%M%S")
    root, suffix = base, 1
    while True:
        try:
            root.mkdir(parents=True)
            return root
        except FileExistsError:
            suffix += 1
            root = base.with_name(f"{base.name}-{suffix}")
        except OSError as error:
            raise ConfigError(f"--runs-dir {runs_dir}: cannot create a sweep directory there "
                              f"({error.strerror or error}); give a folder you can write to") from None


def _peer_root(root: Path) -> Path:
    """A folder the sweep file names (hydra.sweep.dir): created, or an empty one; anything in it is another
    sweep's or another tool's (a Hydra multirun), never written over."""
    if (root / SWEEP_FILE).is_file():
        raise ConfigError(f"{root} already holds a sweep: --resume {root}, or choose another folder "
                          "(hydra.sweep.dir=...)")
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        held = ", ".join(sorted(entry.name for entry in root.iterdir())[:4]) if root.is_dir() else "a file"
        raise ConfigError(f"hydra.sweep.dir {root} already exists and is not a ckpt-bench sweep (it holds {held}); "
                          "choose a new folder (hydra.sweep.dir=...): ckpt-bench writes only into folders it creates")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"hydra.sweep.dir {root}: cannot create it ({error.strerror or error})") from None
    return root


def run_sweep(sweep_file: str | None, runs_dir: str | os.PathLike, resume: str | None, overrides: dict | None,
              parse: Parse, peer_overrides: tuple[str, ...] = (), max_jobs: int | None = DEFAULT_MAX_JOBS,
              ) -> tuple[Path, dict]:
    """Run (or resume) a sweep of at most `max_jobs` jobs (a resumed one was counted when it began);
    returns its directory and run_results."""
    from tqdm import tqdm

    if resume:
        root = Path(resume).expanduser()
        saved = root / SWEEP_FILE
        if not saved.is_file():
            raise ConfigError(f"--resume {root}: not a sweep directory (no {SWEEP_FILE})")
        definition = read_yaml(saved)
        sweep = sweep_from(definition, str(saved), parse, max_jobs=None)
        if sweep_file or overrides or peer_overrides:
            given = load_sweep(sweep_file, parse, overrides, peer_overrides, None) if sweep_file else sweep_from(
                definition, str(saved), parse, overrides, peer_overrides, None)
            if [j.options for j in given.jobs] != [j.options for j in sweep.jobs]:
                raise ConfigError(f"--resume {root}: the sweep given differs from the one this directory holds "
                                  f"({saved}); resume without --sweep, or start a new sweep")
        results_path = root / sweep.outputs.results_file
        # Only when it started: building every job's report from a file of tens of MB is not needed for that.
        started = json.loads(results_path.read_text()).get("started") if results_path.is_file() else None
        for job in sweep.jobs:  # a job still "running" belongs to a sweep process that is gone
            record = _read_job(root, job)
            if record and record.status == "running":
                record.status, record.error = "interrupted", "the sweep stopped while this job ran"
                _write_job(root, record)
    else:
        sweep = load_sweep(sweep_file, parse, overrides, peer_overrides, max_jobs)
        root = _peer_root(sweep.root) if sweep.root else _new_root(Path(runs_dir).expanduser(), sweep.name)
        write_atomic(root / SWEEP_FILE, yaml.safe_dump(sweep.saved or sweep.definition(), sort_keys=False))
        started = None

    aggregate = ResultsWriter(root, sweep, started or _now())
    done = [job for job in sweep.jobs if aggregate.results.jobs[job.index].has_result]
    todo = [job for job in sweep.jobs if not aggregate.results.jobs[job.index].has_result]
    print(f"sweep {sweep.name}: {len(sweep.jobs)} jobs in {root}"
          + (f" ({len(done)} finished before, skipped)" if done else ""), file=sys.stderr, flush=True)
    for note in sweep.notes:
        print(f"note: {note}", file=sys.stderr, flush=True)
    aggregate.write()
    progress = tqdm(total=len(sweep.jobs), initial=len(done), desc=f"sweep {sweep.name}", unit="job",
                    file=sys.stderr, dynamic_ncols=True)
    resume_hint = f"resume the sweep with: ckpt_launch.py --resume {shlex.quote(str(root))}"
    with progress:
        try:
            for job in todo:
                progress.set_postfix_str(job.described)
                try:
                    record = run_job(root, job, sweep.outputs)
                except KeyboardInterrupt:  # Ctrl-C between two passes' handlers (setting up a job): say how to go on
                    aggregate.update(job)
                    progress.write(f"interrupted; {resume_hint}", file=sys.stderr)
                    raise
                aggregate.update(job)
                aggregate.write_if_due()
                progress.update(1)
                if record.status != "ok":
                    progress.write(f"job {job.index} {record.status}: {record.error}", file=sys.stderr)
                if record.status == "interrupted":  # Ctrl-C / SIGTERM: the sweep stops; --resume goes on
                    progress.write(f"sweep stopped at job {job.index}; {resume_hint}", file=sys.stderr)
                    break
        finally:  # every job done, the sweep stopped, or interrupted: the aggregate holds every job's record
            results = aggregate.write()
    return root, results


def summary(results: SweepResults | dict) -> dict:
    """What the CLI prints: where the results are and one line of numbers per job. `results` as run_results.json
    holds them (`ckpt_report.py SWEEP_DIR`) or typed."""
    if isinstance(results, dict):
        results = SweepResults.from_json(results)
    root = Path(results.dir)
    jobs = []
    for job in results.jobs:
        report = job.report or Report()
        # The figures the tables compare jobs on, named for what they are (the steady save, not the last one),
        # and a workload job's MLPerf figures.
        jobs.append({"job": job.index, "status": job.status, **job.params,
                     "steady_save_bandwidth": report.compared(BY_KEY["save_bandwidth_in_mbps"]),
                     "load_bandwidth_in_mbps": report.load_bandwidth_in_mbps, **mlperf_figures(report)})
    return {
        "sweep": results.name,
        "dir": results.dir,
        "results": results.results_file or str(sweep_results_file(root)),
        "csv": str(root / CSV_FILE),
        "report_html": str(html) if (html := root / SWEEP_HTML).is_file() else None,
        "summary": results.summary,
        "jobs": jobs,
    }
