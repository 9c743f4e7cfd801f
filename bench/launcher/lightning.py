"""The PyTorch Lightning backend, launcher side: dataflux's Lightning checkpoint benchmark as a plan.

Lightning's demo Transformer (size set by `--num-layers`) is trained a few steps, then
`trainer.save_checkpoint` runs `--save-calls` times (pass "save") and, in fresh processes,
`trainer.strategy.load_checkpoint` runs `--load-calls` times on the last checkpoint (pass "load").
The ranks run `bench.lightning.worker`; see there for what is timed.

dataflux's environment variables stand in for flags that were not given (flags win):

    CKPT_DIR_PATH -> --save-dir      NUM_SAVE_CALLS -> --save-calls    NUM_NODES   -> --nnodes
    CKPT_RESTORE_PATH (see below)    NUM_LOAD_CALLS -> --load-calls    NUM_DEVICES -> --nproc-per-node
    NUM_LAYERS    -> --num-layers    STEPS_PER_SAVE -> --steps-per-save ACCELERATOR -> --accelerator

The load pass reads back what this run saved (that is what is timed and verified), so
CKPT_RESTORE_PATH may only name the same place as the save dir (alone, it is the save dir).
NUM_LOAD_CALLS=0 skips the load pass.

Refused before anything is created: unknown strategy or accelerator, loads without saves,
FSDP2 with --async-save or object storage (Lightning's ModelParallelStrategy writes DCP to a local
path itself and never calls the CheckpointIO, so neither AsyncCheckpointIO nor an S3 plugin would be
used), an fsspec URL whose filesystem package is missing (`bench.storage.FsspecStorage`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from bench.config import ConfigError, parse_assignment
from bench.launcher.base import ASYNC_SAVE, DIST_BACKEND, SAVE_CALLS, SET, Backend, CheckpointOptions, Plan, WorkerPass
from bench.launcher.comms import PreflightOptions
from bench.launcher.config import LaunchConfig
from bench.launcher.dcp import check_dist_backend
from bench.lightning.spec import STRATEGY_CLASSES
from bench.options import Flag
from bench.rundir import MEASUREMENTS_FILE
from bench.storage import StorageOptions, storage_for

STRATEGIES = ("ddp", "fsdp")
ACCELERATORS = ("auto", "cpu", "gpu")
# --set keys: the demo Transformer's sizes and the training around the saves.
TUNABLES = {"vocab_size": 33278, "ninp": 200, "nhid": 200, "nhead": 2, "block_size": 35, "batch_size": 1,
            "train_steps": 2, "seed": 1234}

# dataflux variable -> option; integer options are parsed, a bad value named.
ENV_OPTIONS = {
    "CKPT_DIR_PATH": "save_dir",
    "NUM_LAYERS": "num_layers",
    "ACCELERATOR": "accelerator",
    "NUM_SAVE_CALLS": "save_calls",
    "NUM_LOAD_CALLS": "load_calls",
    "NUM_NODES": "nnodes",
    "NUM_DEVICES": "nproc_per_node",
    "STEPS_PER_SAVE": "steps_per_save",
}
_INT_OPTIONS = {"num_layers", "save_calls", "load_calls", "nnodes", "nproc_per_node", "steps_per_save"}
_MIN_ZERO = {"save_calls", "load_calls"}  # 0 is a request (no loads) we can answer, or refuse clearly

_PROGRESS = re.compile(r"^(saved|loaded|fit without saves)")


def _tunables(assignments) -> dict:
    values = dict(TUNABLES)
    for text in assignments or ():
        key, value = parse_assignment(text)
        if key not in TUNABLES:
            raise ConfigError(f"--set {key}: not a Lightning setting; use one of {', '.join(TUNABLES)}")
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "seed" else 1):
            raise ConfigError(f"--set {key}={value!r}: must be a positive integer")
        values[key] = value
    if values["ninp"] % values["nhead"]:
        raise ConfigError(f"--set nhead={values['nhead']}: must divide ninp={values['ninp']}")
    return values


@dataclass
class LightningConfig(CheckpointOptions, PreflightOptions, StorageOptions):
    """The Lightning backend's options."""

    strategy: str = Flag(("--strategy",), "ddp or fsdp (FSDP2).").field("ddp")
    accelerator: str = Flag(("--accelerator",), "cpu, gpu or auto (default: gpu when CUDA is available).").field(
        "auto")
    num_layers: int = Flag(("--num-layers",), "Transformer layers (model size).", type=int, min=1).field(10)
    steps_per_save: int | None = Flag(("--steps-per-save",), "Save during fit every N steps and measure the "
                                      "training-time impact.", type=int, min=1).field()
    save_calls: int = SAVE_CALLS.field(3)
    load_calls: int = Flag(("--load-calls",), "Number of loads.", type=int, min=1).field(3)
    async_save: bool = ASYNC_SAVE.field(False)
    dist_backend: str | None = DIST_BACKEND.field()
    set: tuple[str, ...] = SET.field(())
    env_options: dict = field(default_factory=dict)  # dataflux variables used, by name
    model: dict = field(init=False)  # the demo Transformer's sizes and training (from --set)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.strategy = self.strategy.lower()
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"--strategy {self.strategy!r} is not supported: use one of {', '.join(STRATEGIES)}")
        if self.save_calls < 1:
            raise ConfigError(f"--save-calls {self.save_calls}: nothing would be saved"
                              + (f", so the {self.load_calls} load call(s) would have nothing to load"
                                 if self.load_calls else ""))
        if self.strategy == "fsdp" and self.async_save:
            raise ConfigError("--async-save with --strategy fsdp: Lightning's ModelParallelStrategy saves with DCP "
                              "itself and never calls the CheckpointIO, so AsyncCheckpointIO would not be used; "
                              "use ddp")
        self.model = _tunables(self.set)


def _env_value(name: str, option: str, text: str):
    if option not in _INT_OPTIONS:
        return text.strip()
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r}: expected an integer") from None
    if value < (0 if option in _MIN_ZERO else 1):
        raise ConfigError(f"{name}={value}: must be at least {0 if option in _MIN_ZERO else 1}")
    return value


def _same_place(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/") or (
        "://" not in a and "://" not in b and os.path.abspath(a) == os.path.abspath(b))


def options_from_env(values: Mapping, environ: Mapping[str, str], given: set[str] | None = None) -> dict:
    """`values` with dataflux's variables filling the options not `given` (default: those whose value
    is None); `env_options` records which variables were used."""
    given = {k for k, v in values.items() if v is not None} if given is None else given
    resolved = dict(values)
    used = {}
    for name, option in ENV_OPTIONS.items():
        if environ.get(name, "").strip() and option not in given:
            resolved[option] = used[name] = _env_value(name, option, environ[name])
    restore = environ.get("CKPT_RESTORE_PATH", "").strip()
    if restore:
        if resolved.get("save_dir") is None:
            resolved["save_dir"] = used["CKPT_RESTORE_PATH"] = restore
        elif not _same_place(restore, resolved["save_dir"]):
            raise ConfigError(
                f"CKPT_RESTORE_PATH={restore} differs from the save dir {resolved['save_dir']}: ckpt-bench loads "
                "back the checkpoints this run saves (to time and verify them); unset it or make them equal")
        else:
            used["CKPT_RESTORE_PATH"] = restore
    resolved["env_options"] = used
    return resolved


def _accelerator(requested: str) -> str:
    requested = (requested or "auto").lower()
    requested = "gpu" if requested == "cuda" else requested
    if requested not in ACCELERATORS:
        raise ConfigError(f"accelerator {requested!r} is not supported: use one of {', '.join(ACCELERATORS)}")
    import torch

    if requested == "auto":
        return "gpu" if torch.cuda.is_available() else "cpu"
    if requested == "gpu" and not torch.cuda.is_available():
        raise ConfigError("accelerator gpu: no CUDA GPU is visible here; use --accelerator cpu")
    return requested


def run_info(spec: dict, launch: LaunchConfig, env_options: dict) -> dict:
    from bench.lightning.model import parameter_count  # torch and lightning: only once a Lightning run is planned

    world_size = launch.topology.world_size
    return {
        "world_size": world_size,
        "data_parallel_size": world_size,  # DDP replicates; FSDP2 shards over one data-parallel mesh of all ranks
        "ckpt_format": "lightning_dcp" if spec["strategy"] == "fsdp" else "lightning",
        "ckpt_fully_parallel_save": None,
        "ckpt_fully_parallel_load": None,
        "async_save": spec["async_save"],
        "save_interval": spec["steps_per_save"],
        "optimizer": "adam",
        "use_distributed_optimizer": None,
        "params_dtype": "torch.float32",
        "main_params_dtype": None,
        "exp_avg_dtype": "torch.float32",
        "exp_avg_sq_dtype": "torch.float32",
        # Beyond the Primus keys.
        "backend": "lightning",
        "strategy": spec["strategy"],
        "strategy_class": STRATEGY_CLASSES[spec["strategy"]],
        "accelerator": spec["accelerator"],
        "dist_backend": spec["dist_backend"],
        "num_layers": spec["num_layers"],
        "model_parameters": parameter_count(spec["num_layers"], **spec["model"]),
        "model": spec["model"],
        "save_calls": spec["save_calls"],
        "load_calls": spec["load_calls"],
        "steps_per_save": spec["steps_per_save"],
        "train_steps": spec["train_steps"],
        "nnodes": launch.topology.nnodes,
        "nproc_per_node": launch.topology.nproc_per_node,
        "env_options": env_options or None,
        **{k: v for k, v in spec["storage"].items() if k != "scheme"},
        "storage_scheme": spec["storage"]["scheme"],
        # FSDP2's DCP folder: FileSystemWriter fsyncs by default; DDP's single file: torch.save, no fsync.
        "fsync": (spec["strategy"] == "fsdp") if spec["storage"]["scheme"] in ("local", "file") else None,
    }


class LightningBackend(Backend):
    name = "lightning"
    title = "Lightning backend (--backend lightning): trainer.save_checkpoint / strategy.load_checkpoint"
    Config = LightningConfig

    @classmethod
    def environment_options(cls, values: Mapping, environ: Mapping[str, str], given: set[str]) -> dict:
        """dataflux's variables, for the options no flag set: NUM_NODES/NUM_DEVICES and CKPT_DIR_PATH
        shape the topology and the save dir like the flags they stand for."""
        return options_from_env(values, environ, given)

    def plan(self, launch: LaunchConfig) -> Plan:
        config: LightningConfig = launch.options
        save_dir = config.save_dir
        scheme = save_dir.split("://", 1)[0] if save_dir and "://" in save_dir else "local"
        if config.strategy == "fsdp" and scheme != "local":
            raise ConfigError(f"--save-dir {save_dir} with --strategy fsdp: Lightning's ModelParallelStrategy "
                              "writes its DCP folder to a local path only; use a local --save-dir or --strategy ddp")
        storage = storage_for(save_dir, config)
        accelerator = _accelerator(config.accelerator)
        dist_backend = config.dist_backend or ("nccl" if accelerator == "gpu" else "gloo")
        if dist_backend == "nccl" and accelerator == "cpu":
            raise ConfigError("--dist-backend nccl needs --accelerator gpu; use --dist-backend gloo on CPU")
        check_dist_backend(dist_backend, launch.topology.nproc_per_node)
        tunables = dict(config.model)
        spec = {
            "strategy": config.strategy,
            "accelerator": accelerator,
            "dist_backend": dist_backend,
            "num_layers": config.num_layers,
            "save_calls": config.save_calls,
            "load_calls": config.load_calls,
            "steps_per_save": config.steps_per_save,
            "async_save": config.async_save,
            "train_steps": tunables.pop("train_steps"),
            "seed": tunables.pop("seed"),
            "model": tunables,
            "storage": {**storage.describe(), "scheme": scheme},
        }
        passes = [*config.preflight_passes(dist_backend), WorkerPass("save", ["--phase", "save"])]
        if spec["load_calls"]:
            passes.append(WorkerPass("load", ["--phase", "load"]))
        name = f"lightning-{spec['strategy']}-{spec['num_layers']}l" + ("-async" if spec["async_save"] else "")
        return Plan(
            name=name,
            worker_module="bench.lightning.worker",
            resolved_config={"lightning": spec, "save_dir": save_dir},
            spec={"lightning": spec},
            run_info=run_info(spec, launch, config.env_options),
            passes=passes,
            checkpoints=config.checkpoints(storage),
            show_progress=lambda line: bool(_PROGRESS.search(line.strip())),
            collect=training_impact_notes,
        )


def training_impact_notes(run) -> list[str]:
    """`--steps-per-save`: the worker's fit timings (measurements.json) as a line of the report."""
    path = run.path / MEASUREMENTS_FILE
    if not path.is_file():
        return []
    t = json.loads(path.read_text())["training"]
    return [f"training-time impact of {t['saves']} {'async' if t['async_save'] else 'sync'} save(s), one every "
            f"{t['steps_per_save']} steps: {t['save_impact_time']:+.3f} s ({t['save_impact_percent']:+.1f}%) -- "
            f"fit {t['fit_time_without_saves']:.3f} s without saves, {t['fit_time_with_saves']:.3f} s with"]
