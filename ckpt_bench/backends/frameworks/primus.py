"""`--framework primus --primus-path DIR`: the resolved experiment written as Primus YAML (`EXP`), and
Primus's `examples/run_pretrain.sh` with `NNODES NODE_RANK MASTER_ADDR MASTER_PORT GPUS_PER_NODE`; the
script runs torchrun itself. Each pass gets its own Primus workspace inside the run directory, so its
`<exp_root>/logs/pre_trainer` holds that pass's logs only. See `ckpt_bench.backends.frameworks.common`."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from ckpt_bench.backends.frameworks.common import (
    FrameworkConfig,
    framework_plan,
    pass_args,
    record_events,
    resolve_for_framework,
)
from ckpt_bench.backends.megatron.launcher import preview
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.experiment import PrimusCheckout
from ckpt_bench.core.rundir import RunDir
from ckpt_bench.launcher import nodes
from ckpt_bench.launcher.base import Backend, Plan, WorkerPass
from ckpt_bench.launcher.config import LaunchConfig

SCRIPT = "examples/run_pretrain.sh"


@dataclass
class PrimusConfig(FrameworkConfig):
    """The Megatron experiment's options and Primus's checkout."""

    CHECKS_MEGATRON_LM_NAMES = False  # Primus reads keys of its own beside Megatron-LM's: they are its to check

    def __post_init__(self) -> None:
        super().__post_init__()
        found = PrimusCheckout.find(self.primus_path, Path(self.config) if self.config else None)
        if found is None:
            raise ConfigError("--framework primus: give --primus-path DIR (or set PRIMUS_PATH, or run from inside "
                              "a Primus checkout)")
        if not (found.root / SCRIPT).is_file():
            raise ConfigError(f"Primus checkout {found.root} ({found.found_as}): no {SCRIPT} there")
        self.root = found.root


def resolve_primus(launch: LaunchConfig[PrimusConfig]) -> tuple:
    """`resolve_for_framework`, for an experiment whose presets Primus itself can find (its own tree's)."""
    experiment, args, sizes = resolve_for_framework(launch, "--framework primus")
    if experiment.primus is None:
        raise ConfigError(f"--framework primus: {experiment.path} names ckpt-bench's own presets, which Primus "
                          "cannot find; give --config with an experiment of Primus's (examples/megatron/configs/) "
                          "or one naming Primus's presets")
    if "disable_last_saving" in args:  # a Primus key its examples set: the save pass saves at its end too
        args["disable_last_saving"] = False
    return experiment, args, sizes


def overrides_for_primus(experiment, args: dict) -> dict:
    """The experiment's own overrides, and the arguments our options and run set or changed (the passes'
    lengths, --tp, mock data, ...): never what Primus's presets give anyway."""
    changed = {key: value for key, value in args.items()
               if key not in experiment.args or experiment.args[key] != value}
    return {**experiment.overrides, **changed}


class PrimusBackend(Backend[PrimusConfig]):
    name = "primus"
    title = "Primus (--framework primus): Primus's run_pretrain.sh, timed from its logs"
    Config = PrimusConfig
    framework = True

    def preview(self, launch: LaunchConfig[PrimusConfig]) -> dict:
        experiment, args, sizes = resolve_primus(launch)
        return preview(experiment, args, sizes, launch, overrides_for_primus=overrides_for_primus(experiment, args))

    def plan(self, launch: LaunchConfig[PrimusConfig]) -> Plan:
        config = launch.options
        experiment, args, sizes = resolve_primus(launch)
        primus_overrides = overrides_for_primus(experiment, args)

        def preset_name(preset: Path | None, kind: str) -> str | None:
            """The name Primus's PresetLoader finds `preset` by (subfolders kept)."""
            if preset is None:
                return None
            folder = config.root / "primus" / "configs" / kind / experiment.framework
            return preset.relative_to(folder).as_posix() if preset.is_relative_to(folder) else str(preset)
        topology = launch.topology
        # The load reads a cold checkpoint, as ours do: the lifecycle evicts it first.
        passes = [WorkerPass(phase, [], command=["bash", str(config.root / SCRIPT)], cwd=str(config.root),
                             evict_before=phase == "load")
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
                # Primus finds its own presets by name; the overrides are the experiment's own and what our
                # options changed, so Primus resolves everything else as it would without us.
                module["config"] = preset_name(experiment.module_preset, "modules")
                module["model"] = preset_name(experiment.model_preset, "models")
                module["overrides"] = pass_args(primus_overrides, checkpoint_dir, worker_pass.name)
                path = run.path / "primus" / f"{worker_pass.name}.yaml"
                nodes.write_atomic(path, yaml.safe_dump(document, sort_keys=False))
                if checkpoint_dir is not None and "://" not in checkpoint_dir:
                    # Primus saves to <exp_root>/checkpoints whatever `save` says (its checkpoint_path patch):
                    # there, the run's own checkpoint folder, so the sizes, the load and the clean-up find it.
                    link = exp_root(run, worker_pass.name) / "checkpoints"
                    link.parent.mkdir(parents=True, exist_ok=True)
                    with contextlib.suppress(FileExistsError):  # every node binds the one run directory
                        link.symlink_to(checkpoint_dir, target_is_directory=True)
                worker_pass.env = {
                    "EXP": str(path), "NNODES": str(topology.nnodes), "NODE_RANK": str(topology.node_rank),
                    "MASTER_ADDR": master_addr, "MASTER_PORT": master_port,
                    "GPUS_PER_NODE": str(topology.nproc_per_node),
                    # The script pip-installs Primus's requirements.txt into the running Python on every start
                    # unless told not to: a benchmark changes no environment (and a node has no network). The
                    # image has them (rocm/primus), or the user installs them once; PRIMUS_SKIP_PIP=0 restores it.
                    "PRIMUS_SKIP_PIP": os.environ.get("PRIMUS_SKIP_PIP", "1"),
                }

        def collect(run: RunDir) -> list[str]:
            folders = [exp_root(run, p.name) / "logs" / "pre_trainer" for p in passes]
            return record_events(run, [f for f in folders if f.is_dir()])

        # The passes run Primus's script, which starts torchrun itself: no worker module.
        return framework_plan(launch, experiment, args, sizes, passes, bind, collect, worker_module="")
