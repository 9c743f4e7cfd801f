"""The PyTorch Lightning backend, launcher side: dataflux's Lightning checkpoint benchmark as a plan.

Lightning's demo Transformer (size set by `--num-layers`), or a named checkpoint shape (`--model`,
as s3torchbenchmarking's Lightning benchmark saves a Hugging Face model), is trained a few steps
(`--set train_steps=N`, 0: none), then `trainer.save_checkpoint` runs `--save-calls` times (pass
"save") and, in fresh processes, `trainer.strategy.load_checkpoint` runs `--load-calls` times on the
last checkpoint (pass "load"). The ranks run `ckpt_bench.backends.lightning.worker`; see there for what is timed.

dataflux's environment variables stand in for flags that were not given (flags win):

    CKPT_DIR_PATH -> --save-dir      NUM_SAVE_CALLS -> --save-calls    NUM_NODES   -> --nnodes
    CKPT_RESTORE_PATH (see below)    NUM_LOAD_CALLS -> --load-calls    NUM_DEVICES -> --nproc-per-node
    NUM_LAYERS    -> --num-layers    STEPS_PER_SAVE -> --steps-per-save ACCELERATOR -> --accelerator
    USE_ASYNC=1   -> --async-save    MAX_STEPS      -> --set train_steps=N

NUM_DEVICES=auto is Lightning's `devices="auto"`: every visible GPU (with a GPU accelerator), else one
CPU process. The load pass reads back what this run saved (that is what is timed and verified), so
CKPT_RESTORE_PATH may only name the save dir or, as dataflux documents it, `${CKPT_DIR_PATH}/checkpoints`:
then the run saves below that folder, as dataflux does. NUM_LOAD_CALLS=0 skips the load pass. PROJECT,
MIN_EPOCHS, MAX_EPOCHS and SAVE_ONLY_LATEST have no meaning here (`RECORDED_ONLY` says why): they are
recorded in `config.env_options` and the report's notes say so.

Refused before anything is created: unknown strategy or accelerator, loads without saves,
FSDP2 with --async-save or object storage (Lightning's ModelParallelStrategy writes DCP to a local
path itself and never calls the CheckpointIO, so neither AsyncCheckpointIO nor an S3 plugin would be
used), an fsspec URL whose filesystem package is missing (`ckpt_bench.storage.FsspecStorage`).
"""

from __future__ import annotations

import json
import os
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field

from ckpt_bench.backends.comms.launcher import PreflightOptions
from ckpt_bench.backends.dcp import models
from ckpt_bench.backends.dcp.launcher import DcpConfig, check_dist_backend
from ckpt_bench.backends.lightning.spec import MODEL_DEFAULTS, STRATEGY_CLASSES, LightningSpec, parameter_count
from ckpt_bench.core.environment import gpu_count
from ckpt_bench.core.errors import ConfigError, did_you_mean
from ckpt_bench.core.events import event_files, read_event_files
from ckpt_bench.core.experiment import parse_assignment
from ckpt_bench.core.options import Flag
from ckpt_bench.core.rundir import MEASUREMENTS_FILE
from ckpt_bench.core.units import GIB
from ckpt_bench.launcher.base import (
    ASYNC_SAVE,
    DIST_BACKEND,
    LOAD_CALLS,
    SAVE_CALLS,
    SET,
    Backend,
    CheckpointOptions,
    Plan,
    WorkerPass,
)
from ckpt_bench.launcher.config import LaunchConfig
from ckpt_bench.launcher.resources import RANK_BASE_BYTES, check_host_memory
from ckpt_bench.launcher.run_info import Ranks, RunInfo, SaveConfig
from ckpt_bench.report.engine import rank_durations
from ckpt_bench.storage import StorageOptions, storage_for

STRATEGIES = ("ddp", "fsdp")
ACCELERATORS = ("auto", "cpu", "gpu")
# --set keys: the demo Transformer's sizes and the training around the saves (train_steps 0: no training).
TUNABLES = {**MODEL_DEFAULTS, "train_steps": 2, "seed": 1234}

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
    "USE_ASYNC": "async_save",
}
_INT_OPTIONS = {"num_layers", "save_calls", "load_calls", "nnodes", "nproc_per_node", "steps_per_save"}
_MIN_ZERO = {"save_calls", "load_calls"}  # 0 is a request (no loads) we can answer, or refuse clearly
# dataflux's variables that mean nothing to this benchmark: recorded, and the report says why.
RECORDED_ONLY = {
    "PROJECT": "the Google Cloud project of dataflux's GCS client; the storage here follows the save dir's URL",
    "MIN_EPOCHS": "the save calls follow a fit of train_steps steps (MAX_STEPS), not epochs",
    "MAX_EPOCHS": "the save calls follow a fit of train_steps steps (MAX_STEPS), not epochs",
    "SAVE_ONLY_LATEST": "every save call writes its own iter_* folder; all are kept until the report, then removed "
                        "unless --keep-checkpoints",
}
RESTORE_SUBDIR = "checkpoints"  # dataflux saves to ${CKPT_DIR_PATH}/checkpoints/ and restores from there
MODEL = DcpConfig.flags()["model"]  # the same --model as the DCP backend: one flag, the same named shapes

_PROGRESS = re.compile(r"^(saved|loaded|fit without saves)")


def _tunables(assignments) -> dict:
    values = dict(TUNABLES)
    for text in assignments or ():
        key, value = parse_assignment(text)
        if key not in TUNABLES:
            raise ConfigError(f"--set {key}: not a Lightning setting{did_you_mean(key, TUNABLES)} (the settings: "
                              f"{', '.join(TUNABLES)})")
        lowest = 0 if key in ("seed", "train_steps") else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            raise ConfigError(f"--set {key}={value!r}: must be {'at least 0' if lowest == 0 else 'a positive integer'}")
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
    model: str | None = MODEL.field()  # None: the demo Transformer
    steps_per_save: int | None = Flag(("--steps-per-save",), "Save during fit every N steps and measure the "
                                      "training-time impact.", type=int, min=1).field()
    save_calls: int = SAVE_CALLS.field(3)
    load_calls: int = LOAD_CALLS.field(3)
    async_save: bool = ASYNC_SAVE.field(False)
    dist_backend: str | None = DIST_BACKEND.field()
    set: tuple[str, ...] = SET.field(())
    env_options: dict = field(default_factory=dict)  # dataflux variables used, by name
    tunables: dict = field(init=False)  # the demo Transformer's sizes and training (from --set)

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
        if self.model is not None and self.model not in models.MODELS:
            raise ConfigError(f"--model {self.model!r} is not known: use one of {', '.join(models.MODELS)}")
        self.tunables = _tunables(self.set)


def checkpoint_bytes(parameters: int, spec: LightningSpec) -> int:
    """One checkpoint's bytes: the float32 weights, and once trained Adam's two moments (Lightning saves the
    optimizer state with the model)."""
    return parameters * 4 * (3 if spec.train_steps > 0 else 1)


def check_memory(parameters: int, spec: LightningSpec, ranks_per_host: int, world_size: int) -> None:
    """Refuse, with one line, a model this CPU host's ranks cannot hold. Per parameter (float32) a rank
    holds its weight, and after training its gradient and Adam's two moments; DDP's load reads the
    whole checkpoint (weights and moments) beside the model, and an async save clones it
    (AsyncCheckpointIO); FSDP2 shards all of it over the ranks and loads in place. A floor: the
    activations and the allocator's slack are left out. (On GPUs the state is on the devices.)"""
    trains = spec.train_steps > 0
    state = parameters * 4 * (4 if trains else 1)
    checkpoint = checkpoint_bytes(parameters, spec)
    sharded = spec.strategy == "fsdp"
    per_rank = RANK_BASE_BYTES + (state / world_size if sharded else state + checkpoint)
    what = "its shard of the state" if sharded else "the state and a loaded or cloned checkpoint"
    check_host_memory(
        ranks_per_host * int(per_rank),
        f"{parameters / 1e9:.2f}B parameters in float32 ({'with gradients and Adam state' if trains else 'untrained'})"
        f": {ranks_per_host} rank(s) on this host at {per_rank / GIB:.1f} GiB each ({what}, the process "
        f"{RANK_BASE_BYTES / GIB:.2f} GiB)",
        "use a smaller model (--num-layers, --model), --strategy fsdp, fewer ranks, or a host with more memory")


def _env_value(name: str, option: str, text: str, environ: Mapping[str, str]):
    if option == "async_save":
        return text.strip() == "1"  # dataflux: USE_ASYNC=1 turns async saves on
    if option == "nproc_per_node" and text.strip().lower() == "auto":
        return _auto_devices(environ.get("ACCELERATOR", ""))
    if option not in _INT_OPTIONS:
        return text.strip()
    try:
        value = int(text)
    except ValueError:
        valid = " or auto" if option == "nproc_per_node" else ""
        raise ConfigError(f"{name}={text!r}: expected an integer{valid}") from None
    if value < (0 if option in _MIN_ZERO else 1):
        raise ConfigError(f"{name}={value}: must be at least {0 if option in _MIN_ZERO else 1}")
    return value


def _auto_devices(accelerator: str) -> int:
    """Lightning's `devices="auto"`: every visible GPU unless the accelerator is the CPU, else one process."""
    if accelerator.strip().lower() == "cpu":
        return 1
    return gpu_count() or 1


def _same_place(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/") or (
        "://" not in a and "://" not in b and os.path.abspath(a) == os.path.abspath(b))


def _restore_dir(restore: str, save_dir: str) -> str:
    """Where the run saves for CKPT_RESTORE_PATH: the save dir itself, or dataflux's
    `<save dir>/checkpoints` (the run then saves there, as dataflux does); refused otherwise."""
    if _same_place(restore, save_dir):
        return save_dir
    nested = f"{save_dir.rstrip('/')}/{RESTORE_SUBDIR}"
    if _same_place(restore, nested):
        return nested
    raise ConfigError(
        f"CKPT_RESTORE_PATH={restore} differs from the save dir {save_dir} and from {nested}: ckpt-bench loads back "
        "the checkpoints this run saves (to time and verify them); unset it or make it one of those")


def _max_steps(name: str, text: str) -> str:
    try:
        steps = int(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r}: expected an integer") from None
    if steps < 0:
        raise ConfigError(f"{name}={steps}: must be at least 0")
    return f"train_steps={steps}"


def options_from_env(values: Mapping, environ: Mapping[str, str], given: set[str] | None = None) -> dict:
    """`values` with dataflux's variables filling the options not `given` (default: those whose value
    is None); `env_options` records which variables were used (those of `RECORDED_ONLY` too)."""
    given = {k for k, v in values.items() if v is not None} if given is None else given
    resolved = dict(values)
    used = {}
    for name, option in ENV_OPTIONS.items():
        if environ.get(name, "").strip() and option not in given:
            resolved[option] = _env_value(name, option, environ[name], environ)
            used[name] = environ[name].strip() if environ[name].strip().lower() == "auto" else resolved[option]
    steps = environ.get("MAX_STEPS", "").strip()
    assignments = tuple(resolved.get("set") or ())
    if steps and not any(a.split("=", 1)[0].strip() == "train_steps" for a in assignments):
        resolved["set"] = (*assignments, _max_steps("MAX_STEPS", steps))
        used["MAX_STEPS"] = int(steps)
    restore = environ.get("CKPT_RESTORE_PATH", "").strip()
    if restore:
        if resolved.get("save_dir") is None:
            resolved["save_dir"] = restore
        else:
            resolved["save_dir"] = _restore_dir(restore, resolved["save_dir"])
        used["CKPT_RESTORE_PATH"] = restore
    used.update({name: environ[name] for name in RECORDED_ONLY if environ.get(name, "").strip()})
    resolved["env_options"] = used
    return resolved


def env_notes(env_options: Mapping[str, object]) -> list[str]:
    """The report's words on dataflux variables that were read but mean nothing here."""
    return [f"{name}={env_options[name]} is recorded but has no meaning here: {why}"
            for name, why in RECORDED_ONLY.items() if name in env_options]


def _accelerator(requested: str) -> str:
    requested = (requested or "auto").lower()
    requested = "gpu" if requested == "cuda" else requested
    if requested not in ACCELERATORS:
        raise ConfigError(f"accelerator {requested!r} is not supported: use one of {', '.join(ACCELERATORS)}")
    if requested == "auto":
        return "gpu" if gpu_count() else "cpu"
    if requested == "gpu" and not gpu_count():
        raise ConfigError("accelerator gpu: no CUDA GPU is visible here; use --accelerator cpu")
    return requested


@dataclass(kw_only=True)
class LightningRunInfo(RunInfo):
    """A Lightning run: the strategy, the model and the calls."""

    strategy: str
    strategy_class: str
    """What --strategy runs (`spec.STRATEGY_CLASSES`)."""
    accelerator: str
    dist_backend: str
    num_layers: int | None
    """The demo Transformer's layers; None with a named model."""
    named_model: str | None
    model_parameters: int
    model_state_bytes: int
    """float32 parameters, without optimizer state."""
    model: dict | None
    """The demo Transformer's sizes; None with a named model."""
    save_calls: int
    load_calls: int
    steps_per_save: int | None
    train_steps: int
    env_options: dict | None
    """dataflux's variables that were read, by name."""
    storage_scheme: str


def run_info(spec: LightningSpec, launch: LaunchConfig, env_options: dict) -> LightningRunInfo:
    named = spec.named_model
    parameters = models.parameter_count(named) if named else parameter_count(spec.num_layers, **spec.model)
    scheme = spec.storage["scheme"]
    return LightningRunInfo(
        backend="lightning",
        ranks=Ranks.of(launch.topology),
        saves=SaveConfig(
            # DDP replicates; FSDP2 shards over one data-parallel mesh of all ranks.
            data_parallel_size=launch.topology.world_size,
            ckpt_format="lightning_dcp" if spec.strategy == "fsdp" else "lightning",
            async_save=spec.async_save,
            save_interval=spec.steps_per_save,
            optimizer="adam",
            params_dtype="torch.float32",
            exp_avg_dtype="torch.float32",
            exp_avg_sq_dtype="torch.float32",
            # FSDP2's DCP folder: FileSystemWriter fsyncs by default; DDP's single file: torch.save, no fsync.
            fsync=(spec.strategy == "fsdp") if scheme in ("local", "file") else None,
        ),
        storage={key: value for key, value in spec.storage.items() if key != "scheme"},
        strategy=spec.strategy,
        strategy_class=STRATEGY_CLASSES[spec.strategy],
        accelerator=spec.accelerator,
        dist_backend=spec.dist_backend,
        num_layers=None if named else spec.num_layers,
        named_model=named,
        model_parameters=parameters,
        model_state_bytes=parameters * 4,
        model=None if named else spec.model,
        save_calls=spec.save_calls,
        load_calls=spec.load_calls,
        steps_per_save=spec.steps_per_save,
        train_steps=spec.train_steps,
        env_options=env_options or None,
        storage_scheme=scheme,
    )


class LightningBackend(Backend[LightningConfig]):
    name = "lightning"
    title = "Lightning backend (--backend lightning): trainer.save_checkpoint / strategy.load_checkpoint"
    Config = LightningConfig

    @classmethod
    def environment_options(cls, values: Mapping, environ: Mapping[str, str], given: set[str]) -> dict:
        """dataflux's variables, for the options no flag set: NUM_NODES/NUM_DEVICES and CKPT_DIR_PATH
        shape the topology and the save dir like the flags they stand for."""
        return options_from_env(values, environ, given)

    def plan(self, launch: LaunchConfig[LightningConfig]) -> Plan:
        config = launch.options
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
        tunables = dict(config.tunables)
        spec = LightningSpec(
            strategy=config.strategy, accelerator=accelerator, dist_backend=dist_backend,
            num_layers=config.num_layers, named_model=config.model, save_calls=config.save_calls,
            load_calls=config.load_calls, steps_per_save=config.steps_per_save, async_save=config.async_save,
            train_steps=tunables.pop("train_steps"), seed=tunables.pop("seed"), model=tunables,
            storage={**storage.describe(), "scheme": scheme})
        info = run_info(spec, launch, config.env_options)
        if accelerator == "cpu":
            check_memory(info.model_parameters, spec, launch.topology.nproc_per_node, launch.topology.world_size)
        passes = [*config.preflight_passes(dist_backend), WorkerPass("save", ["--phase", "save"])]
        if spec.load_calls:
            passes.append(WorkerPass("load", ["--phase", "load"]))
        size = config.model or f"{spec.num_layers}l"
        name = f"lightning-{spec.strategy}-{size}" + ("-async" if spec.async_save else "")
        return Plan(
            name=name,
            worker_module="ckpt_bench.backends.lightning.worker",
            resolved_config={LightningSpec.section: spec.section_json(), "save_dir": save_dir},
            spec=spec,
            run_info=info,
            passes=passes,
            # Every save is kept until the end (saves during fit: their count is the trainer's, not checked).
            checkpoints=config.checkpoints(storage, expected_bytes=None if spec.steps_per_save else
                                           checkpoint_bytes(info.model_parameters, spec) * spec.save_calls),
            show_progress=lambda line: bool(_PROGRESS.search(line.strip())),
            collect=lambda run: [*training_impact_notes(run), *dataflux_lines(run)],
            notes=env_notes(config.env_options),
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


def dataflux_lines(run) -> list[str]:
    """dataflux's closing lines, from rank 0's events: the time around each `trainer.save_checkpoint`
    call (until it returns: the block time) and each `load_checkpoint` call."""
    files = [path for path in event_files(run.events_dir) if path.stem == "rank-0"]
    events = list(read_event_files(files))
    saves = rank_durations(events, "save", "block").get(0, [])
    loads = rank_durations(events, "load").get(0, [])
    if not saves:
        return []
    average_load = f"{statistics.fmean(loads)} seconds" if loads else "skipped"
    return [f"Average time to save one checkpoint: {statistics.fmean(saves)} seconds",
            f"Average time to load one checkpoint: {average_load}",
            f"All save times: {saves}"]
