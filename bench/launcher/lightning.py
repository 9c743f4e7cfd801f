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

Refused here, before anything is created: unknown strategy or accelerator, loads without saves,
FSDP2 with --async-save or object storage (Lightning's ModelParallelStrategy writes DCP to a local
path itself and never calls the CheckpointIO, so neither AsyncCheckpointIO nor an S3 plugin would be
used), an fsspec URL whose filesystem package is missing (`bench.storage.FsspecStorage`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

from bench.config import ConfigError, parse_assignment
from bench.launcher.base import LaunchSettings, Plan, WorkerPass
from bench.launcher.dcp import check_dist_backend
from bench.lightning.spec import STRATEGY_CLASSES
from bench.rundir import MEASUREMENTS_FILE
from bench.storage import FsspecStorage, storage_for

STRATEGIES = ("ddp", "fsdp")
ACCELERATORS = ("auto", "cpu", "gpu")
DEFAULTS = {"strategy": "ddp", "num_layers": 10, "save_calls": 3, "load_calls": 3, "accelerator": "auto"}
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


def _given_on_command_line(option: str) -> bool:
    """--nnodes/--nproc-per-node have click defaults, so "not given" is asked of click itself."""
    import click
    from click.core import ParameterSource

    context = click.get_current_context(silent=True)
    if context is None or option not in context.params:
        return False
    return context.get_parameter_source(option) not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def options_from_env(options: dict, environ: Mapping[str, str]) -> dict:
    """The options with dataflux's variables filling what no flag set; `env_options` records which
    variables were used."""
    resolved = dict(options)
    used = {}
    for name, option in ENV_OPTIONS.items():
        given = (_given_on_command_line(option) if option in ("nnodes", "nproc_per_node")
                 else resolved.get(option) is not None)
        if environ.get(name, "").strip() and not given:
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


def resolve(settings: LaunchSettings) -> dict:
    """The Lightning settings of a run, validated; raises ConfigError with one line."""
    options = settings.options
    strategy = (options.get("strategy") or DEFAULTS["strategy"]).lower()
    if strategy not in STRATEGIES:
        raise ConfigError(f"--strategy {strategy!r} is not supported: use one of {', '.join(STRATEGIES)}")
    value = {key: DEFAULTS[key] if options.get(key) is None else options[key] for key in DEFAULTS}
    if value["save_calls"] < 1:
        raise ConfigError(f"--save-calls {value['save_calls']}: nothing would be saved"
                          + (f", so the {value['load_calls']} load call(s) would have nothing to load"
                             if value["load_calls"] else ""))
    async_save = bool(options.get("async_save"))
    save_dir = settings.save_dir
    scheme = save_dir.split("://", 1)[0] if save_dir and "://" in save_dir else "local"
    if strategy == "fsdp" and async_save:
        raise ConfigError("--async-save with --strategy fsdp: Lightning's ModelParallelStrategy saves with DCP itself "
                          "and never calls the CheckpointIO, so AsyncCheckpointIO would not be used; use ddp")
    if strategy == "fsdp" and scheme != "local":
        raise ConfigError(f"--save-dir {save_dir} with --strategy fsdp: Lightning's ModelParallelStrategy writes its "
                          "DCP folder to a local path only; use a local --save-dir or --strategy ddp")
    # Local and s3:// as every backend has them; any other URL goes to Lightning's TorchCheckpointIO,
    # which writes through fsspec (its package -- gcsfs for gs:// -- is checked before the launch).
    storage = FsspecStorage(save_dir) if scheme not in ("local", "s3") else storage_for(save_dir, options)
    accelerator = _accelerator(value["accelerator"])
    dist_backend = options.get("dist_backend") or ("nccl" if accelerator == "gpu" else "gloo")
    if dist_backend == "nccl" and accelerator == "cpu":
        raise ConfigError("--dist-backend nccl needs --accelerator gpu; use --dist-backend gloo on CPU")
    check_dist_backend(dist_backend, settings.topology.nproc_per_node)
    tunables = _tunables(options.get("set"))
    return {
        "strategy": strategy,
        "accelerator": accelerator,
        "dist_backend": dist_backend,
        "num_layers": value["num_layers"],
        "save_calls": value["save_calls"],
        "load_calls": value["load_calls"],
        "steps_per_save": options.get("steps_per_save"),
        "async_save": async_save,
        "train_steps": tunables.pop("train_steps"),
        "seed": tunables.pop("seed"),
        "model": tunables,
        "storage": {**storage.describe(), "scheme": scheme},
        "_storage": storage,
    }


def run_info(spec: dict, settings: LaunchSettings, env_options: dict) -> dict:
    from bench.lightning.model import parameter_count  # torch and lightning: only once a Lightning run is planned

    world_size = settings.topology.world_size
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
        "nnodes": settings.topology.nnodes,
        "nproc_per_node": settings.topology.nproc_per_node,
        "env_options": env_options or None,
        **{k: v for k, v in spec["storage"].items() if k != "scheme"},
        "storage_scheme": spec["storage"]["scheme"],
    }


class LightningBackend:
    name = "lightning"

    def resolve_options(self, options: dict, environ: Mapping[str, str]) -> dict:
        """Called by the CLI before the settings are built, so that NUM_NODES/NUM_DEVICES and
        CKPT_DIR_PATH shape the topology and the save dir like the flags they stand for."""
        return options_from_env(options, environ)

    def plan(self, settings: LaunchSettings) -> Plan:
        spec = resolve(settings)
        storage = spec.pop("_storage")
        passes = [WorkerPass("save", ["--phase", "save"])]
        if spec["load_calls"]:
            passes.append(WorkerPass("load", ["--phase", "load"]))
        name = f"lightning-{spec['strategy']}-{spec['num_layers']}l" + ("-async" if spec["async_save"] else "")
        return Plan(
            name=name,
            worker_module="bench.lightning.worker",
            resolved_config={"lightning": spec, "save_dir": settings.save_dir},
            spec={"lightning": spec},
            run_info=run_info(spec, settings, settings.options.get("env_options")),
            passes=passes,
            checkpoint_parent=settings.save_dir,
            show_progress=lambda line: bool(_PROGRESS.search(line.strip())),
            collect=training_impact_notes,
            storage=storage if isinstance(storage, FsspecStorage) else None,
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
