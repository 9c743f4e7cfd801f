"""`--emit slurm|k8s`: the same benchmark as a cluster job, instead of running it here.

We do not launch on clusters ourselves; Slurm and Kubeflow's training operator already start one
process per node and hand it the rendezvous. So the job runs, on every node, `ckpt_launch.py` with
the options given here (minus the job's own), plus what only the cluster knows:

    --nnodes N --node-rank <the node's> --master-addr <first node> --master-port P --run-id <job id>
    --runs-dir <shared-dir>/runs [--save-dir <shared-dir>/checkpoints]

and `bench.launcher.nodes` turns those per-node processes into one run with one report.

Safety: every value that lands in a shell line goes through `shlex.quote` (the `q` filter), and the
manifest's values through `tojson` (a JSON string is a YAML string); a value with a control
character (a newline would start a new script line) is refused.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click
import jinja2
from click.core import ParameterSource

from bench.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = {"slurm": "slurm.sbatch.j2", "k8s": "k8s_pytorchjob.yaml.j2"}

# Options that describe the job, not the benchmark: never passed on to the nodes.
JOB_OPTIONS = frozenset({
    "emit", "job_name", "slurm_partition", "slurm_account", "slurm_time", "gpus_per_node",
    "container_image", "container_mounts", "k8s_namespace", "k8s_pvc", "shared_dir", "workdir", "output",
})
# Options each node gets from the cluster instead (see the module docstring).
PER_NODE_OPTIONS = frozenset({
    "nnodes", "node_rank", "master_addr", "master_port", "rdzv_endpoint", "run_id", "runs_dir",
})

# Per node, from Slurm: its index in the allocation; the job id names the run directory.
SLURM_RENDEZVOUS = ['--nnodes "$SLURM_NNODES"', '--node-rank "$SLURM_NODEID"', '--master-addr "$MASTER_ADDR"',
                    '--master-port "$MASTER_PORT"', '--run-id "$SLURM_JOB_ID"']
# Per pod, from the training operator: PET_NODE_RANK (RANK, the node index, in operators before it);
# WORLD_SIZE is not used: recent operators set it to nodes x nprocPerNode.
K8S_RENDEZVOUS = ['--node-rank "${PET_NODE_RANK:-$RANK}"', '--master-addr "$MASTER_ADDR"',
                  '--master-port "$MASTER_PORT"']


def benchmark_args(command: click.Command, context: click.Context, options: dict) -> list[str]:
    """The command-line arguments that give `options` again, for the options the user set."""
    args: list[str] = []
    for param in command.params:
        name = param.name
        if (not isinstance(param, click.Option) or name in JOB_OPTIONS or name in PER_NODE_OPTIONS
                or context.get_parameter_source(name) != ParameterSource.COMMANDLINE):
            continue
        value = options[name]
        if param.is_flag:
            if param.secondary_opts:
                args.append(param.opts[0] if value else param.secondary_opts[0])
            elif value:
                args.append(param.opts[0])
        elif param.multiple:
            for item in value:
                args += [param.opts[0], str(item)]
        elif value is not None:
            args += [param.opts[0], str(value)]
    return args


def _check(values: dict) -> None:
    for name, value in values.items():
        if isinstance(value, str) and any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ConfigError(f"--{name.replace('_', '-')} {value!r}: control characters are not allowed")


def node_command(python: str, workdir: str, args: list[str], rendezvous: list[str]) -> str:
    """The shell line every node runs: fixed values quoted, the cluster's variables expanded there."""
    launch = shlex.join([python, "ckpt_launch.py", *args])
    return f"cd {shlex.quote(workdir)} && exec {launch} {' '.join(rendezvous)}"


def render(target: str, command: click.Command, context: click.Context, options: dict) -> str:
    _check(options)
    for item in options.get("set") or ():
        _check({"set": item})
    shared = options.get("shared_dir")
    if not shared:
        raise ConfigError(f"--emit {target}: give --shared-dir DIR, a folder every node mounts (run directories "
                          "and checkpoints go there)")
    args = benchmark_args(command, context, options)
    args += ["--runs-dir", f"{shared}/runs"]
    if not options.get("save_dir"):
        args += ["--save-dir", f"{shared}/checkpoints"]
    container = options.get("container_image")
    workdir = options.get("workdir") or str(ROOT)
    nnodes = options["nnodes"]
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROOT / "templates"), undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False,
    )
    environment.filters["q"] = shlex.quote
    environment.filters["tojson"] = json.dumps  # jinja's own escapes & < > for HTML
    values = {
        "nnodes": nnodes,
        "job_name": options.get("job_name") or "ckpt-bench",
        "gpus_per_node": options.get("gpus_per_node"),
        "runs_dir": f"{shared}/runs",
        "shared_dir": shared,
        "workdir": workdir,
    }
    if target == "slurm":
        # Without a container the nodes run this very interpreter (a venv on shared storage).
        python = "python" if container else sys.executable
        values.update(
            time=options.get("slurm_time") or "01:00:00",
            partition=options.get("slurm_partition"),
            account=options.get("slurm_account"),
            output=f"{shared}/slurm-%j.out",
            container_image=container,
            container_mounts=options.get("container_mounts"),
            node_command=node_command(python, workdir, args, SLURM_RENDEZVOUS),
        )
    else:
        if not container:
            raise ConfigError("--emit k8s: give --container-image IMAGE (with ckpt-bench in --workdir)")
        run_id = values["job_name"]
        per_pod = [f"--nnodes {nnodes}", *K8S_RENDEZVOUS, f"--run-id {shlex.quote(run_id)}"]
        roles = [("Master", 1)] + ([("Worker", nnodes - 1)] if nnodes > 1 else [])
        values.update(
            image=container,
            namespace=options.get("k8s_namespace"),
            pvc=options.get("k8s_pvc"),
            roles=roles,
            node_command=node_command("python", workdir, args, per_pod),
        )
    return environment.get_template(TEMPLATES[target]).render(**values)
