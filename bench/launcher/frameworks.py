"""Real frameworks: Primus or Megatron-LM trains and checkpoints; we time it from their own logs.

The experiment is resolved and validated exactly as for the built-in worker (`bench.launcher.megatron`),
then handed to the framework with a real checkpoint folder (the run's own, created and marked by
`bench.launcher.base`) in two passes:

    save: train `train_iters` iterations, saving every `save_interval`   (`save` set, `load` unset)
    load: load the latest checkpoint and stop                            (`load` set, `save` unset,
          `exit_on_missing_checkpoint`: a missing checkpoint fails instead of training from scratch)

* `--framework megatron-lm --megatron-path DIR`: torchrun (our runner: per-rank logs, the failing
  rank named) around `DIR/pretrain_gpt.py`, with the resolved arguments as Megatron-LM flags, on
  mock data unless the experiment names `data_path`.
* `--framework primus --primus-path DIR`: the resolved experiment written as Primus YAML (`EXP`),
  and Primus's `examples/run_pretrain.sh` with `NNODES NODE_RANK MASTER_ADDR MASTER_PORT
  GPUS_PER_NODE`; the script runs torchrun itself. Each pass gets its own Primus workspace inside
  the run directory, so its `<exp_root>/logs/pre_trainer` holds that pass's logs only.

Afterwards the logs go through the log parsers (`bench.parsers`, the `ckpt_report.py` grammar) into
the run's `events/`, so the report comes from the one engine and `ckpt_report.py RUN_DIR` rebuilds it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

import yaml

from bench.config import ConfigError
from bench.events import CheckpointEvent
from bench.launcher import nodes
from bench.launcher.base import LaunchSettings, Plan, WorkerPass
from bench.launcher.megatron import resolve, run_info, shows_progress
from bench.rundir import RunDir

# torchrun's --tee prefix on a rank's line in console.log.
_TEE = re.compile(r"^\[default\d+\]:")
_FLAG = re.compile(r"""["'](--[a-z0-9][a-z0-9-]*)["']""")


def known_megatron_flags(megatron_path: Path) -> set[str] | None:
    """Every `--flag` Megatron-LM's argument parser defines, or None where its source is not found."""
    for candidate in ("megatron/training/arguments.py", "megatron/arguments.py"):
        source = megatron_path / candidate
        if source.is_file():
            return set(_FLAG.findall(source.read_text(errors="replace")))
    return None


def megatron_arguments(args: dict, known: set[str] | None) -> tuple[list[str], list[str]]:
    """Megatron-LM command-line flags for trainer arguments, and the keys left out because Megatron-LM
    has no such flag (Primus-only settings). Booleans follow Megatron-LM's two kinds of switch:
    `--x` (default off) and `--no-x` (default on); the default needs no flag."""
    argv: list[str] = []
    skipped: list[str] = []
    for key, value in args.items():
        if value is None:
            continue
        flag = "--" + key.replace("_", "-")
        negative = "--no-" + key.replace("_", "-")
        if isinstance(value, bool):
            if known is None:
                argv += [flag] if value else []
            elif (flag if value else negative) in known:
                argv.append(flag if value else negative)
            elif (negative if value else flag) not in known:
                skipped.append(key)
            continue
        if known is not None and flag not in known:
            skipped.append(key)
            continue
        argv += [flag, *(str(item) for item in value)] if isinstance(value, list) else [flag, str(value)]
    return argv, skipped


def _resolve(settings: LaunchSettings, runner: str) -> tuple:
    """`bench.launcher.megatron.resolve`, plus the mock data a framework needs without a data path."""
    experiment, args, sizes = resolve(settings, runner)
    if not args.get("data_path"):
        args["mock_data"] = True
        args.setdefault("tokenizer_type", "NullTokenizer")
    experiment.args = args
    return experiment, args, sizes


def _framework_plan(name, settings, experiment, args, sizes, passes, bind, collect, worker_module) -> Plan:
    """A framework's plan: its own save and load passes, reported from its logs (no integrity check:
    the framework does not digest what it saved)."""
    return Plan(
        name=experiment.exp_name,
        worker_module=worker_module,
        resolved_config={**experiment.to_yaml_dict(), "exp_root": str(experiment.exp_root)},
        spec={},
        run_info={**run_info(args, sizes, settings), "backend": name},
        passes=passes,
        checkpoint_parent=settings.save_dir or args.get("save"),
        show_progress=shows_progress,
        bind=bind,
        collect=collect,
        verifies=False,
    )


def _pass_args(args: dict, checkpoint_dir: str, phase: str) -> dict:
    if phase == "save":
        return {**args, "save": checkpoint_dir, "load": None}
    return {**args, "save": None, "load": checkpoint_dir, "exit_on_missing_checkpoint": True}


def _required(settings: LaunchSettings, option: str, inside: str) -> Path:
    value = settings.options.get(option)
    if not value:
        raise ConfigError(f"--framework {settings.options['framework']}: give --{option.replace('_', '-')} DIR")
    root = Path(value).resolve()
    if not (root / inside).is_file():
        raise ConfigError(f"--{option.replace('_', '-')} {value}: no {inside} there")
    return root


def events_from_logs(paths: Iterable[Path]) -> Iterator[CheckpointEvent]:
    """Checkpoint events of logs in order (files or Primus log folders), via the log parsers."""
    from bench.parsers.sources import resolve

    seq = 0
    for path in paths:
        source = resolve(path)
        parser = source.parser_class()
        for line in source.lines():
            seq += 1
            yield from parser.feed(line, seq)
        yield from parser.finish()


def record_events(run: RunDir, paths: list[Path]) -> list[str]:
    """Parse the framework's logs into the run's events/ (as our workers would have written them)."""
    by_rank: dict[int, list[str]] = {}
    for event in events_from_logs(paths):
        by_rank.setdefault(event.rank or 0, []).append(event.to_json())  # Megatron prints on rank 0
    run.events_dir.mkdir(parents=True, exist_ok=True)
    for rank, lines in by_rank.items():
        (run.events_dir / f"rank-{rank}.jsonl").write_text("\n".join(lines) + "\n")
    found = ", ".join(str(p.relative_to(run.path)) for p in paths)
    return [f"events parsed from the framework's logs: {found}" if by_rank
            else f"no checkpoint event found in the framework's logs ({found})"]


class MegatronLMBackend:
    name = "megatron-lm"

    def plan(self, settings: LaunchSettings) -> Plan:
        root = _required(settings, "megatron_path", "pretrain_gpt.py")
        experiment, args, sizes = _resolve(settings, "--framework megatron-lm")
        known = known_megatron_flags(root)
        passes = [WorkerPass(phase, [], spec=False, env={"CUDA_DEVICE_MAX_CONNECTIONS": "1",
                                                        "PYTHONPATH": _pythonpath(root)})
                  for phase in ("save", "load")]
        notes: list[str] = []

        def bind(run: RunDir, checkpoint_dir: str | None) -> None:
            skipped: set[str] = set()
            for worker_pass in passes:
                pass_args = _pass_args(args, checkpoint_dir, worker_pass.name)
                worker_pass.args, left_out = megatron_arguments(pass_args, known)
                skipped.update(left_out)
            if skipped:
                notes[:] = [f"not Megatron-LM arguments, left out: {', '.join(sorted(skipped))}"]

        def collect(run: RunDir) -> list[str]:
            # Megatron-LM's stdout as a user sees it: node 0's ranks' lines, torchrun's prefixes removed.
            logs = []
            node0 = replace(settings.topology, node_rank=0)
            for worker_pass in passes:
                console = nodes.log_dir(run, worker_pass.name, node0) / "console.log"
                if console.is_file():
                    log = console.with_name("megatron.log")
                    with open(console, encoding="utf-8", errors="replace") as lines:
                        log.write_text("".join(_TEE.sub("", line) for line in lines))
                    logs.append(log)
            return notes + record_events(run, logs)

        return _framework_plan(self.name, settings, experiment, args, sizes, passes, bind, collect,
                               worker_module=str(root / "pretrain_gpt.py"))


def _pythonpath(root: Path) -> str:
    return os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)


class PrimusBackend:
    name = "primus"
    SCRIPT = "examples/run_pretrain.sh"

    def plan(self, settings: LaunchSettings) -> Plan:
        root = _required(settings, "primus_path", self.SCRIPT)
        experiment, args, sizes = _resolve(settings, "--framework primus")
        topology = settings.topology
        passes = [WorkerPass(phase, [], command=["bash", str(root / self.SCRIPT)], cwd=root)
                  for phase in ("save", "load")]

        def exp_root(run: RunDir, phase: str) -> Path:
            return run.path / "primus" / phase / experiment.work_group / experiment.user_name / experiment.exp_name

        def bind(run: RunDir, checkpoint_dir: str | None) -> None:
            if topology.rdzv_endpoint:
                master_addr, _, master_port = topology.rdzv_endpoint.rpartition(":")
            else:
                master_addr, master_port = topology.master_addr, str(topology.master_port)
            for worker_pass in passes:
                document = experiment.to_yaml_dict()
                document["workspace"] = str(run.path / "primus" / worker_pass.name)
                module = document["modules"]["pre_trainer"]
                # Primus finds its own presets by name; the overrides carry every resolved value.
                module["config"] = experiment.module_preset.name if experiment.module_preset else None
                module["model"] = experiment.model_preset.name if experiment.model_preset else None
                module["overrides"] = _pass_args(args, checkpoint_dir, worker_pass.name)
                path = run.path / "primus" / f"{worker_pass.name}.yaml"
                nodes.write_atomic(path, yaml.safe_dump(document, sort_keys=False))
                worker_pass.env = {
                    "EXP": str(path), "NNODES": str(topology.nnodes), "NODE_RANK": str(topology.node_rank),
                    "MASTER_ADDR": master_addr, "MASTER_PORT": master_port,
                    "GPUS_PER_NODE": str(topology.nproc_per_node),
                }

        def collect(run: RunDir) -> list[str]:
            folders = [exp_root(run, p.name) / "logs" / "pre_trainer" for p in passes]
            return record_events(run, [f for f in folders if f.is_dir()])

        # The passes run Primus's script, which starts torchrun itself: no worker module.
        return _framework_plan(self.name, settings, experiment, args, sizes, passes, bind, collect, worker_module="")


FRAMEWORKS = {backend.name: backend for backend in (MegatronLMBackend(), PrimusBackend())}
