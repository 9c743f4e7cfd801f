"""Real frameworks: Primus or Megatron-LM trains and checkpoints; we time it from their own logs.

The experiment is resolved and validated exactly as for the built-in worker (`ckpt_bench.backends.megatron.launcher`),
then handed to the framework with a real checkpoint folder (the run's own, created and marked by
`ckpt_bench.benchmark.lifecycle`) in two passes:

    save: train `train_iters` iterations, saving every `save_interval`   (`save` set, `load` unset)
    load: load the latest checkpoint and stop                            (`load` set, `save` unset,
          `exit_on_missing_checkpoint`: a missing checkpoint fails instead of training from scratch)

Each mode is its own file (`megatron_lm.py`, `primus.py`); this one holds what they share.

* `--framework megatron-lm --megatron-path DIR`: torchrun (our runner: per-rank logs, the failing
  rank named) around `DIR/pretrain_gpt.py`, with the resolved arguments as Megatron-LM flags, on
  mock data unless the experiment names `data_path`.
* `--framework primus --primus-path DIR`: the resolved experiment written as Primus YAML (`EXP`),
  and Primus's `examples/run_pretrain.sh` with `NNODES NODE_RANK MASTER_ADDR MASTER_PORT
  GPUS_PER_NODE`; the script runs torchrun itself. Each pass gets its own Primus workspace inside
  the run directory, so its `<exp_root>/logs/pre_trainer` holds that pass's logs only.

Afterwards the logs go through the log parsers (`ckpt_bench.report.parsers`, the `ckpt_report.py` grammar) into
the run's `events/`, so the report comes from the one engine and `ckpt_report.py RUN_DIR` rebuilds it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ckpt_bench.backends.megatron import rules
from ckpt_bench.backends.megatron.launcher import MegatronConfig, checkpoint_parent, resolve, run_info, shows_progress
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.rundir import RunDir
from ckpt_bench.launcher.base import Plan, WorkerPass
from ckpt_bench.launcher.config import LaunchConfig
from ckpt_bench.report.parsers.session import events_of
from ckpt_bench.storage import CheckpointStorage, storage_for


@dataclass
class FrameworkConfig(MegatronConfig):
    """A framework mode's options: the Megatron experiment's, and where the framework's checkout is."""

    root: Path = field(init=False)  # the checkout, once checked (`checkout`)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.changes_load_layout:
            raise ConfigError("--load-tp/--load-pp/--load-ep/--load-nproc-per-node run in the built-in worker; "
                              "with --framework, load on another layout by running it again with other sizes")
        if self.training_impact:
            raise ConfigError("--training-impact runs in the built-in worker: a framework's own training loop "
                              "cannot be timed without and with saves; drop --framework or --training-impact")
        if self.load_tier is not None:
            raise ConfigError(f"--load-tier {self.load_tier} runs in the built-in worker: a framework's own restart "
                              "reads the tier Megatron-LM picks; drop --framework or --load-tier")

    def checkout(self, option: str, inside: str, framework: str) -> Path:
        """The checkout given as `option`, which must hold `inside`."""
        value = getattr(self, option)
        flag = self.flags()[option].canonical
        if not value:
            raise ConfigError(f"--framework {framework}: give {flag} DIR")
        root = Path(value).resolve()
        if not (root / inside).is_file():
            raise ConfigError(f"{flag} {value}: no {inside} there")
        return root


def resolve_for_framework(launch: LaunchConfig[FrameworkConfig], runner: str) -> tuple:
    """`ckpt_bench.backends.megatron.launcher.resolve`, plus the mock data a framework needs without a data path."""
    experiment, args, sizes = resolve(launch, runner)
    if not args.get("data_path"):
        args["mock_data"] = True
        args.setdefault("tokenizer_type", "NullTokenizer")
    return experiment, args, sizes


def framework_plan(launch: LaunchConfig[FrameworkConfig], experiment, args: dict, sizes: dict,
                   passes: list[WorkerPass], bind: Callable, collect: Callable, worker_module: str,
                   storage: CheckpointStorage | None = None, msc: bool | None = None,
                   notes: list[str] | None = None) -> Plan:
    """A framework's plan: its own save and load passes, reported from its logs (no integrity check:
    the framework does not digest what it saved). Its ranks read no spec of ours. `storage`: where the checkpoints
    go (default: the save dir's); `msc`: whether its megatron-core reaches it through multi-storage-client (None:
    not known)."""
    config = launch.options
    storage = storage or storage_for(checkpoint_parent(config, args), config)
    return Plan(
        name=experiment.exp_name,
        worker_module=worker_module,
        resolved_config={**replace(experiment, args=args).to_yaml_dict(), "exp_root": str(experiment.exp_root)},
        run_info=replace(run_info(args, sizes, launch, storage, msc), experiment=experiment.label),
        passes=[*config.preflight_passes(), *passes],
        checkpoints=config.checkpoints(storage,
                                       writers_per_rank=rules.writers_per_rank(args)),
        show_progress=shows_progress,
        bind=bind,
        collect=collect,
        verifies=False,
        notes=[*experiment.name_notes, *(notes or ())],
    )


def pass_args(args: dict, checkpoint_dir: str, phase: str) -> dict:
    if phase == "save":
        return {**args, "save": checkpoint_dir, "load": None}
    return {**args, "save": None, "load": checkpoint_dir, "exit_on_missing_checkpoint": True}


def record_events(run: RunDir, paths: list[Path]) -> list[str]:
    """Parse the framework's logs into the run's events/ (as our workers would have written them)."""
    by_rank: dict[int, list[str]] = {}
    for event in events_of(paths):
        by_rank.setdefault(event.rank or 0, []).append(event.to_json())  # Megatron prints on rank 0
    run.events_dir.mkdir(parents=True, exist_ok=True)
    for rank, lines in by_rank.items():
        (run.events_dir / f"rank-{rank}.jsonl").write_text("\n".join(lines) + "\n")
    found = ", ".join(str(p.relative_to(run.path)) for p in paths)
    if by_rank:
        return [f"events parsed from the framework's logs: {found}"]
    if not paths:  # e.g. its launcher script stopped before the trainer started
        return ["no log of the framework's found to read checkpoint events from: each pass's console.log under "
                f"{run.path / 'logs'} holds what it printed"]
    return [f"no checkpoint event found in the framework's logs ({found})"]
