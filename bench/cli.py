"""The launcher's command line: `ckpt_launch.py` only calls `launch` here. (`ckpt_report.py` is its
own small click command over `bench.parsers`, so reading logs never imports the launcher or torch.)

Every user mistake is a `ConfigError` (or a click usage error): one line on stderr and exit code 2,
never a traceback.
"""

from __future__ import annotations

import json
import os
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
    backend = BACKENDS.get(options["backend"])
    if hasattr(backend, "resolve_options"):  # e.g. Lightning: dataflux's variables fill options not given
        options = backend.resolve_options(options, os.environ)
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
@click.option("--rdzv-endpoint", metavar="HOST:PORT",
              help="torchrun's c10d rendezvous instead of --master-addr/--master-port.")
@click.option("--run-id", help="Run directory name <runs-dir>/<run-id>; required with --nnodes > 1, the same "
              "on every node (node 0 creates the directory, the others join it).")
@click.option("--preflight", is_flag=True, help="Measure collective bandwidth (a short --backend comms sweep) "
              "before the benchmark and record it in its report.")
@click.option("--comms-max-size", metavar="SIZE", help="[comms, --preflight] Largest message, e.g. 64KiB "
              "(default: 256MiB for the comms backend, 64MiB for the preflight).")
# Real frameworks instead of the built-in worker (bench.launcher.frameworks).
@click.option("--framework", type=click.Choice(["primus", "megatron-lm"]),
              help="Run the experiment with the real framework instead of the built-in worker.")
@click.option("--primus-path", type=click.Path(file_okay=False), help="[primus] Primus checkout.")
@click.option("--megatron-path", type=click.Path(file_okay=False), help="[megatron-lm] Megatron-LM checkout.")
# Cluster jobs (bench.launcher.emit): print the job instead of running the benchmark here.
@click.option("--emit", type=click.Choice(["slurm", "k8s"]),
              help="Print an sbatch script (slurm) or a Kubeflow PyTorchJob manifest (k8s) running this "
              "benchmark on --nnodes nodes, instead of running it.")
@click.option("--shared-dir", help="[emit] A folder every node mounts: run directories and checkpoints go there.")
@click.option("--job-name", help="[emit] Job name (default: ckpt-bench); the k8s run id.")
@click.option("--workdir", help="[emit] Where ckpt-bench is on the nodes (default: this checkout).")
@click.option("--gpus-per-node", type=click.IntRange(min=0), help="[emit] GPUs to request per node.")
@click.option("--container-image", help="[emit] Container image (Slurm: pyxis --container-image; k8s: image).")
@click.option("--container-mounts", help="[emit slurm] pyxis --container-mounts, e.g. /lustre:/lustre.")
@click.option("--slurm-partition", help="[emit slurm] #SBATCH --partition.")
@click.option("--slurm-account", help="[emit slurm] #SBATCH --account.")
@click.option("--slurm-time", help="[emit slurm] #SBATCH --time (default: 01:00:00).")
@click.option("--k8s-namespace", help="[emit k8s] Namespace of the PyTorchJob.")
@click.option("--k8s-pvc", help="[emit k8s] PersistentVolumeClaim mounted at --shared-dir in every pod.")
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
@click.option("--accelerator", help="[lightning] cpu, gpu or auto (default: gpu when CUDA is available).")
@click.option("--num-layers", type=click.IntRange(min=1), help="[lightning] Transformer layers (model size).")
@click.option("--steps-per-save", type=click.IntRange(min=1),
              help="[lightning] Save during fit every N steps and measure the training-time impact.")
@click.option("--sweep", type=click.Path(dir_okay=False), help="Run the jobs of a sweep file (bench.sweep); "
              "options given here too override its fixed settings.")
@click.option("--resume", type=click.Path(file_okay=False), help="Resume a sweep directory: run only its jobs "
              "without a result.")
def launch(**options):
    """Run a checkpoint benchmark under torchrun and print its JSON report."""
    if options.get("sweep") or options.get("resume"):
        run_sweep_command(options)
    try:
        if options.get("emit"):
            from bench.launcher.emit import render

            click.echo(render(options["emit"], launch, click.get_current_context(), options), nl=False)
            sys.exit(0)
        settings = settings_from_options(options)
        if options.get("framework"):
            from bench.launcher.frameworks import FRAMEWORKS

            backend = FRAMEWORKS[options["framework"]]
        else:
            backend = BACKENDS[settings.backend]
        result = execute(backend, settings)
    except ConfigError as error:
        fail(str(error))
    emit_report(result.report, options.get("output"))
    sys.exit(result.exit_code)


def run_sweep_command(options: dict) -> None:
    """`--sweep FILE [--resume DIR]`: options given explicitly on the command line become fixed settings."""
    from click.core import ParameterSource

    from bench.sweep import RESERVED, run_sweep, summary

    context = click.get_current_context()
    overrides = {
        name: value for name, value in options.items()
        if name not in RESERVED and context.get_parameter_source(name) == ParameterSource.COMMANDLINE
    }
    try:
        _root, results = run_sweep(options.get("sweep"), options["runs_dir"], options.get("resume"), overrides)
    except ConfigError as error:
        fail(str(error))
    emit_report(summary(results), options.get("output"))
    sys.exit(0 if all(job["status"] == "ok" for job in results["jobs"]) else 1)
