"""`--emit slurm|k8s`: the same benchmark as a cluster job, instead of running it here.

We do not launch on clusters ourselves; Slurm and Kubeflow's training operator already start one
process per node and hand it the rendezvous. So the job runs, on every node, `ckpt_launch.py` with
the options given here (minus the job's own), plus what only the cluster knows:

    --nnodes N --node-rank <the node's> --master-addr <first node> --master-port P --run-id <job id>
    --runs-dir <shared-dir>/runs [--save-dir <shared-dir>/checkpoints]

and `ckpt_bench.launcher.nodes` turns those per-node processes into one run with one report.

In a stock image (`--container-image`: NGC PyTorch, NeMo, rocm/megatron-lm, rocm/primus), each node first
installs ckpt-bench into the image's Python from the wheelhouse on the shared dir (`make wheelhouse`;
`install.py` there keeps the image's torch, Transformer Engine, Apex and megatron-core), offline, then runs
`python -m ckpt_bench`; a Slurm job checks that install on one node before its benchmark step starts on all
of them, and ends there with install.py's one line if it cannot. The nodes start elsewhere than this
command: every path the job reads (`PATH_OPTIONS`) is made absolute, the Primus checkout an experiment was
found in from here is passed as `--primus-path`, and in a Slurm container the folders outside the shared dir
are mounted at the same paths (Kubernetes pods see the shared volume and the image only: what lies elsewhere
is named on stderr).

Safety: every value that lands in a shell line goes through `shlex.quote` (the `q` filter), and the
manifest's values through `tojson` (a JSON string is a YAML string); a value with a control
character (a newline would start a new script line) is refused.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import jinja2

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.experiment import PrimusCheckout
from ckpt_bench.core.options import Flag, to_argv
from ckpt_bench.launcher.config import EmitOptions, LaunchConfig
from ckpt_bench.launcher.resources import available_memory, checked_for_nodes

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


# Options whose value is a local path the nodes read (a workload only where it names a file, a --save-dir only
# where it is not a URL).
PATH_OPTIONS = ("config", "workload", "primus_path", "megatron_path", "save_dir")
WHEELHOUSE_MARK = "wheelhouse.json"  # what tools/wheelhouse.py writes into every wheelhouse
DEFAULT_SLURM_TIME = "01:00:00"  # #SBATCH --time where --slurm-time is not given


def absolute_paths(values: Mapping, given: Iterable[str], launch: LaunchConfig) -> tuple[dict, set[str], list[Path]]:
    """`values` with each path option absolute and, where the runner reads --primus-path and none was given, the
    Primus checkout the experiment was found in from here (the working directory, a folder above the experiment,
    PRIMUS_PATH); the options given then; and the inputs the nodes must see (checkouts and files)."""
    values, given = dict(values), set(given)
    inputs = []
    for name in PATH_OPTIONS:
        value = values.get(name)
        if not value or name not in given:
            continue
        path = Path(value).expanduser()
        if name == "save_dir" and "://" in value or name == "workload" and not path.is_file():
            continue
        values[name] = str(path.resolve())
        if name != "save_dir":
            inputs.append(path.resolve())
    if "primus_path" in type(launch.options).flags() and "primus_path" not in given:
        experiment = next((Path(values[name]) for name in ("config", "workload")
                           if name in given and values.get(name) and Path(values[name]).is_file()), None)
        found = PrimusCheckout.find(None, experiment) if experiment is not None else None
        if found is not None:
            values["primus_path"] = str(found.root)
            given.add("primus_path")
            inputs.append(found.root)
    return values, given, inputs


def outside(paths: Iterable[Path], roots: Iterable[str]) -> list[Path]:
    """The folders that hold `paths` (a file's own folder), less those under `roots` or under one another."""
    folders = sorted({path if path.is_dir() else path.parent for path in paths})
    kept: list[Path] = []
    for folder in folders:
        if not any(folder.is_relative_to(root) for root in [*map(Path, roots), *kept]):
            kept.append(folder)
    return kept


def _refuse_unseen(emit: EmitOptions, inputs: list[Path], shared: str) -> None:
    """Refuse, in one line, a job that reads a file or checkout its containers would not see: one outside the
    shared dir and (Slurm) the mounts the job declares. Mounting a login host's own folder at the same path does
    not make it exist on the nodes: it fails after they are held."""
    seen = [shared, *(mount_targets(emit.container_mounts) if emit.emit == "slurm" else [])]
    unseen = [path for path in inputs if not any(path.is_relative_to(root) for root in seen)]
    if unseen:
        where = f"--shared-dir {shared}" + (" or a --container-mounts target" if emit.emit == "slurm" else "")
        raise ConfigError(f"--emit {emit.emit}: the job reads {unseen[0]}, which is not under {where}: the nodes "
                          f"would not see it; copy it under {shared} (or mount the shared storage that holds it)")


def mount_targets(mounts: str | None) -> list[str]:
    """The container paths of pyxis's --container-mounts SRC:DST[:FLAGS],... (a lone SRC mounts at SRC)."""
    targets = []
    for mount in (mounts or "").split(","):
        parts = mount.split(":")
        if parts[0]:
            targets.append(parts[1] if len(parts) > 1 and parts[1] else parts[0])
    return targets


def check_wheelhouse(wheelhouse: str, shared: str) -> str | None:
    """Refuse a wheelhouse this machine can see to be missing; a note where it cannot tell."""
    folder = Path(wheelhouse)
    if (folder / WHEELHOUSE_MARK).is_file():
        return None
    if folder.is_dir() or Path(shared).is_dir():
        raise ConfigError(f"--wheelhouse {wheelhouse}: no wheelhouse there (no {WHEELHOUSE_MARK}); make one for the "
                          f"image and copy it there: make wheelhouse PYTHON_VERSION=... PLATFORM=... TORCH_VERSION=... "
                          f"&& cp -r wheelhouse {wheelhouse} (docs/clusters.md)")
    return (f"{wheelhouse} is not visible here: the nodes need the wheelhouse there (make wheelhouse, then copy it; "
            "docs/clusters.md)")


def benchmark_args(values: Mapping, given: Iterable[str], flags: Mapping[str, Flag]) -> list[str]:
    """The command-line arguments that give the benchmark's options again: those the user set, less
    the job's own and those each node gets from the cluster."""
    job = set(EmitOptions.flags()) | PER_NODE_OPTIONS
    return to_argv(values, flags, names=[name for name in flags if name in given and name not in job])


SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def slurm_seconds(text: str) -> int | None:
    """Slurm's --time as seconds: M, M:S, H:M:S, D-H, D-H:M or D-H:M:S; None for no limit (0, UNLIMITED,
    INFINITE); a bad one refused in one line."""
    if text.strip().upper() in ("0", "UNLIMITED", "INFINITE"):
        return None
    match = SLURM_TIME.match(text.strip())
    if match is None:
        raise ConfigError(f"--slurm-time {text}: not a Slurm time limit (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                          "D-HH:MM:SS)")
    days, first, second, third = (int(part) if part else None for part in match.groups())
    if days is None:  # M, M:S or H:M:S
        hours, minutes, seconds = (first, second, third) if third is not None else (0, first, second or 0)
    else:  # D-H, D-H:M, D-H:M:S
        hours, minutes, seconds = first, second or 0, third or 0
    return (days or 0) * 86_400 + hours * 3_600 + minutes * 60 + seconds


def check_job(runner, launch: LaunchConfig, emit: EmitOptions, host_memory_gb: float | None) -> None:
    """Before the job is written, what it would meet on its nodes: what a run of it refuses (the backend's own
    checks, with a node's GPUs, `--gpus-per-node`, and the memory of a host's ranks against a node's:
    `host_memory_gb`, else this machine's, said so), and, for Slurm, its expected time (its saves and loads at the
    projected times) against --slurm-time (none: no limit)."""
    if host_memory_gb is not None:
        memory, source = int(host_memory_gb * 1e9), f"--host-memory-gb {host_memory_gb:g}"
    else:
        memory, source = available_memory(), "this machine's; give the nodes' with --host-memory-gb"
    preview = None
    if runner.framework:
        # A framework's plan checks its checkout against this host (its build tools, its megatron-core against this
        # Python): the nodes' are what count, so only the experiment and its settings are checked here.
        preview = runner.preview(launch)
        print("note: the framework checks its checkout (build tools, megatron-core against the Python) on the nodes",
              file=sys.stderr)
    else:
        with checked_for_nodes(memory, source, gpus=emit.gpus_per_node or 0):
            runner.plan(launch)
    if emit.emit != "slurm":
        return
    asked = emit.slurm_time or DEFAULT_SLURM_TIME
    limit = slurm_seconds(asked)
    if limit is None:
        return
    estimate = (preview if preview is not None else runner.preview(launch)).get("job_time")
    if estimate is None:
        print(f"note: --slurm-time {asked} not checked against the job: no projected save and load times for it (a "
              "workload of the whole job with --storage-write-gbps and --storage-read-gbps projects them)",
              file=sys.stderr)
        return
    low, high = estimate["range_s"]
    what = f"{estimate['what']}, {asked} asked"
    if low > limit:
        raise ConfigError(f"--slurm-time {asked}: the job takes at least {_hours(low)} ({what}): raise --slurm-time, "
                          "or fewer --save-calls/--load-calls")
    if high is None or high > limit:
        most = f"at most {_hours(high)}" if high is not None else "its most unknown (a projected time is a bound)"
        print(f"note: the job takes at least {_hours(low)}, {most} ({what}): the limit may cut it", file=sys.stderr)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def _check(values: dict) -> None:
    for name, value in values.items():
        if isinstance(value, str) and any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ConfigError(f"--{name.replace('_', '-')} {value!r}: control characters are not allowed")


def install_command(wheelhouse: str) -> str:
    """ckpt-bench into the image's Python from the wheelhouse, offline, keeping its GPU stack (tools/install.py)."""
    return f"python {shlex.quote(wheelhouse + '/install.py')}"


def node_command(python: str | None, workdir: str, args: list[str], rendezvous: list[str],
                 wheelhouse: str | None = None) -> str:
    """The shell line every node runs: fixed values quoted, the cluster's variables expanded there. With a
    wheelhouse (a container), ckpt-bench is installed first (its one line on success left out of the job's
    log, which gets one per node) and run as `python -m ckpt_bench`; without, `python` runs this checkout's
    ckpt_launch.py."""
    if wheelhouse is None:
        launch = shlex.join([python, "ckpt_launch.py", *args])
        return f"cd {shlex.quote(workdir)} && exec {launch} {' '.join(rendezvous)}"
    launch = shlex.join(["python", "-m", "ckpt_bench", *args])
    install = f"{install_command(wheelhouse)} > /dev/null"
    return f"{install} && cd {shlex.quote(workdir)} && exec {launch} {' '.join(rendezvous)}"


def render(emit: EmitOptions, launch: LaunchConfig, values: Mapping, given: Iterable[str],
           flags: Mapping[str, Flag]) -> str:
    """The job script or manifest for `emit`, running the benchmark that `values` (the options `given`, typed as
    `launch`) describe on `values["nnodes"]` nodes. What the nodes need that this machine cannot vouch for is
    said on stderr."""
    _check(values)
    for item in values.get("set") or ():
        _check({"set": item})
    shared = emit.shared_dir.rstrip("/") or "/"
    values, given, inputs = absolute_paths(values, given, launch)
    if emit.gpus_per_node and "device" not in given:  # a job that asked for GPUs: a node without them fails
        values, given = {**values, "device": "gpu"}, {*given, "device"}
    args = benchmark_args(values, given, flags)
    args += ["--runs-dir", f"{shared}/runs"]
    if not values.get("save_dir"):
        args += ["--save-dir", f"{shared}/checkpoints"]
    container = emit.container_image
    workdir = emit.workdir or (shared if container else str(ROOT))
    wheelhouse = (emit.wheelhouse or f"{shared}/wheelhouse") if container else None
    notes = [check_wheelhouse(wheelhouse, shared)] if wheelhouse else []
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
    if container:
        _refuse_unseen(emit, inputs, shared)
    if emit.emit == "slurm":
        mounts = emit.container_mounts
        if container:  # the shared dir and the wheelhouse, at the paths the command names them by
            needed = [Path(shared), Path(wheelhouse)]
            added = [f"{folder}:{folder}" for folder in outside(needed, mount_targets(mounts))]
            mounts = ",".join(filter(None, [mounts, *added])) or None
        template_values.update(
            time=emit.slurm_time or DEFAULT_SLURM_TIME,
            partition=emit.slurm_partition,
            account=emit.slurm_account,
            output=f"{shared}/slurm-%j.out",
            container_image=container,
            container_mounts=mounts,
            check_command=install_command(wheelhouse) if wheelhouse else None,
            # Without a container the nodes run this very interpreter (a venv on shared storage).
            node_command=node_command(sys.executable, workdir, args, SLURM_RENDEZVOUS, wheelhouse),
        )
    else:
        per_pod = [f"--nnodes {nnodes}", *K8S_RENDEZVOUS, f"--run-id {shlex.quote(job_name)}"]
        roles = [("Master", 1)] + ([("Worker", nnodes - 1)] if nnodes > 1 else [])
        notes += [f"the pods see {folder} only if the image has it: the job reads it, and only {shared} is mounted"
                  for folder in outside([Path(wheelhouse)], [shared])]
        template_values.update(
            image=container,
            namespace=emit.k8s_namespace,
            pvc=emit.k8s_pvc,
            roles=roles,
            node_command=node_command(None, workdir, args, per_pod, wheelhouse),
        )
    for note in filter(None, notes):
        print(f"note: {note}", file=sys.stderr)
    return environment.get_template(TEMPLATES[emit.emit]).render(**template_values)
