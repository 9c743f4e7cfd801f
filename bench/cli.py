"""The command-line front doors. `ckpt_launch.py` and `ckpt_report.py` only call into here.

Every user mistake is a `ConfigError` (or a click usage error): one line on stderr and exit code 2,
never a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from bench.config import ConfigError, parse_assignment
from bench.launcher import BACKENDS
from bench.launcher.base import LaunchSettings, execute
from bench.launcher.torchrun import Topology

# CLI flag -> Megatron-LM argument it overrides. The Primus tool's names are aliases.
_MEGATRON_FLAGS = {
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
}


def megatron_overrides(options: dict) -> dict:
    """Trainer-argument overrides from the CLI: `--set` first, named flags win over it."""
    overrides = dict(parse_assignment(text) for text in options.get("set") or ())
    for flag, key in _MEGATRON_FLAGS.items():
        if options.get(flag) is not None:
            overrides[key] = options[flag]
    return overrides


def settings_from_options(options: dict) -> LaunchSettings:
    topology = Topology(
        nnodes=options["nnodes"],
        nproc_per_node=options["nproc_per_node"],
        node_rank=options["node_rank"],
        master_addr=options["master_addr"],
        master_port=options["master_port"],
        rdzv_endpoint=options.get("rdzv_endpoint"),
    )
    return LaunchSettings(
        backend=options["backend"],
        config=Path(options["config"]) if options.get("config") else None,
        topology=topology,
        overrides=megatron_overrides(options),
        save_dir=options.get("save_dir"),
        runs_dir=Path(options["runs_dir"]),
        keep_checkpoints=options["keep_checkpoints"],
        warm_load=options["warm_load"],
        # Every option as given: backends other than Megatron read theirs from here.
        options=dict(options),
    )


def emit_report(report: dict, output: str | None) -> None:
    text = json.dumps(report, indent=2)
    click.echo(text)
    if output:
        Path(output).write_text(text + "\n")


def fail(message: str, code: int = 2):
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--config", "--yaml-config-path", "config", type=click.Path(dir_okay=False),
              help="Primus experiment YAML (default: configs/tiny_gpt.yaml).")
@click.option("--backend", type=click.Choice(sorted(BACKENDS)), default="megatron", show_default=True)
@click.option("--nnodes", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--nproc-per-node", type=click.IntRange(min=1), default=2, show_default=True,
              help="Ranks per node (GPUs per node on a GPU machine).")
@click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--master-addr", default="127.0.0.1", show_default=True)
@click.option("--master-port", type=click.IntRange(1, 65535), default=None,
              help="Rendezvous port (default: a free port when --nnodes 1).")
@click.option("--tp", "--tensor-model-parallel-size", "tp", type=int, help="Tensor parallel size.")
@click.option("--pp", "--pipeline-model-parallel-size", "pp", type=int, help="Pipeline parallel size.")
@click.option("--ep", "--expert-model-parallel-size", "ep", type=int, help="Expert parallel size.")
@click.option("--cp", "--context-parallel-size", "cp", type=int, help="Context parallel size. DP follows.")
@click.option("--train-iters", type=int, help="Iterations of the save pass.")
@click.option("--save-interval", type=int, help="Save every N iterations.")
@click.option("--ckpt-format", help="torch_dist (sharded) or torch (per-rank files).")
@click.option("--async-save/--no-async-save", default=None)
@click.option("--fully-parallel-save/--no-fully-parallel-save", "--ckpt-fully-parallel-save",
              "fully_parallel_save", default=None)
@click.option("--fully-parallel-load/--no-fully-parallel-load", "--ckpt-fully-parallel-load",
              "fully_parallel_load", default=None)
@click.option("--use-distributed-optimizer/--no-use-distributed-optimizer", default=None)
@click.option("--save-dir", help="Where checkpoints go: a new folder <save-dir>/<run-name>/ is created "
              "(default: inside the run directory).")
@click.option("--set", "set", multiple=True, metavar="KEY=VALUE",
              help="Override any trainer argument, e.g. --set num_layers=8 (repeatable).")
@click.option("--output", type=click.Path(dir_okay=False), help="Also write the JSON report here.")
@click.option("--runs-dir", default="runs", show_default=True, help="Where run directories go.")
@click.option("--keep-checkpoints", "--no-remove-outputs", "keep_checkpoints", is_flag=True,
              help="Keep the checkpoints after the report (default: remove the folder this run created).")
@click.option("--warm-load", is_flag=True,
              help="Load with the checkpoint in the page cache (default: evict it first, a cold load).")
# Options of the DCP and Lightning backends (ignored by the Megatron backend).
@click.option("--model", help="[dcp] Named checkpoint shape (e.g. tiny, vit-base, T0_3B, llama2-7b).")
@click.option("--dtype", help="[dcp] Parameter dtype (float32, bfloat16, float16).")
@click.option("--dist-backend", type=click.Choice(["gloo", "nccl"]), help="[dcp, lightning] Default: "
              "nccl on GPU, gloo on CPU.")
@click.option("--thread-count", type=click.IntRange(min=1), help="[dcp] Writer threads per rank.")
@click.option("--sync-files/--no-sync-files", default=None, help="[dcp] fsync files after writing.")
@click.option("--save-calls", type=click.IntRange(min=1), help="[dcp, lightning] Number of saves.")
@click.option("--load-calls", type=click.IntRange(min=1), help="[lightning] Number of loads.")
@click.option("--s3-region", help="[s3] Region of the bucket.")
@click.option("--s3-endpoint", help="[s3] Endpoint URL (e.g. a local S3-compatible server).")
@click.option("--s3-part-size", type=click.IntRange(min=1), help="[s3] Multipart part size in bytes.")
@click.option("--s3-throughput-target-gbps", type=float, help="[s3] Client throughput target.")
@click.option("--strategy", help="[lightning] ddp or fsdp.")
@click.option("--num-layers", type=click.IntRange(min=1), help="[lightning] Transformer layers (model size).")
@click.option("--steps-per-save", type=click.IntRange(min=1),
              help="[lightning] Save during fit every N steps and measure the training-time impact.")
def launch(**options):
    """Run a checkpoint benchmark under torchrun and print its JSON report."""
    try:
        settings = settings_from_options(options)
        result = execute(BACKENDS[settings.backend], settings)
    except ConfigError as error:
        fail(str(error))
    emit_report(result.report, options.get("output"))
    sys.exit(result.exit_code)
