"""`--emit slurm|k8s`: the same benchmark as a cluster job, instead of running it here.

We do not launch on clusters ourselves; Slurm and Kubeflow's training operator already start one
process per node and hand it the rendezvous. So the job runs, on every node, `ckpt_launch.py` with
the options given here (minus the job's own), plus what only the cluster knows:

    --nnodes N --node-rank <the node's> --master-addr <first node> --master-port P --run-id <job id>
    --runs-dir <shared-dir>/runs [--save-dir <shared-dir>/checkpoints]

and `ckpt_bench.launcher.nodes` turns those per-node processes into one run with one report.

Safety: every value that lands in a shell line goes through `shlex.quote` (the `q` filter), and the
manifest's values through `tojson` (a JSON string is a YAML string); a value with a control
character (a newline would start a new script line) is refused.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import jinja2

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.options import Flag, to_argv
from ckpt_bench.launcher.config import EmitOptions

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_DIR = Path(__file__).resolve().parents[1] / "templates"  # package data
TEMPLATES = {"slurm": "slurm.sbatch.j2", "k8s": "k8s_pytorchjob.yaml.j2"}

# Options each node gets from the cluster instead (see the module docstring); `output` is this
# command's own.
PER_NODE_OPTIONS = frozenset({
    "nnodes", "node_rank", "master_addr", "master_port", "rdzv_endpoint", "run_id", "runs_dir", "output",
})

# Per node, from Slurm: its index in the allocation; the job id names the run directory.
SLURM_RENDEZVOUS = ['--nnodes "$SLURM_NNODES"', '--node-rank "$SLURM_NODEID"', '--master-addr "$MASTER_ADDR"',
                    '--master-port "$MASTER_PORT"', '--run-id "$SLURM_JOB_ID"']
# Per pod, from the training operator: PET_NODE_RANK (RANK, the node index, in operators before it);
# WORLD_SIZE is not used: recent operators set it to nodes x nprocPerNode.
K8S_RENDEZVOUS = ['--node-rank "${PET_NODE_RANK:-$RANK}"', '--master-addr "$MASTER_ADDR"',
                  '--master-port "$MASTER_PORT"']


def benchmark_args(values: Mapping, given: Iterable[str], flags: Mapping[str, Flag]) -> list[str]:
    """The command-line arguments that give the benchmark's options again: those the user set, less
    the job's own and those each node gets from the cluster."""
    job = set(EmitOptions.flags()) | PER_NODE_OPTIONS
    return to_argv(values, flags, names=[name for name in flags if name in given and name not in job])


def _check(values: dict) -> None:
    for name, value in values.items():
        if isinstance(value, str) and any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ConfigError(f"--{name.replace('_', '-')} {value!r}: control characters are not allowed")


def node_command(python: str, workdir: str, args: list[str], rendezvous: list[str]) -> str:
    """The shell line every node runs: fixed values quoted, the cluster's variables expanded there."""
    launch = shlex.join([python, "ckpt_launch.py", *args])
    return f"cd {shlex.quote(workdir)} && exec {launch} {' '.join(rendezvous)}"


def render(emit: EmitOptions, values: Mapping, given: Iterable[str], flags: Mapping[str, Flag]) -> str:
    """The job script or manifest for `emit`, running the benchmark that `values` (the options `given`)
    describe on `values["nnodes"]` nodes."""
    _check(values)
    for item in values.get("set") or ():
        _check({"set": item})
    shared = emit.shared_dir
    args = benchmark_args(values, given, flags)
    args += ["--runs-dir", f"{shared}/runs"]
    if not values.get("save_dir"):
        args += ["--save-dir", f"{shared}/checkpoints"]
    container = emit.container_image
    workdir = emit.workdir or str(ROOT)
    nnodes = values["nnodes"]
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR), undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False,
    )
    environment.filters["q"] = shlex.quote
    environment.filters["tojson"] = json.dumps  # jinja's own escapes & < > for HTML
    job_name = emit.job_name or "ckpt-bench"
    template_values = {
        "nnodes": nnodes,
        "job_name": job_name,
        "gpus_per_node": emit.gpus_per_node,
        "runs_dir": f"{shared}/runs",
        "shared_dir": shared,
        "workdir": workdir,
    }
    if emit.emit == "slurm":
        # Without a container the nodes run this very interpreter (a venv on shared storage).
        python = "python" if container else sys.executable
        template_values.update(
            time=emit.slurm_time or "01:00:00",
            partition=emit.slurm_partition,
            account=emit.slurm_account,
            output=f"{shared}/slurm-%j.out",
            container_image=container,
            container_mounts=emit.container_mounts,
            node_command=node_command(python, workdir, args, SLURM_RENDEZVOUS),
        )
    else:
        per_pod = [f"--nnodes {nnodes}", *K8S_RENDEZVOUS, f"--run-id {shlex.quote(job_name)}"]
        roles = [("Master", 1)] + ([("Worker", nnodes - 1)] if nnodes > 1 else [])
        template_values.update(
            image=container,
            namespace=emit.k8s_namespace,
            pvc=emit.k8s_pvc,
            roles=roles,
            node_command=node_command("python", workdir, args, per_pod),
        )
    return environment.get_template(TEMPLATES[emit.emit]).render(**template_values)
