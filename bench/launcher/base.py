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
import shutil
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import yaml

from bench.checkpoint_dir import iteration_folder_sizes
from bench.config import ConfigError
from bench.environment import describe_environment
from bench.launcher.torchrun import PassResult, Topology, free_port, run_pass
from bench.rundir import RunDir, build_run_report

# Written into every checkpoint folder we create: we delete a folder only if it carries our mark.
OWNER_MARK = ".ckpt-bench-owned"


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


def _prepare_checkpoint_dir(parent: str | None, run: RunDir) -> Path:
    """A fresh folder for this run's checkpoints, marked as ours; fails early if not writable."""
    target = run.path / "checkpoints" if parent is None else Path(parent) / run.path.name
    try:
        target.mkdir(parents=True, exist_ok=False)
        (target / OWNER_MARK).write_text(f"created by ckpt-bench for {run.path}\n")
    except FileExistsError:
        raise ConfigError(f"--save-dir {parent}: {target} already exists; ckpt-bench writes only to a "
                          "folder it creates") from None
    except OSError as error:
        raise ConfigError(f"--save-dir {parent or run.path}: cannot write there ({error.strerror})") from None
    return target


def check_writable(parent: str | None) -> None:
    """Refuse an unwritable save dir before creating anything."""
    if parent is None or "://" in parent:
        return
    probe = Path(parent)
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"--save-dir {parent}: not writable ({probe} is not a writable directory)")


def remove_checkpoints(path: Path) -> bool:
    """Delete a checkpoint folder only if this tool created it (it carries OWNER_MARK)."""
    if not (path / OWNER_MARK).is_file():
        return False
    shutil.rmtree(path)
    return True


def execute(backend: Backend, settings: LaunchSettings) -> RunResult:
    plan = backend.plan(settings)
    check_writable(plan.checkpoint_parent)
    if not settings.topology.rdzv_endpoint and settings.topology.master_port is None:
        settings.topology.master_port = free_port()

    run = RunDir.create(settings.runs_dir, plan.name)
    try:
        checkpoint_dir = _prepare_checkpoint_dir(plan.checkpoint_parent, run)
    except ConfigError:
        run.path.rmdir()  # just created and still empty: a refused run leaves nothing behind
        raise
    spec = {
        **plan.spec,
        "checkpoint_dir": str(checkpoint_dir),
        "events_dir": str(run.events_dir),
        "integrity_dir": str(run.integrity_dir),
        "warm_load": settings.warm_load,
        "run_id": uuid.uuid4().hex,
    }
    spec_path = run.write_json("worker.json", spec)
    resolved = {**plan.resolved_config, "ckpt_bench": {"backend": backend.name, "checkpoint_dir": str(checkpoint_dir)}}
    (run.path / "resolved.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    run_info = {**plan.run_info, "save": str(checkpoint_dir)}
    facts = {
        "backend": backend.name,
        "run_info": run_info,
        "checkpoint_dir": str(checkpoint_dir),
        "load_cache": "warm" if settings.warm_load else "cold",
        "environment": describe_environment(checkpoint_dir),
        "passes": [],
    }
    run.write_json("run.json", facts)
    print(f"run directory: {run.path}", file=sys.stderr, flush=True)

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    commands = []
    results: list[PassResult] = []
    for worker_pass in plan.passes:
        args = ["--spec", str(spec_path), *worker_pass.args]
        result = run_pass(
            worker_pass.name, settings.topology, run.logs_dir / worker_pass.name,
            plan.worker_module, args, plan.show_progress, env,
        )
        commands.append(shlex.join(result.command))
        results.append(result)
        if not result.ok:
            _print_failure(result)
            break
    (run.path / "commands.sh").write_text("#!/usr/bin/env bash\nset -e\n" + "\n".join(commands) + "\n")

    facts["passes"] = [r.summary() for r in results]
    facts["folder_sizes"] = iteration_folder_sizes(checkpoint_dir)
    run.write_json("run.json", facts)
    report = build_run_report(run.path)
    run.report_path.write_text(json.dumps(report, indent=2) + "\n")
    if not settings.keep_checkpoints and remove_checkpoints(checkpoint_dir):
        print(f"removed checkpoints in {checkpoint_dir} (keep them with --keep-checkpoints)",
              file=sys.stderr, flush=True)
    status = report["run"]["status"]
    exit_code = 0 if status == "ok" else (3 if status == "verification-failed" else 1)
    return RunResult(run, report, exit_code)


def _print_failure(result: PassResult) -> None:
    if not result.failures:
        print(f"[{result.name}] pass failed with exit code {result.exit_code}; logs in {result.log_dir}",
              file=sys.stderr, flush=True)
    for failure in result.failures:
        print(f"[{result.name}] rank {failure.rank} failed (exit code {failure.exit_code}); "
              f"last lines of its log:\n{failure.log_tail.rstrip()}", file=sys.stderr, flush=True)
