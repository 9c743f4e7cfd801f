"""`--emit slurm|k8s`: valid scripts and manifests whose node command is our CLI with the same options; in a
container, ckpt-bench installed from the wheelhouse first (checked once on one node under Slurm), every path the
job reads absolute, the Primus checkout an experiment was found in passed on."""

import shlex
import shutil
import subprocess
import sys

import pytest
import yaml
from helpers import ROOT, launch

from ckpt_bench.benchmark.emit import slurm_seconds
from ckpt_bench.cli.launch import launch as launch_command
from ckpt_bench.core.errors import ConfigError

# A job the nodes can run: its global batch a multiple of micro batch x data parallel at 3 and 4 nodes of 8.
BENCH = ["--backend", "megatron", "--nproc-per-node", "8", "--tp", "2", "--async-save", "--set",
         "global_batch_size=96", "--set", "data_path=a b'c; $(rm -rf /)", "--keep-checkpoints"]


def emit(*args):
    result = launch(*args, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def parsed_options(line: str, env: dict) -> dict:
    """The options `ckpt_launch.py` (or, in a container, `python -m ckpt_bench`) would get from a node's shell
    line, its variables set as `env`."""
    words = shlex.split(line.split(" && exec ", 1)[1])
    words = [env.get(w, w) for w in words]
    start = 2 if words[1] == "ckpt_launch.py" else 3
    assert words[1:start] in (["ckpt_launch.py"], ["-m", "ckpt_bench"])
    return launch_command.make_context("ckpt_launch.py", words[start:]).params


def expected(**extra):
    return {**launch_command.make_context("ckpt_launch.py", list(BENCH)).params, **extra}  # click consumes its list


def test_slurm_script(tmp_path):
    script = emit(*BENCH, "--emit", "slurm", "--nnodes", "4", "--shared-dir", "/lustre/ckpt",
                  "--gpus-per-node", "8", "--slurm-partition", "gpu; reboot", "--slurm-account", "acct",
                  "--container-image", "nvcr.io/nvidia/pytorch:25.01-py3", "--container-mounts", "/lustre:/lustre")
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    for line in ("#SBATCH --nodes=4", "#SBATCH --gpus-per-node=8", "#SBATCH --partition='gpu; reboot'",
                 "#SBATCH --account=acct", "#SBATCH --output=/lustre/ckpt/slurm-%j.out",
                 "--container-image=nvcr.io/nvidia/pytorch:25.01-py3", "--container-mounts=/lustre:/lustre"):
        assert line in script
    # One node installs ckpt-bench into the image's Python before the benchmark step holds every node.
    check, benchmark = [line for line in script.splitlines() if line.startswith("srun ")]
    assert check.startswith("srun --nodes=1 --ntasks=1 ") and benchmark.startswith("srun --nodes=4 ")
    assert "bash -c 'python /lustre/ckpt/wheelhouse/install.py'" in script
    assert 'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)' in script
    srun = [line for line in script.splitlines() if line.strip().startswith("bash -c")][-1]
    inner = shlex.split(srun)[2]
    env = {"$SLURM_NNODES": "4", "$SLURM_NODEID": "3", "$MASTER_ADDR": "n001", "$MASTER_PORT": "29500",
           "$SLURM_JOB_ID": "77"}
    options = parsed_options(inner, env)
    assert options == expected(nnodes=4, node_rank=3, master_addr="n001", master_port=29500, run_id="77",
                               runs_dir="/lustre/ckpt/runs", save_dir="/lustre/ckpt/checkpoints", device="gpu")


def test_k8s_manifest():
    manifest = yaml.safe_load(emit(*BENCH, "--emit", "k8s", "--nnodes", "3", "--shared-dir", "/mnt/shared",
                                   "--container-image", "repo/ckpt:1", "--k8s-pvc", "ckpt", "--job-name", "ck1",
                                   "--workdir", "/opt/ckpt-bench", "--gpus-per-node", "8"))
    assert manifest["kind"] == "PyTorchJob" and manifest["metadata"]["name"] == "ck1"
    specs = manifest["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 2
    pod = specs["Worker"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["name"] == "pytorch" and container["image"] == "repo/ckpt:1"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert {"name": "shared", "mountPath": "/mnt/shared"} in container["volumeMounts"]
    assert container["command"][:2] == ["bash", "-c"]
    assert container["command"][2].startswith("python /mnt/shared/wheelhouse/install.py > /dev/null && cd /opt/ckpt")
    env = {"${PET_NODE_RANK:-$RANK}": "2", "$MASTER_ADDR": "ck1-master-0", "$MASTER_PORT": "23456"}
    options = parsed_options(container["command"][2], env)
    assert options == expected(nnodes=3, node_rank=2, master_addr="ck1-master-0", master_port=23456, run_id="ck1",
                               runs_dir="/mnt/shared/runs", save_dir="/mnt/shared/checkpoints", device="gpu")


def test_control_characters_and_missing_shared_dir_are_refused():
    for args in (["--slurm-account", "a\nreboot", "--shared-dir", "/s"], []):
        result = subprocess.run([sys.executable, str(ROOT / "ckpt_launch.py"), "--emit", "slurm", *args],
                                capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_relative_experiment_inside_a_primus_checkout_reaches_the_nodes(tmp_path):
    """From inside a Primus checkout on the shared storage, as the docs direct: the experiment made absolute and the
    checkout passed as --primus-path (the nodes start in the shared dir), seen by the Slurm container through the
    shared dir's mount; a checkout outside the shared dir and the job's mounts is refused in one line before a node
    is held (a login host's own folder mounted at its path does not exist on the nodes)."""
    shared = tmp_path / "shared"
    primus = shared / "Primus"
    for presets in ("models", "modules"):  # the checkout's presets: the embedded experiment's
        shutil.copytree(ROOT / "ckpt_bench" / "configs" / presets, primus / "primus" / "configs" / presets)
    experiment = primus / "examples" / "exp.yaml"
    experiment.parent.mkdir()
    embedded = (ROOT / "ckpt_bench" / "configs" / "tiny_gpt.yaml").read_text()
    # A global batch the nodes' data-parallel size divides: the job is checked before it is written.
    experiment.write_text(embedded.replace("      async_save: false\n", "      async_save: false\n"
                                                                       "      global_batch_size: 64\n"))
    (shared / "wheelhouse").mkdir(parents=True)
    (shared / "wheelhouse" / "wheelhouse.json").write_text("{}")
    for option in ("--workload", "--config"):
        result = launch(option, "examples/exp.yaml", "--nnodes", "2", "--emit", "slurm", "--shared-dir", str(shared),
                        "--container-image", "rocm/primus:v25.9", cwd=primus, timeout=60)
        assert result.returncode == 0, result.stderr
        node = shlex.split([line for line in result.stdout.splitlines() if "bash -c" in line][-1])[2]
        options = parsed_options(node, {"$SLURM_NNODES": "2", "$SLURM_NODEID": "1", "$MASTER_PORT": "29500"})
        assert options[option.strip("-")] == str(experiment) and options["primus_path"] == str(primus)
        line = next(line for line in result.stdout.splitlines() if "--container-mounts=" in line)
        mounts = shlex.split(line.rstrip(" \\"))[0].split("=", 1)[1].split(",")
        assert mounts == [f"{shared}:{shared}"]
    local = tmp_path / "local"
    local.mkdir()
    elsewhere = local / "exp.yaml"
    elsewhere.write_text(experiment.read_text())
    for emit in ("slurm", "k8s"):
        result = launch("--workload", str(elsewhere), "--nnodes", "2", "--emit", emit, "--shared-dir", str(shared),
                        "--container-image", "rocm/primus:v25.9", timeout=60)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert f"the job reads {elsewhere}, which is not under --shared-dir {shared}" in result.stderr
    mounted = launch("--workload", str(elsewhere), "--nnodes", "2", "--emit", "slurm", "--shared-dir", str(shared),
                     "--container-image", "rocm/primus:v25.9", "--container-mounts", f"{local}:{local}", timeout=60)
    assert mounted.returncode == 0, mounted.stderr  # a mount the job declares is the user's word that nodes have it


def test_a_wheelhouse_missing_from_a_shared_dir_seen_here_is_refused(tmp_path):
    result = launch("--emit", "slurm", "--shared-dir", str(tmp_path), "--container-image", "nvcr.io/nvidia/pytorch:"
                    "24.10-py3", timeout=60)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"--wheelhouse {tmp_path}/wheelhouse: no wheelhouse there" in result.stderr


NODE = ["--workload", "llama3-8b", "--nnodes", "1", "--nproc-per-node", "8", "--emit", "slurm", "--shared-dir", "/s"]


def test_a_job_its_nodes_cannot_hold_or_finish_is_refused_before_it_is_written():
    """What a run of the job would refuse is refused before the nodes are held: a host's ranks against a node's
    memory (--host-memory-gb), and its saves and loads at the projected times against --slurm-time."""
    memory = launch(*NODE, "--host-memory-gb", "100", timeout=60)
    assert memory.returncode == 2 and memory.stdout == "" and len(memory.stderr.strip().splitlines()) == 1
    assert memory.stderr.startswith("error: workload llama3-8b through torch-save: the ranks of one host need "
                                    "106.7 GiB on each node but 93.1 GiB is a node's (--host-memory-gb 100)")
    slow = ["--host-memory-gb", "200", "--storage-write-gbps", "0.1", "--storage-read-gbps", "0.1"]
    late = launch(*NODE, *slow, "--slurm-time", "30", timeout=60)
    assert late.returncode == 2 and late.stdout == "", late.stderr
    assert late.stderr.strip().splitlines()[-1].startswith(
        "error: --slurm-time 30: the job takes at least 6.3 h (10 saves and 10 loads at the projected times, 5 s "
        "between checkpoints, 30 asked)")
    fits = launch(*NODE, *slow, "--slurm-time", "2-00:00:00", timeout=60)
    assert fits.returncode == 0 and "#SBATCH --time=2-00:00:00" in fits.stdout
    assert "note: the job takes at least 6.3 h, its most unknown" in fits.stderr
    unchecked = launch(*BENCH, "--emit", "slurm", "--nnodes", "2", "--shared-dir", "/s", timeout=60)
    assert unchecked.returncode == 0 and "note: --slurm-time 01:00:00 not checked against the job" in unchecked.stderr


@pytest.mark.parametrize(("text", "seconds"), [("30", 1800), ("30:15", 1815), ("04:00:00", 14_400), ("2-3", 183_600),
                                               ("2-03:30", 185_400), ("1-00:00:01", 86_401), ("0", None),
                                               ("UNLIMITED", None), ("infinite", None)])
def test_slurm_time_limits_read_as_slurm_reads_them(text, seconds):
    assert slurm_seconds(text) == seconds


def test_a_time_limit_slurm_would_not_read_is_refused():
    with pytest.raises(ConfigError, match=r"--slurm-time 4h: not a Slurm time limit \(minutes, MM:SS"):
        slurm_seconds("4h")
