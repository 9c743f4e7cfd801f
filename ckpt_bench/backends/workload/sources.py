"""What `--workload NAME|FILE` names, as a `shapes.Workload`:

    NAME   a catalog entry (`shapes.CATALOG`: MLPerf Storage's llama3 shapes at their rank counts, llama2)
    FILE   a DLIO workload YAML, read unchanged (`shapes.load_dlio_yaml`), or a Primus/Megatron experiment
           YAML (it has `modules:`): its model shape and parallel sizes, with Megatron-LM's argument names

Told apart by content, never by file name. Every mistake is one ConfigError line.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import yaml

from ckpt_bench.backends.workload.shapes import CATALOG, TRANSFORMER, Workload, WorkloadError, load_dlio_yaml
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.experiment import load_experiment


def resolve_workload(text: str) -> Workload:
    """The workload `--workload` names; raises ConfigError."""
    path = Path(text).expanduser()
    if text in CATALOG:
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
            return from_experiment(path)
        return load_dlio_yaml(path)
    except WorkloadError as error:
        raise ConfigError(f"--workload {text}: {error}") from None


def _is_experiment(path: Path) -> bool:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"--workload {path}: cannot be read as YAML ({error})") from None
    return isinstance(data, dict) and "modules" in data


_DATATYPE = {"bf16": "bf16", "fp16": "fp16"}


def from_experiment(path: Path) -> Workload:
    """A Primus/Megatron experiment's model shape and layout as a DLIO workload: Megatron-LM's
    `num_layers`, `hidden_size`, `ffn_hidden_size` (default 4h), `num_attention_heads`,
    `num_query_groups` (with `group_query_attention`), `vocab_size`, TP, PP; the distributed optimizer
    shards the optimizer over data-parallel ranks (DLIO's ZeRO-1), else each replica holds it (ZeRO-0);
    bf16/fp16 weights, fp32 optimizer state. Its world size is the run's."""
    experiment = load_experiment(path)
    if experiment.framework != "megatron":
        raise ConfigError(f"--workload {path}: framework {experiment.framework!r}; only Megatron experiments "
                          "describe a model shape")
    args = experiment.args
    missing = [key for key in ("num_layers", "hidden_size", "num_attention_heads") if key not in args]
    if missing:
        raise ConfigError(f"--workload {path}: the experiment sets no {', '.join(missing)}")
    hidden, heads = int(args["hidden_size"]), int(args["num_attention_heads"])
    kv_heads = int(args.get("num_query_groups") or heads) if args.get("group_query_attention") else heads
    datatype = next((name for flag, name in _DATATYPE.items() if args.get(flag)), "fp32")
    return Workload(
        name=experiment.exp_name,
        model_type=TRANSFORMER,
        num_layers=int(args["num_layers"]),
        hidden_size=hidden,
        ffn_hidden_size=int(args.get("ffn_hidden_size") or 4 * hidden),
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        vocab_size=int(args.get("vocab_size") or args.get("padded_vocab_size") or 32000),
        model_datatype=datatype,
        optimizer_datatype="fp32",
        tensor_parallelism=int(args.get("tensor_model_parallel_size") or 1),
        pipeline_parallelism=int(args.get("pipeline_model_parallel_size") or 1),
        zero_stage=1 if args.get("use_distributed_optimizer") else 0,
        num_checkpoints_write=10,
        num_checkpoints_read=10,
        time_between_checkpoints=0.0,
        fsync=True,
    )
