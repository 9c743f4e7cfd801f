"""`--emit slurm|k8s`: valid scripts and manifests whose node command is our CLI with the same options."""

import shlex
import subprocess
import sys

import yaml
from helpers import ROOT, launch

from ckpt_bench.cli.launch import launch as launch_command

BENCH = ["--backend", "megatron", "--nproc-per-node", "8", "--tp", "2", "--async-save",
         "--set", "data_path=a b'c; $(rm -rf /)", "--keep-checkpoints"]


def emit(*args):
    result = launch(*args, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def parsed_options(line: str, env: dict) -> dict:
    """The options `ckpt_launch.py` would get from a node's shell line, its variables set as `env`."""
    words = shlex.split(line.split(" && exec ", 1)[1])
    words = [env.get(w, w) for w in words]
    assert words[1] == "ckpt_launch.py"
    return launch_command.make_context("ckpt_launch.py", words[2:]).params


def expected(**extra):
    return {**launch_command.make_context("ckpt_launch.py", BENCH).params, **extra}


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
    assert 'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)' in script
    srun = next(line for line in script.splitlines() if line.strip().startswith("bash -c"))
    inner = shlex.split(srun)[2]
    env = {"$SLURM_NNODES": "4", "$SLURM_NODEID": "3", "$MASTER_ADDR": "n001", "$MASTER_PORT": "29500",
           "$SLURM_JOB_ID": "77"}
    options = parsed_options(inner, env)
    assert options == expected(nnodes=4, node_rank=3, master_addr="n001", master_port=29500, run_id="77",
                               runs_dir="/lustre/ckpt/runs", save_dir="/lustre/ckpt/checkpoints")


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
    env = {"${PET_NODE_RANK:-$RANK}": "2", "$MASTER_ADDR": "ck1-master-0", "$MASTER_PORT": "23456"}
    options = parsed_options(container["command"][2], env)
    assert options == expected(nnodes=3, node_rank=2, master_addr="ck1-master-0", master_port=23456, run_id="ck1",
                               runs_dir="/mnt/shared/runs", save_dir="/mnt/shared/checkpoints")


def test_control_characters_and_missing_shared_dir_are_refused():
    for args in (["--slurm-account", "a\nreboot", "--shared-dir", "/s"], []):
        result = subprocess.run([sys.executable, str(ROOT / "ckpt_launch.py"), "--emit", "slurm", *args],
                                capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
