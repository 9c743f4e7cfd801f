"""The run lifecycle every runner shares, as named steps:

    execute(runner, launch)
      1. prepare    the runner's plan; multi-node checks; the storage checked before anything exists
      2. set up     run directory, checkpoint folder (created and marked as ours), worker.json,
                    resolved.yaml, run.json
      3. passes     each pass under torchrun (or the framework's own launcher), in order, stopping after
                    the first that failed on any node, or at Ctrl-C / SIGTERM (`ckpt_bench.launcher.interrupts`)
      4. collect    what the passes left that is not events (a framework's logs) turned into events
      5. measure    checkpoint sizes, into run.json before anything is removed; with --storage-baseline,
                    the storage itself with the last checkpoint's I/O shape (`measure_storage`)
      6. clean up   the checkpoint folder this run created removed, unless kept
      7. report     report.json

Nothing on the way out may crash the launcher: a storage that fails while it is measured or cleaned
up (a dead endpoint, a full disk) becomes a note in the report and a line on the terminal, and a run
directory that refuses a write (`RunDir.write`: whole files or none) costs that file, never the
clean-up or the report on stdout. run.json says whether the launcher finished (`launcher.finished`),
and is rewritten after every pass, so a run whose launcher was killed is reported as such. A follower
node (node rank > 0 of a multi-node run) only joins node 0's run directory and runs the passes
(`follow`); node 0 writes the one report. A run's status maps to the process's exit code in one
place, `exit_code`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import sys
import uuid
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import yaml

from ckpt_bench.core import progress
from ckpt_bench.core.checkpoint_dir import evict_from_page_cache
from ckpt_bench.core.environment import describe_environment
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.run_facts import RunFacts
from ckpt_bench.core.rundir import RunDir, write_atomic
from ckpt_bench.core.units import MIB
from ckpt_bench.core.worker_spec import RunPaths
from ckpt_bench.launcher import hosts_baseline, nodes
from ckpt_bench.launcher.base import Backend, Plan
from ckpt_bench.launcher.config import LaunchConfig
from ckpt_bench.launcher.interrupts import Interrupts
from ckpt_bench.launcher.resources import check_devices, check_free_space, check_ranks_per_node
from ckpt_bench.launcher.torchrun import PassResult, free_port, lost_its_port, run_command, run_pass
from ckpt_bench.present.html import write_run_html
from ckpt_bench.projection import PROJECTION_FILE, add_projection
from ckpt_bench.report.advice import AdviceOptions, add_advice
from ckpt_bench.report.assembly import run_report, to_json
from ckpt_bench.report.schema import PassSummary, Report, RunSection
from ckpt_bench.storage.baseline import IOShape, measure_rounds

# Run status -> exit code; an interrupted run exits 128 + the signal's number; anything else is 1.
EXIT_CODES = {"ok": 0, "verification-failed": 3}
PORT_ATTEMPTS = 3  # a pass whose picked port was taken before torchrun listened runs again on another


def exit_code(run: RunSection) -> int:
    """The exit code of a report's `run` section."""
    if run.status == "interrupted" and run.interrupted is not None and run.interrupted.exit_code is not None:
        return run.interrupted.exit_code
    return EXIT_CODES.get(run.status or "", 1)


@dataclass
class RunResult:
    run_dir: RunDir
    report: dict  # report.json as written: what the CLI prints

    @cached_property
    def run(self) -> RunSection:
        """The report's `run` section, typed (every report of a run of ours has one)."""
        return Report.from_json(self.report).run or RunSection()

    @property
    def status(self) -> str | None:
        return self.run.status

    @property
    def exit_code(self) -> int:
        return exit_code(self.run)


def execute(runner: Backend, launch: LaunchConfig) -> RunResult:
    plan = prepare(runner, launch)
    with Interrupts() as interrupts:
        if not nodes.is_leader(launch.topology):
            return follow(plan, launch, interrupts)
        run, spec_path, facts = set_up(plan, launch)
        commands, summaries = run_passes(plan, launch, run, spec_path, interrupts, facts)
        facts.passes = [summary.to_json() for summary in summaries]
        run.write("commands.sh", "#!/usr/bin/env bash\nset -e\n" + "\n".join(commands) + "\n")
        notes = facts.notes
        notes += [f"{s.name} pass failed: {s.cause}" for s in summaries if s.cause]
        if interrupts.signal is not None:
            facts.interrupted = {"signal": interrupts.signal.name, "exit_code": interrupts.exit_code,
                                 "pass": summaries[-1].name if summaries else None}
        if plan.collect is not None:
            notes += plan.collect(run)
        notes += measure(plan, facts)
        notes += measure_storage(plan, facts, launch, passed=all(s.ok for s in summaries), run=run)
        notes += clean_up(plan, facts)
        report = write_report(run, facts, launch)
        if plan.outputs is not None:
            plan.outputs(run, report)
    return RunResult(run, report)


def prepare(runner: Backend, launch: LaunchConfig) -> Plan:
    """The plan, checked as far as it can be before anything is created or timed."""
    check_devices(launch.device)
    plan = runner.plan(launch)
    nodes.validate(launch.topology, launch.run_id)
    check_ranks_per_node(launch.topology.nproc_per_node, getattr(launch.options, "dist_backend", None))
    if plan.checkpoints is not None:
        plan.checkpoints.storage.check_access()  # a missing bucket or unwritable folder: one line, nothing made
    if not launch.topology.rdzv_endpoint and launch.topology.master_port is None:
        launch.topology.master_port, launch.topology.port_is_ours = free_port(), True
    return plan


def set_up(plan: Plan, launch: LaunchConfig) -> tuple[RunDir, Path, RunFacts]:
    """The run directory with everything the passes read; returns it, the worker spec's path and the
    run facts (run.json) so far. A runs folder that refuses any of it is a ConfigError (one line): what
    was made for the run is taken back, nothing has started."""
    missing = [folder for folder in (launch.runs_path, *launch.runs_path.parents) if not folder.exists()]
    run = RunDir.create(launch.runs_path, plan.name, launch.run_id)
    checkpoint_dir = None
    try:
        if plan.checkpoints is not None:
            checkpoint_dir = plan.checkpoints.storage.create(run.path)
            check_free_space(plan.checkpoints.storage, plan.checkpoints.expected_bytes)
        warm = plan.checkpoints is not None and plan.checkpoints.warm_load
        paths = RunPaths(run_dir=str(run.path), checkpoint_dir=checkpoint_dir, events_dir=str(run.events_dir),
                         integrity_dir=str(run.integrity_dir), warm_load=warm)
        spec = paths if plan.spec is None else replace(plan.spec, **paths.to_json())
        spec_path = run.path / "worker.json"
        _write_or_refuse(spec_path, json.dumps({**spec.to_json(), "run_id": uuid.uuid4().hex}, indent=2,
                                               default=str) + "\n")
        if plan.bind is not None:
            plan.bind(run, checkpoint_dir)
        resolved = {**plan.resolved_config,
                    "ckpt_bench": {"backend": launch.runner, "checkpoint_dir": checkpoint_dir}}
        _write_or_refuse(run.path / "resolved.yaml", yaml.safe_dump(resolved, sort_keys=False))
        run_info = plan.run_info.to_json()
        facts = RunFacts(
            backend=launch.runner,
            checkpoints=plan.checkpoints is not None,
            verifies=plan.verifies,
            run_info={**run_info, "save": checkpoint_dir} if plan.checkpoints is not None else run_info,
            checkpoint_dir=checkpoint_dir,
            storage=plan.checkpoints.storage.describe() if plan.checkpoints is not None else None,
            load_cache="warm" if warm else "cold",
            environment=describe_environment(checkpoint_dir),
            notes=list(plan.notes),
            # Until the report is written: a run.json that still says False outlived its launcher.
            launcher={"pid": os.getpid(), "host": socket.gethostname(), "finished": False},
            storage_baseline_asked=plan.checkpoints is not None and plan.checkpoints.storage_baseline,
        )
        _write_or_refuse(run.path / "run.json", json.dumps(facts.to_json(), indent=2, default=str) + "\n")
        if plan.projection_inputs is not None:
            _write_or_refuse(run.path / PROJECTION_FILE, json.dumps(plan.projection_inputs) + "\n")
    except ConfigError:
        # Only what this run just made: its checkpoint folder (marked as ours), its run directory and the
        # runs folders made for it. A refused run leaves nothing.
        if plan.checkpoints is not None and plan.checkpoints.storage.location is not None:
            plan.checkpoints.storage.remove()
        shutil.rmtree(run.path, ignore_errors=True)
        for folder in missing:
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise
    print(f"run directory: {run.path}", file=sys.stderr, flush=True)
    return run, spec_path, facts


def _write_or_refuse(path: Path, text: str) -> None:
    """A file the passes need: a runs folder that refuses it stops the run before it starts."""
    try:
        write_atomic(path, text)
    except OSError as error:
        raise ConfigError(f"--runs-dir: cannot write {path} ({error.strerror or error}); give a folder with "
                          "room that you can write to") from None


def run_passes(plan: Plan, launch: LaunchConfig, run: RunDir, spec_path: Path, interrupts: Interrupts,
               facts: RunFacts | None = None) -> tuple[list[str], list[PassSummary]]:
    """Run the passes in order, on this node; stop after the first that failed on any node, or once
    interrupted. Returns this node's commands and the pass results of every node. With `facts` (node 0),
    run.json is rewritten after each pass: what ran is on disk even if the launcher is killed later."""
    storage_env = plan.checkpoints.storage.worker_env() if plan.checkpoints is not None else {}
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **storage_env}
    commands: list[str] = []
    summaries: list[PassSummary] = []
    for worker_pass in plan.passes:
        if worker_pass.evict_before:
            _evict(plan)
        log_dir = nodes.log_dir(run, worker_pass.name, launch.topology)
        show = worker_pass.show_progress or plan.show_progress
        pass_env = {**env, **worker_pass.env}
        if worker_pass.command is not None:
            cwd = Path(worker_pass.cwd) if worker_pass.cwd else None
            result = run_command(worker_pass.name, worker_pass.command, log_dir, show, pass_env, cwd,
                                 on_start=interrupts.watch)
        else:
            args = ["--spec", str(spec_path), *worker_pass.args] if worker_pass.spec else worker_pass.args
            # One c10d rendezvous per pass: no agent can join the previous pass's.
            topology = replace(launch.topology, rdzv_id=f"{run.path.name}-{worker_pass.name}",
                               nproc_per_node=worker_pass.nproc_per_node or launch.topology.nproc_per_node)
            for attempt in range(1, PORT_ATTEMPTS + 1):
                result = run_pass(worker_pass.name, topology, log_dir, worker_pass.module or plan.worker_module,
                                  args, show, pass_env, on_start=interrupts.watch)
                # A free port can be taken between our check and torchrun's listen (other jobs on the host).
                if not (topology.port_is_ours and lost_its_port(result) and attempt < PORT_ATTEMPTS):
                    break
                taken, launch.topology.master_port = topology.master_port, free_port()
                topology = replace(topology, master_port=launch.topology.master_port)
                print(f"[{worker_pass.name}] port {taken} was taken before torchrun listened on it; again on "
                      f"port {topology.master_port}", file=sys.stderr, flush=True)
        commands.append(shlex.join(result.command))
        if interrupts.signal is not None:
            interrupts.reap()
            summaries.append(replace(result.summary(), interrupted=interrupts.signal.name))
            break
        if not result.ok:
            if result.cause is None and plan.checkpoints is not None:
                result.cause = plan.checkpoints.storage.diagnose()
            _print_failure(result)
        every_node = nodes.finish_pass(run, launch.topology, result)
        summaries += every_node
        if facts is not None:
            run.write_json("run.json", {**facts.to_json(), "passes": [s.to_json() for s in summaries]})
        if not all(s.ok for s in every_node):
            break
    return commands, summaries


def measure(plan: Plan, facts: RunFacts) -> list[str]:
    """Checkpoint sizes into the run facts, before anything is removed (so the report can be rebuilt
    later). Returns notes: a storage that cannot be listed costs the bandwidth, never the report."""
    if plan.checkpoints is None:
        return []
    try:
        facts.folder_sizes = plan.checkpoints.storage.iteration_sizes()
    except Exception as error:  # a dead endpoint or a lost mount at the end of a run: say so, go on
        facts.folder_sizes = None
        return [f"checkpoint sizes could not be measured in {plan.checkpoints.storage.location} "
                f"({_one_line(error)}): sizes and bandwidth are left out"]
    return []


def measure_storage(plan: Plan, facts: RunFacts, launch: LaunchConfig, passed: bool, run: RunDir) -> list[str]:
    """--storage-baseline: the storage's own write and cold-read bandwidth (the fastest of its rounds) with the
    last saved checkpoint's shape -- its files and their sizes, written by as many writers at once as the
    save had (ranks x writer threads), fsynced as the save was -- into the run facts (`storage_baseline`).
    Only after passes that all succeeded (`passed`): a failed or interrupted run has no shape to copy. In a
    multi-node run, also from 1, 2, 4 ... hosts at once (`hosts_baseline`, every node taking part).
    Returns notes."""
    checkpoints = plan.checkpoints
    if checkpoints is None or not checkpoints.storage_baseline:
        return []
    try:
        return _measure_storage(plan, facts, launch, passed, run)
    finally:
        if launch.topology.nnodes > 1:
            hosts_baseline.end_rounds(run)  # no host waits for a round that will not come


def _measure_storage(plan: Plan, facts: RunFacts, launch: LaunchConfig, passed: bool, run: RunDir) -> list[str]:
    checkpoints = plan.checkpoints
    sizes = facts.folder_sizes or {}
    if facts.interrupted or not passed or not sizes:
        facts.storage_baseline = None
        return ["storage baseline not measured: the benchmark did not complete a save to copy the shape of"]
    iteration = max(sizes)
    ranks = launch.topology.nnodes * launch.topology.nproc_per_node
    try:
        shape = IOShape.of(checkpoints.storage.iteration_files(iteration), ranks * checkpoints.writers_per_rank,
                           plan.run_info.fsync)
        progress.say(f"storage baseline: {len(shape.file_sizes)} files, {shape.total_bytes / MIB:.1f} MiB, "
                     f"{shape.concurrency} writers at once, fsync {'on' if shape.fsync else 'off'}; each round "
                     "writes them and reads them back cold")
        result = measure_rounds(checkpoints.storage.baseline(), shape)
    except Exception as error:  # the storage failed now: the benchmark's numbers stand, the baseline is lost
        facts.storage_baseline = None
        return [f"storage baseline failed ({_one_line(error)}): fraction of peak left out"]
    result["shape_of_iteration"] = iteration
    facts.storage_baseline = result
    progress.say(f"storage baseline ({result['tool']}): write {result['write_bandwidth']} MiB/s, "
                 f"read {result['read_bandwidth']} MiB/s")
    nnodes = launch.topology.nnodes
    if nnodes == 1:
        return []
    progress.say(f"storage baseline from {', '.join(map(str, hosts_baseline.host_counts(nnodes)))} hosts at once: "
                 "the storage's aggregate ceiling")
    try:
        result["hosts"] = hosts_baseline.lead_rounds(
            run, checkpoints.storage, list(shape.file_sizes), nnodes,
            launch.topology.nproc_per_node * checkpoints.writers_per_rank, shape.fsync)
    except Exception as error:  # the storage failed now: the one host's baseline stands
        result["hosts"] = {"error": _one_line(error)}
        return [f"storage baseline from several hosts failed ({_one_line(error)})"]
    return [f"storage baseline measured from node 0 alone with all {shape.concurrency} writers (the fraction of "
            "peak's), and from 1, 2, 4 ... hosts at once (storage_baseline.hosts: the storage's aggregate ceiling)"]


def clean_up(plan: Plan, facts: RunFacts) -> list[str]:
    """Remove the checkpoint folder this run created (never anything else), unless kept. Returns
    notes; what could not be removed is listed in the facts (`not_cleaned_up`)."""
    checkpoints = plan.checkpoints
    if checkpoints is None or checkpoints.storage.location is None:
        return []
    location = checkpoints.storage.location
    partial = " (the run was interrupted: the last checkpoint in it may be partial)" if facts.interrupted else ""
    if checkpoints.keep:
        return [f"checkpoints kept in {location} (--keep-checkpoints){partial}"]
    try:
        removed = checkpoints.storage.remove()
    except Exception as error:  # the storage failed: the folder stays, and the report says where
        facts.not_cleaned_up = [location]
        print(f"could not remove {location}: {_one_line(error)}", file=sys.stderr, flush=True)
        return [f"could not remove the checkpoints in {location} ({_one_line(error)}); remove them by hand"]
    if removed:
        print(f"removed checkpoints in {location} (keep them with --keep-checkpoints)", file=sys.stderr, flush=True)
        return [f"checkpoints removed from {location} after measuring them{partial}"]
    return []


def write_report(run: RunDir, facts: RunFacts, advice: AdviceOptions | None = None) -> dict:
    """run.json, then report.json (with the projection of the whole job where the run has one, and the interval
    advice when `advice` asks for it) and report.html.
    The report is built from the facts in memory: a disk that refused run.json costs the file, not the
    report, which the CLI prints whatever was written."""
    facts.launcher = {**facts.launcher, "finished": True}
    unwritten = [] if run.write_json("run.json", facts.to_json()) else ["run.json"]
    report = add_advice(add_projection(run_report(run.path, facts=facts), run.path), advice, strict=False)
    save_report(run, report, unwritten)
    return report


def save_report(run: RunDir, report: dict, unwritten: list[str] | None = None) -> None:
    """report.json, written whole or not at all, then report.html; a disk that refused it (or the files in
    `unwritten` before it) is a note in the report, which the CLI prints whatever was written."""
    unwritten = [*(unwritten or []), *([] if run.write(run.report_path.name, to_json(report) + "\n")
                                       else [run.report_path.name])]
    if unwritten:
        report["notes"].append(f"could not write {' and '.join(unwritten)} in {run.path} (its disk refused): "
                               "the report is the one printed")
    else:
        write_run_html(run.path, report)


def _evict(plan: Plan) -> None:
    """The run's checkpoints out of this host's page cache, where they are on this host's disk."""
    checkpoints = plan.checkpoints
    if checkpoints is None or checkpoints.warm_load or checkpoints.storage.location is None:
        return
    storage = checkpoints.storage
    folder = storage.worker(storage.describe()).local_path(storage.location)
    if folder is not None:
        progress.say(f"evicting {folder} from the page cache (a cold load): each file fsynced and dropped")
        evict_from_page_cache(folder)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}"


def follow(plan: Plan, launch: LaunchConfig, interrupts: Interrupts) -> RunResult:
    """Node R > 0 of a multi-node run: the passes, in node 0's run directory; node 0 reports."""
    run = nodes.join(launch.runs_path, launch.run_id)
    print(f"node {launch.topology.node_rank}: run directory {run.path}", file=sys.stderr, flush=True)
    spec_path = run.path / "worker.json"
    if plan.bind is not None:
        plan.bind(run, RunPaths.from_file(spec_path).checkpoint_dir)
    _, summaries = run_passes(plan, launch, run, spec_path, interrupts)
    status = "interrupted" if interrupts.signal else ("ok" if all(s.ok for s in summaries) else "failed")
    checkpoints = plan.checkpoints
    if checkpoints is not None and checkpoints.storage_baseline and status == "ok":
        checkpoints.storage.attach(RunPaths.from_file(spec_path).checkpoint_dir, run.path)  # node 0's folder
        hosts_baseline.follow_rounds(run, checkpoints.storage, launch.topology.node_rank, launch.topology.nnodes)
    section = {"dir": str(run.path), "node_rank": launch.topology.node_rank, "status": status,
               "passes": [s.to_json() for s in summaries]}
    if interrupts.signal:
        section["interrupted"] = {"signal": interrupts.signal.name, "exit_code": interrupts.exit_code}
    report = {"run": section, "notes": [f"node 0 writes the report of all nodes: {run.report_path}"]}
    return RunResult(run, report)


def _print_failure(result: PassResult) -> None:
    if result.cause:
        print(f"[{result.name}] {result.cause}", file=sys.stderr, flush=True)
    if not result.failures:
        tail = result.console_tail().rstrip()
        print(f"[{result.name}] pass failed with exit code {result.exit_code}; logs in {result.log_dir}"
              + (f"; last lines of its console:\n{tail}" if tail else ""), file=sys.stderr, flush=True)
    for failure in result.failures:
        tail = failure.log_tail.rstrip() or "(its log is empty)"
        print(f"[{result.name}] {failure.describe()}; last lines of its log:\n{tail}", file=sys.stderr, flush=True)
