"""The Megatron backend, launcher side: a Primus experiment in, a validated plan of two passes out.

The save pass trains `train_iters` iterations and saves every `save_interval`; the load pass loads
the last checkpoint into a freshly built model and verifies it. The ranks run `ckpt_bench.backends.megatron.worker`.
`MegatronConfig` is also the base of the framework modes' options (`ckpt_bench.backends.frameworks.common`): they
run the same experiment with the same overrides.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field, replace
from typing import ClassVar

from ckpt_bench.backends.comms.launcher import PreflightOptions
from ckpt_bench.backends.megatron import rules
from ckpt_bench.backends.megatron.memory import check_megatron_memory, checkpoint_bytes
from ckpt_bench.backends.megatron.spec import MegatronSpec
from ckpt_bench.core import megatron_arguments, megatron_release
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.experiment import (
    CONFIGS_DIR,
    DEFAULT_EXPERIMENT,
    Experiment,
    deep_merge,
    load_experiment,
    load_yaml,
    parse_assignment,
)
from ckpt_bench.core.options import Flag
from ckpt_bench.core.rundir import DELETIONS_FILE, RunDir
from ckpt_bench.launcher.base import (
    ASYNC_SAVE,
    PRIMUS_PATH,
    SET,
    Backend,
    CheckpointOptions,
    Plan,
    WorkerPass,
)
from ckpt_bench.launcher.config import LaunchConfig
from ckpt_bench.launcher.resources import visible_gpus
from ckpt_bench.launcher.run_info import Ranks, RunInfo, SaveConfig, fsynced
from ckpt_bench.model.architecture import ArchitectureError, vocabulary
from ckpt_bench.model.families import refuse_unsizable
from ckpt_bench.model.parallel import ParallelError, Parallelism, megatron_parallel_sizes
from ckpt_bench.storage import CheckpointStorage, StorageOptions, storage_for
from ckpt_bench.storage.msc import msc_available

PROGRESS = re.compile(
    r"\biteration\s+\d+/\s*\d+|saving checkpoint|scheduled an async|successfully saved|"
    # A rank's own verdict line (worker.entry), never an argument of the dump (rl_verify_model_weights_swap).
    r"loading (distributed )?checkpoint|successfully loaded|\] verification failed"
)

# Primus's own checkpoint benchmark (benchmark/megatron/checkpoint/ckpt_launch.py) trains 200 iterations and saves
# every 100 unless told otherwise; its experiments train for days and save rarely. So do we for them.
PRIMUS_BENCHMARK_RUN = {"train_iters": 200, "save_interval": 100}

LOAD_TIERS = ("persistent", "non-persistent")

_DTYPE_NAMES = {"fp32": "torch.float32", "fp16": "torch.float16", "bf16": "torch.bfloat16", "fp8": "fp8"}


@dataclass
class MegatronConfig(CheckpointOptions, PreflightOptions, StorageOptions):
    """A Megatron experiment and the command line's overrides of its trainer arguments."""

    # A trainer argument (--set, the experiment) that no Megatron-LM knows is refused as a typo, and values
    # are checked as Megatron-LM's parser reads them (False: as Primus puts them into its namespace).
    CHECKS_MEGATRON_LM_NAMES: ClassVar[bool] = True

    # Option -> the Megatron-LM argument it overrides; `--set` sets any argument, these win over it.
    ARGUMENTS: ClassVar[dict[str, str]] = {
        "tp": "tensor_model_parallel_size",
        "pp": "pipeline_model_parallel_size",
        "ep": "expert_model_parallel_size",
        "cp": "context_parallel_size",
        "train_iters": "train_iters",
        "save_interval": "save_interval",
        "ckpt_format": "ckpt_format",
        "async_save": "async_save",
        "fully_parallel_save": "ckpt_fully_parallel_save",
        "fully_parallel_load": "ckpt_fully_parallel_load",
        "use_distributed_optimizer": "use_distributed_optimizer",
        "use_persistent_ckpt_worker": "use_persistent_ckpt_worker",
        "ckpt_assume_constant_structure": "ckpt_assume_constant_structure",
    }

    config: str | None = Flag(("--config", "--yaml-config-path"), "Primus experiment YAML (default: the embedded "
                              "tiny GPT, ckpt_bench/configs/tiny_gpt.yaml).").field()
    tp: int | None = Flag(("--tp", "--tensor-model-parallel-size"), "Tensor parallel size.", type=int).field()
    pp: int | None = Flag(("--pp", "--pipeline-model-parallel-size"), "Pipeline parallel size.", type=int).field()
    ep: int | None = Flag(("--ep", "--expert-model-parallel-size"), "Expert parallel size.", type=int).field()
    cp: int | None = Flag(("--cp", "--context-parallel-size"), "Context parallel size. DP follows.",
                          type=int).field()
    train_iters: int | None = Flag(("--train-iters",), "Iterations of the save pass.", type=int).field()
    save_interval: int | None = Flag(("--save-interval",), "Save every N iterations.", type=int).field()
    ckpt_format: str | None = Flag(("--ckpt-format",), "torch_dist (sharded) or torch (per-rank files).").field()
    async_save: bool | None = ASYNC_SAVE.field()
    fully_parallel_save: bool | None = Flag(
        ("--fully-parallel-save", "--ckpt-fully-parallel-save"), "Spread the save across data-parallel ranks.",
        type=bool, toggle="--no-fully-parallel-save").field()
    fully_parallel_load: bool | None = Flag(
        ("--fully-parallel-load", "--ckpt-fully-parallel-load"), "Spread the load and exchange shards.",
        type=bool, toggle="--no-fully-parallel-load").field()
    use_distributed_optimizer: bool | None = Flag(
        ("--use-distributed-optimizer",), "Megatron's DistributedOptimizer (sharded optimizer state).", type=bool,
        toggle="--no-use-distributed-optimizer").field()
    use_persistent_ckpt_worker: bool | None = Flag(
        ("--use-persistent-ckpt-worker",), "Async saves through megatron-core's persistent writer process "
        "(what Megatron-LM requires for async distributed saves since late 2025) instead of a forked one per "
        "save.", type=bool, toggle="--no-use-persistent-ckpt-worker").field()
    ckpt_assume_constant_structure: bool | None = Flag(
        ("--ckpt-assume-constant-structure",), "Cache the save plan after the first save (the state's structure "
        "does not change): the first save plans, the later ones reuse it.", type=bool,
        toggle="--no-ckpt-assume-constant-structure").field()
    load_tp: int | None = Flag(("--load-tp",), "Tensor parallel size of the load pass (default: as saved): "
                               "dist_checkpointing reshards.", type=int, min=1).field()
    load_pp: int | None = Flag(("--load-pp",), "Pipeline parallel size of the load pass (default: as saved).",
                               type=int, min=1).field()
    load_ep: int | None = Flag(("--load-ep",), "Expert parallel size of the load pass (default: as saved).",
                               type=int, min=1).field()
    load_nproc_per_node: int | None = Flag(("--load-nproc-per-node",), "Ranks per node of the load pass "
                                           "(default: as saved).", type=int, min=1).field()
    load_tier: str | None = Flag(
        ("--load-tier",), "With non-persistent checkpoints (--set non_persistent_ckpt_type=...), the tier the load "
        "reads: persistent or non-persistent (default: Megatron-LM's choice, the non-persistent checkpoint when it "
        "is not older than the persistent one).", choices=LOAD_TIERS).field()
    set: tuple[str, ...] = SET.field(())
    primus_path: str | None = PRIMUS_PATH.field()
    training_impact: bool = Flag(
        ("--training-impact",), "Train the save pass's iterations twice in the same processes, without saves "
        "and then with them, and report the training-visible cost of saving.", type=bool).field(False)
    settings: dict = field(init=False)  # trainer arguments set with --set
    overrides: dict = field(init=False)  # trainer arguments set on the command line: --set, then the options

    def __post_init__(self) -> None:
        super().__post_init__()
        self.settings = dict(parse_assignment(text) for text in self.set or ())
        if self.CHECKS_MEGATRON_LM_NAMES:
            megatron_arguments.check_settings(self.settings)
        overrides = dict(self.settings)
        for option, argument in self.ARGUMENTS.items():
            if getattr(self, option) is not None:
                overrides[argument] = getattr(self, option)
        self.overrides = overrides

    # Load-layout option -> the Megatron-LM argument it sets in the load pass.
    LOAD_LAYOUT: ClassVar[dict[str, str]] = {
        "load_tp": "tensor_model_parallel_size",
        "load_pp": "pipeline_model_parallel_size",
        "load_ep": "expert_model_parallel_size",
    }

    @property
    def changes_load_layout(self) -> bool:
        return any(getattr(self, option) is not None for option in (*self.LOAD_LAYOUT, "load_nproc_per_node"))

    @classmethod
    def spelling(cls, argument: str) -> str | None:
        """How the command line spells a Megatron-LM argument (`--tp`), for messages."""
        return next((cls.flags()[o].canonical for o, a in cls.ARGUMENTS.items() if a == argument), None)

    def origin(self, argument: str) -> str | None:
        """How a message names an argument this command line set: its option (`--tp`), or `--set KEY`; None
        where the command line did not set it."""
        option = next((o for o, a in self.ARGUMENTS.items() if a == argument and getattr(self, o) is not None), None)
        if option is not None:
            return self.flags()[option].canonical
        return f"--set {argument}" if argument in self.settings else None


def origins(config: MegatronConfig, experiment: Experiment) -> rules.Namer:
    """How a refusal names each trainer argument: by where its value came from (rules.Namer): the command line
    (`--pp`, `--set KEY`), ckpt-bench's run of a Primus experiment, the experiment's file or one of its presets,
    or Megatron-LM's default."""
    run_length = PRIMUS_BENCHMARK_RUN if experiment.primus else {}

    def name(argument: str) -> str:
        if (typed := config.origin(argument)) is not None:
            return typed
        if argument in run_length:
            return f"ckpt-bench's run length for a Primus experiment, {argument}"
        where = experiment.origin(argument)
        return f"{where}'s {argument}" if where else f"Megatron-LM's default {argument}"

    return name


def shows_progress(line: str) -> bool:
    """Rank 0's Megatron log lines worth showing while a pass runs (iterations, saves, loads)."""
    return bool(PROGRESS.search(line))


def resolve(launch: LaunchConfig[MegatronConfig], runner: str,
            experiment: Experiment | None = None) -> tuple[Experiment, dict, dict]:
    """The experiment (read here unless given), its trainer arguments with the command line's overrides,
    checked against Megatron's rules, and the parallel sizes. `runner` names what will run it, for the error
    about a non-Megatron experiment. A key of the experiment that no Megatron-LM knows (a typo) is refused."""
    config = launch.options
    experiment = experiment or load_experiment(config.config or DEFAULT_EXPERIMENT, primus_path=config.primus_path)
    if experiment.framework != "megatron":
        raise ConfigError(f"{experiment.path}: framework {experiment.framework!r} cannot be run by {runner}: "
                          "only Megatron experiments can")
    if experiment.module != "pre_trainer":
        raise ConfigError(f"{experiment.path}: modules.{experiment.module} (stage {experiment.args.get('stage')!r}) "
                          f"is post-training, which {runner} does not run; --workload {experiment.path} --plan "
                          "sizes and writes its model's checkpoints")
    # Primus's presets bring Primus's own keys beside Megatron-LM's: they are Primus's to check.
    if config.CHECKS_MEGATRON_LM_NAMES and experiment.primus is None:
        megatron_arguments.check_known({key: f"{experiment.path} (with its presets)" for key in experiment.args})
    elif not config.CHECKS_MEGATRON_LM_NAMES:  # Primus reads its own keys too: a --set names one or Megatron-LM's
        megatron_arguments.check_settings(config.settings, beside=experiment.args)
    run_length = PRIMUS_BENCHMARK_RUN if experiment.primus else {}
    megatron_arguments.check_given_values(config.settings, experiment, parsed=config.CHECKS_MEGATRON_LM_NAMES)
    args = deep_merge(experiment.args, {**run_length, **config.overrides})
    sizes = rules.check(args, launch.topology.world_size, origins(config, experiment))
    if args.get("sequence_parallel") and sizes["tp"] == 1:
        args["sequence_parallel"] = False  # as Megatron-LM's validate_args does (with a warning) at TP 1
    return experiment, args, sizes


def resolve_gpt(launch: LaunchConfig[MegatronConfig]) -> tuple[Experiment, dict, dict]:
    """`resolve` for the built-in worker, which builds megatron-core's GPTModel: a model family it cannot
    build (Mamba, hybrids, diffusion, ...) is one line, not a GPT of the same sizes. The vocabulary is the one
    Megatron-LM would build: an experiment that names its tokenizer rather than `vocab_size` (Primus's presets)
    gets the tokenizer's, not the worker's default."""
    experiment = load_experiment(launch.options.config or DEFAULT_EXPERIMENT, primus_path=launch.options.primus_path)
    try:
        refuse_unsizable(experiment.args)
    except ArchitectureError as error:
        raise ConfigError(f"{experiment.path}: {error}; the built-in worker builds GPT models") from None
    experiment, args, sizes = resolve(launch, "the built-in worker", experiment)
    if not args.get("vocab_size"):
        try:
            args["vocab_size"] = vocabulary(args)[0]
        except ArchitectureError as error:
            raise ConfigError(f"{experiment.path}: {error}") from None
    return experiment, args, sizes


def built_model_arguments(args: dict) -> dict:
    """The arguments the built-in worker builds its model and layout from: those it acts on. Its `--plan` sizes
    that model; what Megatron-LM would make of the others (MLA, MTP, virtual or uneven pipeline stages, ...)
    is `--framework megatron-lm`'s or `--workload`'s plan, and the run's notes name them."""
    return {key: value for key, value in args.items() if key in megatron_arguments.MEGATRON_DEFAULTS}


def preview(experiment: Experiment, args: dict, sizes: dict, launch: LaunchConfig, built: dict | None = None,
            **extra) -> dict:
    """`--plan` of a Megatron experiment (the built-in worker or a framework): what the ranks would get,
    where each sits, and the checkpoint format; `built`: the arguments the model is built from where not all
    of `args` (the built-in worker's); `extra` adds what a mode writes of its own."""
    world = launch.topology.world_size
    built = args if built is None else built
    primus = experiment.primus
    return {
        "backend": launch.runner,
        "experiment": str(experiment.path),
        "exp_name": experiment.exp_name,
        **({"exp_name_differs": " ".join(experiment.name_notes)} if experiment.name_notes else {}),
        "module": experiment.module,
        "presets_from": f"Primus checkout {primus.root} ({primus.found_as})" if primus else "ckpt-bench's own",
        "model_preset": str(experiment.model_preset) if experiment.model_preset else None,
        "module_preset": str(experiment.module_preset) if experiment.module_preset else None,
        "world_size": world,
        **{f"{name}": sizes[name] for name in ("tp", "pp", "ep", "cp", "dp")},
        "ckpt_format": args.get("ckpt_format"),
        "async_save": bool(args.get("async_save")),
        "use_distributed_optimizer": bool(args.get("use_distributed_optimizer")),
        **checkpoint_sizes(experiment, built, world),
        **extra,
        "layout": rank_coordinates(built, world),
        "arguments": dict(sorted(args.items())),
    }


def rank_coordinates(args: dict, world_size: int) -> list[dict]:
    """Each rank's coordinates as megatron-core numbers them (`ckpt_bench.model.parallel`): dp_rank is the
    rank in the data x context-parallel group (the one the distributed optimizer shards over)."""
    try:
        parallel = Parallelism(world_size=world_size, num_layers=args["num_layers"], **megatron_parallel_sizes(args))
    except ParallelError as error:
        raise ConfigError(f"the parallel layout: {error}") from None
    return [dataclasses.asdict(parallel.coordinates(rank)) for rank in range(world_size)]


def checkpoint_sizes(experiment: Experiment, args: dict, world_size: int) -> dict:
    """The model's parameters and each rank's checkpoint bytes in the run's format, as the workload backend
    lays out the same job (`--workload EXP --plan`: megatron-core's shards, or Megatron-LM's torch-format
    files); a model that cannot be described is null with the reason."""
    from ckpt_bench.backends.workload.engines import ENGINES, state_layout
    from ckpt_bench.layout.sources import from_megatron_args

    try:
        workload = from_megatron_args(experiment.exp_name, args, str(experiment.path))
        plan = state_layout(ENGINES[args.get("ckpt_format") or "torch_dist"], workload, world_size, None)
    except (ConfigError, KeyError, ValueError) as error:
        return {"checkpoint_bytes": None, "checkpoint_bytes_unknown": str(error)}
    return {"parameters": plan.parameters.total if plan.parameters else None,
            "active_parameters": plan.parameters.active if plan.parameters else None,
            "checkpoint_bytes": plan.total_bytes,
            "rank_bytes": dataclasses.asdict(plan.spread)}


def given_by_user(experiment: Experiment, config: MegatronConfig) -> set[str]:
    """The trainer arguments the user set: on the command line, or in the experiment (its overrides and
    its own presets) to a value our shipped presets do not already give."""
    if experiment.primus is not None:  # Primus's module preset holds its trainer's defaults, not the user's choice
        return set(config.overrides) | experiment.chosen
    shipped: dict = {}
    for preset in (experiment.model_preset, experiment.module_preset):
        if preset is not None and preset.is_relative_to(CONFIGS_DIR):
            shipped.update(load_yaml(preset))
    return set(config.overrides) | {key for key, value in experiment.args.items()
                                    if key not in shipped or shipped[key] != value}


def not_acted_on_notes(args: dict, given: set[str]) -> list[str]:
    unread = megatron_arguments.not_acted_on(args, given)
    if not unread:
        return []
    return [f"Megatron-LM arguments the built-in worker does not act on (accepted, no effect on this run): "
            f"{', '.join(unread)}; --framework megatron-lm runs Megatron-LM itself"]


def _params_dtype(args: dict) -> str:
    if args.get("bf16"):
        return "torch.bfloat16"
    if args.get("fp16"):
        return "torch.float16"
    return "torch.float32"


@dataclass(kw_only=True)
class MegatronRunInfo(RunInfo):
    """A Megatron experiment's run (the built-in worker or a framework): the Primus checkpoint tool's keys
    (`saves`), and what a reader needs to compare runs."""

    use_persistent_ckpt_worker: bool
    ckpt_assume_constant_structure: bool
    tensor_model_parallel_size: int
    pipeline_model_parallel_size: int
    expert_model_parallel_size: int
    context_parallel_size: int
    train_iters: int
    model: dict
    """The model's shape: num_layers, hidden_size, ffn_hidden_size, num_attention_heads, num_query_groups,
    seq_length, vocab_size, num_experts."""
    load_layout: dict | None = None
    """The load pass's parallel sizes (tp, pp, ep, cp, dp, world_size) where --load-* changes them."""
    msc: bool | None = None
    """Whether megatron-core saved and loaded through NVIDIA's multi-storage-client (its `msc.open` writers and
    `MultiStorageFileSystemReader`) rather than the file system; None where it cannot be known."""


def run_info(args: dict, sizes: dict, launch: LaunchConfig, storage: CheckpointStorage,
             msc: bool | None) -> MegatronRunInfo:
    """The report's configuration keys, with the types the Primus tool's report has; `msc`: whether megatron-core's
    checkpoint I/O goes through multi-storage-client."""
    described = storage.describe()
    return MegatronRunInfo(
        backend=launch.runner,
        ranks=Ranks.of(launch.topology),
        saves=SaveConfig(
            data_parallel_size=sizes["dp"],
            ckpt_format=args["ckpt_format"],
            # megatron-core's torch_dist writer fsyncs each file it writes; the legacy torch format is plain
            # torch.save.
            fsync=fsynced(args["ckpt_format"] == "torch_dist", described),
            ckpt_fully_parallel_save=bool(args.get("ckpt_fully_parallel_save")),
            ckpt_fully_parallel_load=bool(args.get("ckpt_fully_parallel_load")),
            async_save=bool(args.get("async_save")),
            save_interval=args["save_interval"],
            optimizer=args.get("optimizer", "adam"),
            use_distributed_optimizer=bool(args.get("use_distributed_optimizer")),
            params_dtype=_params_dtype(args),
            main_params_dtype=_DTYPE_NAMES.get(args.get("main_params_dtype", "fp32"), args.get("main_params_dtype")),
            exp_avg_dtype=_DTYPE_NAMES.get(args.get("exp_avg_dtype", "fp32"), args.get("exp_avg_dtype")),
            exp_avg_sq_dtype=_DTYPE_NAMES.get(args.get("exp_avg_sq_dtype", "fp32"), args.get("exp_avg_sq_dtype")),
        ),
        use_persistent_ckpt_worker=bool(args.get("use_persistent_ckpt_worker")),
        ckpt_assume_constant_structure=bool(args.get("ckpt_assume_constant_structure")),
        tensor_model_parallel_size=sizes["tp"],
        pipeline_model_parallel_size=sizes["pp"],
        expert_model_parallel_size=sizes["ep"],
        context_parallel_size=sizes["cp"],
        train_iters=args["train_iters"],
        model={key: args.get(key) for key in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                                              "num_query_groups", "seq_length", "vocab_size", "num_experts")},
        storage=described,
        msc=msc,
    )


def msc_note(msc: bool | None, storage: CheckpointStorage, why: str) -> list[str]:
    """The report's line on the path megatron-core's checkpoint I/O took (MSC or the file system), where MSC is
    in play: an msc:// save dir, or the multistorageclient package installed (megatron-core 0.16.1 then turns it
    on by itself unless told not to); `why` says who decided."""
    if msc is None or (not msc and storage.kind != "msc" and not msc_available()):
        return []
    path = ("multi-storage-client (MSC: msc.open writers, MultiStorageFileSystemReader with 2 threads)" if msc
            else "the file system (megatron-core's FileSystemWriterAsync and its cached-metadata reader)")
    return [f"megatron-core's checkpoint I/O went through {path}: {why}"]


def checkpoint_parent(config: MegatronConfig, args: dict) -> str | None:
    """Where the run's checkpoint folder goes: --save-dir, else the experiment's `save` (Primus skips
    saving when `save` is null; we always save, by default inside the run directory)."""
    parent = config.save_dir or args.get("save")
    return None if parent is None else str(parent)


def deletion_notes(run: RunDir) -> list[str]:
    """The worker's timed deletions of old checkpoints (`DELETIONS_FILE`) as a line of the report: a storage cost
    of the saves after which they ran."""
    path = run.path / DELETIONS_FILE
    if not path.is_file():
        return []
    deletions = json.loads(path.read_text())
    listed = ", ".join(f"iteration {d['deleted']} after saving {d['after_save']} ({d['seconds']:.3f} s)"
                       for d in deletions)
    rules = sorted({d["rule"] for d in deletions})
    return [f"old checkpoints deleted by rank 0 ({'; '.join(rules)}; time.perf_counter around the folder's "
            f"removal, Megatron-LM's runs it in a background thread): {listed}"]


def release_settings(args: dict, trainer_args: dict) -> list[str]:
    """The installed megatron-core checked (a release we know breaks refused in one line) and, on 0.17+, the async
    strategy its saves take put into `args`. Returns the notes: an untested release (also said on stderr), an
    async strategy other than the one asked for."""
    strategy, notes = megatron_release.settle(args.get("async_strategy"), bool(trainer_args["async_save"]))
    if strategy is not None:
        args["async_strategy"] = strategy
    if trainer_args.get("non_persistent_ckpt_type") == "local" and (missing := megatron_release.nvrx_missing("local")):
        raise ConfigError(f"non_persistent_ckpt_type local: Megatron-LM's local checkpoints are "
                          f"nvidia-resiliency-ext's LocalCheckpointManager, and {missing}; use "
                          "non_persistent_ckpt_type global")
    return notes


def load_tier(config: MegatronConfig, args: dict) -> str | None:
    """The tier `--load-tier` asks the load to read (as the spec names it), refused without non-persistent saves."""
    if config.load_tier is None:
        return None
    if not args.get("non_persistent_ckpt_type"):
        raise ConfigError(f"--load-tier {config.load_tier}: the run saves persistent checkpoints only; add --set "
                          "non_persistent_ckpt_type=global --set non_persistent_save_interval=N")
    if config.load_tier == "non-persistent" and not non_persistent_iterations(args):
        raise ConfigError(f"--load-tier non-persistent: no iteration of the run saves a non-persistent checkpoint "
                          f"(non_persistent_save_interval {args.get('non_persistent_save_interval')} falls only on "
                          f"persistent saves within --train-iters {args['train_iters']}); lower the interval")
    return config.load_tier.replace("-", "_")


def non_persistent_iterations(args: dict) -> list[int]:
    """The iterations the worker saves a non-persistent checkpoint at, as Megatron-LM's loop does: each
    non_persistent_save_interval where no persistent save falls (every save_interval, and the last iteration)."""
    every, persistent, last = args["non_persistent_save_interval"], args["save_interval"], args["train_iters"]
    return [i for i in range(every, last + 1, every) if i % persistent and i != last]


def async_writer_notes(args: dict) -> list[str]:
    if not args.get("async_save") or args.get("use_persistent_ckpt_worker"):
        return []
    return ["async saves used megatron-core's forked writer (one process per save), as Megatron-LM did before "
            "late 2025; current Megatron-LM turns --async-save off for distributed checkpoints unless "
            "--use-persistent-ckpt-worker is given: add it to measure what it runs"]


def load_layout(config: MegatronConfig, args: dict, launch: LaunchConfig) -> tuple[dict | None, dict | None]:
    """The load pass's parallel sizes when --load-* changes them: (Megatron-LM arguments for the worker,
    the sizes checked against Megatron's rules), or (None, None)."""
    if not config.changes_load_layout:
        return None, None
    layout = {argument: getattr(config, option) or args[argument] for option, argument in config.LOAD_LAYOUT.items()}
    world = launch.topology.nnodes * (config.load_nproc_per_node or launch.topology.nproc_per_node)
    if args["ckpt_format"] != "torch_dist":
        raise ConfigError(f"--load-* with --ckpt-format {args['ckpt_format']}: that format keeps one file per saving "
                          "rank and cannot reshard; use --ckpt-format torch_dist")
    if args.get("non_persistent_ckpt_type") == "local":
        raise ConfigError("--load-* with non_persistent_ckpt_type local: the load restores the local checkpoints, "
                          "one file per rank, which nvidia-resiliency-ext restores on the layout that saved them")
    changes_model_parallel = any(layout[a] != args[a] for a in layout)
    if changes_model_parallel and args.get("use_distributed_optimizer") and not args.get(
            "dist_ckpt_optim_fully_reshardable"):
        raise ConfigError("--load-tp/--load-pp/--load-ep with --use-distributed-optimizer: its dp_reshardable "
                          "optimizer state reshards across data-parallel sizes only; add --set "
                          "dist_ckpt_optim_fully_reshardable=true to save it fully reshardable")
    name = {argument: MegatronConfig.flags()[option].canonical for option, argument in config.LOAD_LAYOUT.items()}
    sizes = rules.check({**args, **layout}, world, lambda argument: name.get(argument) or config.spelling(argument))
    return layout, {**sizes, "world_size": world}


class MegatronBackend(Backend[MegatronConfig]):
    name = "megatron"
    title = "Megatron backend (the default): megatron-core's dist_checkpointing in the built-in worker"
    Config = MegatronConfig

    def preview(self, launch: LaunchConfig[MegatronConfig]) -> dict:
        """The plan of the model the worker builds, with the pipeline Megatron-LM makes of the experiment beside
        the worker's where they differ (uneven or virtual stages); where the worker cannot split the layers at
        all, Megatron-LM's layout and sizes, and why the worker would not run it."""
        experiment, args, sizes = resolve_gpt(launch)
        world = launch.topology.world_size
        unread = megatron_arguments.not_acted_on(args, given_by_user(experiment, launch.options))
        megatron, even = rules.worker_pipeline(args, world)
        pipeline = {"pipeline": rules.describe(megatron)}
        if even is None:
            refusal = rules.worker_pipeline_refusal(args, world, origins(launch.options, experiment))
            return preview(experiment, args, sizes, launch, not_acted_on=unread, **pipeline, worker_refuses=refusal)
        if rules.describe(even) != pipeline["pipeline"]:
            pipeline["worker_pipeline"] = rules.describe(even)
        return preview(experiment, args, sizes, launch, built=built_model_arguments(args), not_acted_on=unread,
                       **pipeline)

    def plan(self, launch: LaunchConfig[MegatronConfig]) -> Plan:
        config = launch.options
        experiment, args, sizes = resolve_gpt(launch)
        unread = not_acted_on_notes(args, given_by_user(experiment, config))
        trainer_args = {**megatron_arguments.MEGATRON_DEFAULTS, **args}
        release_notes = release_settings(args, trainer_args)
        check_megatron_memory(trainer_args, sizes, launch.topology.nproc_per_node, on_gpus=visible_gpus() > 0)
        # The worker keeps every checkpoint it saves (one each save_interval) until the run ends.
        kept_bytes = checkpoint_bytes(trainer_args) * (args["train_iters"] // args["save_interval"])
        parent = checkpoint_parent(config, args)
        args["save"] = args["load"] = None  # the lifecycle creates the run's own checkpoint folder
        name = origins(config, experiment)
        try:
            rules.check_worker_limits({**args, "save": parent, "world_size": launch.topology.world_size}, name)
            refusal = rules.worker_pipeline_refusal(args, launch.topology.world_size, name)
            if refusal is not None:
                raise ConfigError(refusal)
        except ConfigError as error:
            raise ConfigError(f"the megatron worker cannot run this: {error}") from None
        storage = storage_for(parent, config)
        layout, load_sizes = load_layout(config, args, launch)
        experiment.args = args
        # Chosen, not inherited from what is installed: MSC for an msc:// save dir, the file system otherwise.
        msc = storage.kind == "msc"
        why = ("an msc:// save dir" if msc else
               "a file system save dir; the built-in worker turns MSC off, which megatron-core 0.16.1 turns on "
               "whenever multistorageclient imports (Megatron-LM's --disable-msc)")
        return Plan(
            name=experiment.exp_name,
            worker_module="ckpt_bench.backends.megatron.worker",
            resolved_config={**experiment.to_yaml_dict(), "exp_root": str(experiment.exp_root)},
            spec=MegatronSpec(arguments=args, training_impact=config.training_impact, load_layout=layout,
                              storage=storage.describe(), load_tier=load_tier(config, trainer_args)),
            run_info=replace(run_info(args, sizes, launch, storage, msc), load_layout=load_sizes,
                             experiment=experiment.label),
            passes=[*config.preflight_passes(), WorkerPass("save", ["--phase", "save"]),
                    WorkerPass("load", ["--phase", "load"], nproc_per_node=config.load_nproc_per_node)],
            checkpoints=config.checkpoints(storage, writers_per_rank=rules.writers_per_rank(args),
                                           expected_bytes=kept_bytes),
            show_progress=shows_progress,
            collect=deletion_notes,
            notes=[*experiment.name_notes, *release_notes, *async_writer_notes(args), *msc_note(msc, storage, why),
                   *unread],
        )
