"""What `--workload NAME|FILE` names, as a `workload.Workload`:

    NAME   a catalog entry (`catalog.CATALOG`: MLPerf Storage's llama3 shapes at their rank counts, llama2)
    FILE   a DLIO workload YAML, read unchanged (`dlio_yaml.load_dlio_yaml`), or a Primus/Megatron experiment
           YAML (it has `modules:`): the Megatron job its arguments describe (`ckpt_bench.model`), `--set`
           applied

Told apart by content, never by file name. Every mistake is one ConfigError line.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from pathlib import Path

import yaml

from ckpt_bench.core import megatron_arguments
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.experiment import deep_merge, load_experiment, load_yaml
from ckpt_bench.layout.catalog import CATALOG
from ckpt_bench.layout.dlio_yaml import load_dlio_yaml
from ckpt_bench.layout.workload import TRANSFORMER, Workload, WorkloadError
from ckpt_bench.model.architecture import ArchitectureError
from ckpt_bench.model.job import TrainingJob


def resolve_workload(text: str, overrides: Mapping[str, object] | None = None,
                     primus_path: str | None = None) -> Workload:
    """The workload `--workload` names; `overrides` (`--set KEY=VALUE`) change an experiment's Megatron-LM
    arguments. Raises ConfigError."""
    path = Path(text).expanduser()
    if text in CATALOG:
        _refuse_overrides(text, overrides)
        return CATALOG[text]
    if not path.exists():
        close = difflib.get_close_matches(text, CATALOG, n=3)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        raise ConfigError(f"--workload {text!r} is neither a workload name{hint} nor a file: use one of "
                          f"{', '.join(CATALOG)}, a DLIO workload YAML or a Primus/Megatron experiment YAML")
    if not path.is_file():
        raise ConfigError(f"--workload {text}: not a file (a DLIO workload YAML or a Primus experiment YAML)")
    try:
        if _is_experiment(path):
            return from_experiment(path, overrides or {}, primus_path)
        _refuse_overrides(text, overrides)
        return load_dlio_yaml(path)
    except WorkloadError as error:
        raise ConfigError(f"--workload {text}: {error}") from None


def _refuse_overrides(text: str, overrides: Mapping[str, object] | None) -> None:
    if overrides:
        raise ConfigError(f"--set {next(iter(overrides))}=...: --set changes a Primus/Megatron experiment's "
                          f"arguments, and --workload {text} is not one")


def _is_experiment(path: Path) -> bool:
    """An experiment has `modules:`, its own or its `extends:` parents' (Primus's LoRA SFT configs extend the
    SFT experiment and add only overrides)."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"--workload {path}: cannot be read as YAML ({error})") from None
    if isinstance(data, dict) and "extends" in data:
        data = load_yaml(path)
    return isinstance(data, dict) and "modules" in data


def from_experiment(path: Path, overrides: Mapping[str, object], primus_path: str | None = None) -> Workload:
    """A Primus/Megatron experiment as a workload: the Megatron job its merged arguments describe
    (`ckpt_bench.model.job.TrainingJob`: the model, MoE, MLA and MTP included, its TP/PP/EP/ETP/CP and
    pipeline stages, the distributed optimizer or not), with DLIO's fields filled from its attention and
    dense MLP shape for the DLIO engines, which refuse what they cannot express. Its world size is the
    run's. Raises ConfigError naming the argument that cannot be read."""
    experiment = load_experiment(path, primus_path=primus_path)
    if experiment.framework != "megatron":
        raise ConfigError(f"--workload {path}: framework {experiment.framework!r}; only Megatron experiments "
                          "describe a model shape")
    megatron_arguments.check_settings(overrides, beside=experiment.args)  # a typo is refused, never an unused key
    megatron_arguments.check_given_values(overrides, experiment)
    return from_megatron_args(experiment.exp_name, deep_merge(experiment.args, dict(overrides)), f"--workload {path}",
                              lambda key: f"--set {key}" if key in overrides else experiment.origin(key))


def from_megatron_args(name: str, args: Mapping[str, object], source: str,
                       origin: Callable[[str], str | None] = lambda key: None) -> Workload:
    """The workload of a Megatron job's merged arguments (see `from_experiment`); `source` names them in the
    one-line error for a model that cannot be described; `origin(key)` the file that set an argument."""
    try:
        job = TrainingJob.from_megatron_args(args, origin)
    except ArchitectureError as error:
        raise ConfigError(f"{source}: {error}") from None
    arch = job.architecture
    return Workload(
        name=name,
        model_type=TRANSFORMER,
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        ffn_hidden_size=arch.ffn_hidden_size,
        num_attention_heads=arch.num_attention_heads,
        num_kv_heads=arch.num_query_groups,
        vocab_size=arch.vocab_size,
        model_datatype=arch.params_dtype,
        optimizer_datatype=job.optimizer_dtype,
        tensor_parallelism=job.tp,
        pipeline_parallelism=job.pp,
        zero_stage=1 if job.distributed_optimizer else 0,
        num_checkpoints_write=10,
        num_checkpoints_read=10,
        time_between_checkpoints=0.0,
        fsync=True,
        megatron=job.as_dict(),
    )
