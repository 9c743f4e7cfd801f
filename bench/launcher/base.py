"""The policy every backend shares: plan, validate, launch the passes, report, clean up.

A backend only says what to run (`Backend.plan`); this module decides how a run is carried out,
so every backend gets the same run directory, the same torchrun handling, the same report engine and
the same rule for deleting things: only a checkpoint folder this run created, after its sizes are
recorded, and never with `keep_checkpoints`.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import yaml

from bench.config import ConfigError
from bench.environment import describe_environment
from bench.launcher import nodes
from bench.launcher.torchrun import PassResult, Topology, free_port, run_command, run_pass
from bench.rundir import RunDir, build_run_report
from bench.storage import (  # noqa: F401 - re-exported
    OWNER_MARK,
    CheckpointStorage,
    check_writable,
    remove_checkpoints,
    storage_for,
)


@dataclass
class LaunchSettings:
    """Everything a user can set on the command line (or in a sweep), for any backend."""

    backend: str = "megatron"
    config: Path | None = None
    topology: Topology = field(default_factory=Topology)
    overrides: dict = field(default_factory=dict)  # trainer arguments set on the command line
    save_dir: str | None = None
    runs_dir: Path = Path("runs")
    keep_checkpoints: bool = False
    warm_load: bool = False
    options: dict = field(default_factory=dict)  # backend-specific options (e.g. DCP thread count)


@dataclass
class WorkerPass:
    name: str  # "save" | "load" | ...
    args: list[str]  # arguments to the worker module, after `--spec <worker.json>`
    module: str | None = None  # another worker than the plan's (the --preflight comms sweep)
    spec: bool = True  # pass `--spec <worker.json>` first; a framework's own script takes no spec
    # A framework's launcher that starts the ranks itself (e.g. Primus's run_pretrain.sh), run instead
    # of torchrun with `env` added and in `cwd`; its output is kept like a pass's console.log.
    command: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    show_progress: Callable[[str], bool] | None = None  # None: the plan's


@dataclass
class Plan:
    """What a backend wants run, decided and validated before anything is launched."""

    name: str  # run name (e.g. the experiment name)
    worker_module: str  # run with `python -m torch.distributed.run ... -m <worker_module>`
    resolved_config: dict  # written to resolved.yaml
    spec: dict  # written to worker.json; the runner adds events/integrity/checkpoint paths
    run_info: dict  # the report's configuration keys (bench.report.CONFIG_KEYS) and more
    passes: list[WorkerPass]
    checkpoint_parent: str | None  # where the user wants checkpoints; None: inside the run dir
    show_progress: Callable[[str], bool] = lambda line: False
    checkpoints: bool = True  # False: the passes save nothing (comms); the report is theirs
    verifies: bool = True  # the load pass checks what it loaded (bench.integrity); a framework's does not
    # Called on every node once the run directory and checkpoint folder exist (checkpoint_dir None
    # without checkpoints), to put their paths into the passes (a framework's --save, its YAML).
    bind: Callable[[RunDir, str | None], None] | None = None
    # Called on node 0 after the passes: turns what they left that is not events (a framework's
    # logs) into events under the run's events/; returns notes for the report.
    collect: Callable[[RunDir], list[str]] | None = None
    # The checkpoints' storage when the backend picks it (Lightning: any fsspec URL); None: storage_for().
    storage: CheckpointStorage | None = None


class Backend(Protocol):
    """The whole of what the launcher needs from a backend."""

    name: str

    def plan(self, settings: LaunchSettings) -> Plan:
        """Resolve and validate the settings; raise ConfigError with one line for a user mistake."""
        ...


@dataclass
class RunResult:
    run_dir: RunDir
    report: dict
    exit_code: int


def execute(backend: Backend, settings: LaunchSettings) -> RunResult:
    plan = backend.plan(settings)
    from bench.launcher.comms import preflight_pass  # comms builds on this module

    preflight = preflight_pass(settings)
    if preflight is not None:
        plan.passes.insert(0, preflight)
    run_id = settings.options.get("run_id")
    nodes.validate(settings.topology, run_id)
    # Local folder or S3 prefix (bench.storage): checked before anything is created or timed.
    storage = plan.storage or storage_for(plan.checkpoint_parent, settings.options)
    storage.check_access()
    if not settings.topology.rdzv_endpoint and settings.topology.master_port is None:
        settings.topology.master_port = free_port()
    if not nodes.is_leader(settings.topology):
        return _join(plan, settings, storage.worker_env())

    run = RunDir.create(settings.runs_dir, plan.name, run_id)
    checkpoint_dir = None
    try:
        if plan.checkpoints:
            checkpoint_dir = storage.create(run.path)
    except ConfigError:
        run.path.rmdir()  # just created and still empty: a refused run leaves nothing behind
        raise
    spec = {
        **plan.spec,
        "run_dir": str(run.path),
        "checkpoint_dir": None if checkpoint_dir is None else str(checkpoint_dir),
        "events_dir": str(run.events_dir),
        "integrity_dir": str(run.integrity_dir),
        "warm_load": settings.warm_load,
        "run_id": uuid.uuid4().hex,
    }
    spec_path = run.write_json("worker.json", spec)
    if plan.bind is not None:
        plan.bind(run, spec["checkpoint_dir"])
    resolved = {**plan.resolved_config,
                "ckpt_bench": {"backend": backend.name, "checkpoint_dir": spec["checkpoint_dir"]}}
    (run.path / "resolved.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    run_info = {**plan.run_info, "save": spec["checkpoint_dir"]} if plan.checkpoints else plan.run_info
    facts = {
        "backend": backend.name,
        "checkpoints": plan.checkpoints,
        "verifies": plan.verifies,
        "run_info": run_info,
        "checkpoint_dir": spec["checkpoint_dir"],
        "load_cache": "warm" if settings.warm_load else "cold",
        "environment": describe_environment(checkpoint_dir),
        "passes": [],
    }
    run.write_json("run.json", facts)
    print(f"run directory: {run.path}", file=sys.stderr, flush=True)

    commands, facts["passes"] = _run_passes(plan, settings, run, spec_path, storage.worker_env())
    (run.path / "commands.sh").write_text("#!/usr/bin/env bash\nset -e\n" + "\n".join(commands) + "\n")

    if plan.collect is not None:
        facts["notes"] = [*facts.get("notes", []), *plan.collect(run)]
    if plan.checkpoints:
        facts["folder_sizes"] = storage.iteration_sizes()
    run.write_json("run.json", facts)
    report = build_run_report(run.path)
    run.report_path.write_text(json.dumps(report, indent=2) + "\n")
    if plan.checkpoints and not settings.keep_checkpoints and storage.remove():
        print(f"removed checkpoints in {checkpoint_dir} (keep them with --keep-checkpoints)",
              file=sys.stderr, flush=True)
    status = report["run"]["status"]
    exit_code = 0 if status == "ok" else (3 if status == "verification-failed" else 1)
    return RunResult(run, report, exit_code)


def _run_passes(
    plan: Plan, settings: LaunchSettings, run: RunDir, spec_path: Path, storage_env: dict[str, str]
) -> tuple[list[str], list[dict]]:
    """Run the passes in order, on this node; stop after the first that failed on any node.
    Returns this node's commands and the pass results of every node."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **storage_env}
    commands, summaries = [], []
    for worker_pass in plan.passes:
        log_dir = nodes.log_dir(run, worker_pass.name, settings.topology)
        show = worker_pass.show_progress or plan.show_progress
        pass_env = {**env, **worker_pass.env}
        if worker_pass.command is not None:
            result = run_command(worker_pass.name, worker_pass.command, log_dir, show, pass_env, worker_pass.cwd)
        else:
            args = ["--spec", str(spec_path), *worker_pass.args] if worker_pass.spec else worker_pass.args
            # One c10d rendezvous per pass: no agent can join the previous pass's.
            topology = replace(settings.topology, rdzv_id=f"{run.path.name}-{worker_pass.name}")
            result = run_pass(worker_pass.name, topology, log_dir, worker_pass.module or plan.worker_module,
                              args, show, pass_env)
        commands.append(shlex.join(result.command))
        if not result.ok:
            _print_failure(result)
        every_node = nodes.finish_pass(run, settings.topology, result)
        summaries += every_node
        if not all(s["ok"] for s in every_node):
            break
    return commands, summaries


def _join(plan: Plan, settings: LaunchSettings, storage_env: dict[str, str]) -> RunResult:
    """Node R > 0 of a multi-node run: the passes, in node 0's run directory; node 0 reports."""
    run = nodes.join(settings.runs_dir, settings.options["run_id"])
    print(f"node {settings.topology.node_rank}: run directory {run.path}", file=sys.stderr, flush=True)
    spec_path = run.path / "worker.json"
    if plan.bind is not None:
        plan.bind(run, json.loads(spec_path.read_text())["checkpoint_dir"])
    _, summaries = _run_passes(plan, settings, run, spec_path, storage_env)
    ok = all(s["ok"] for s in summaries)
    report = {
        "run": {"dir": str(run.path), "node_rank": settings.topology.node_rank,
                "status": "ok" if ok else "failed", "passes": summaries},
        "notes": [f"node 0 writes the report of all nodes: {run.report_path}"],
    }
    return RunResult(run, report, 0 if ok else 1)


def _print_failure(result: PassResult) -> None:
    if not result.failures:
        print(f"[{result.name}] pass failed with exit code {result.exit_code}; logs in {result.log_dir}",
              file=sys.stderr, flush=True)
    for failure in result.failures:
        print(f"[{result.name}] rank {failure.rank} failed (exit code {failure.exit_code}); "
              f"last lines of its log:\n{failure.log_tail.rstrip()}", file=sys.stderr, flush=True)
