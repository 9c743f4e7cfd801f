"""A host's GPUs from its device files, and the refusal of a run whose torch cannot use them (never a silent CPU
run on a GPU host), on folders laid out as NVIDIA and AMD hosts lay them out."""

import json
import os

import pytest
from click.testing import CliRunner

from ckpt_bench.benchmark import registry
from ckpt_bench.cli.launch import launch as launch_command
from ckpt_bench.core import devices
from ckpt_bench.core.devices import HostGpus, TorchBuild, host_gpus, read_torch_build
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.launcher import resources

VISIBILITY = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def nvidia_host(root, gpus=2):
    (root / "dev").mkdir(parents=True)
    for name in [f"nvidia{i}" for i in range(gpus)] + ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]:
        (root / "dev" / name).touch()
    return root


def amd_host(root, vendors=("0x1002", "0x1002", "0x1a03")):
    """/dev/kfd and a render node per device; the last one here is a BMC's display (ASPEED), not a GPU."""
    (root / "dev" / "dri").mkdir(parents=True)
    (root / "dev" / "kfd").touch()
    for index, vendor in enumerate(vendors):
        name = f"renderD{128 + index}"
        (root / "dev" / "dri" / name).touch()
        (root / "sys" / "class" / "drm" / name / "device").mkdir(parents=True)
        (root / "sys" / "class" / "drm" / name / "device" / "vendor").write_text(vendor + "\n")
    return root


@pytest.mark.parametrize("environ,visible", [
    ({}, 4), ({"CUDA_VISIBLE_DEVICES": "1,3"}, 2), ({"CUDA_VISIBLE_DEVICES": "-1"}, 0),
    ({"CUDA_VISIBLE_DEVICES": ""}, 0), ({"CUDA_VISIBLE_DEVICES": "0,7,1"}, 1),  # the list ends at an invalid entry
    ({"CUDA_VISIBLE_DEVICES": "GPU-8b5f2a4e-1d2c-4a55-9f0e-000000000001"}, 1),
    ({"HIP_VISIBLE_DEVICES": "0"}, 4),  # ROCm's variables leave NVIDIA GPUs alone
])
def test_nvidia_gpus_are_their_device_files_narrowed_as_cuda_narrows_them(tmp_path, environ, visible):
    assert host_gpus(nvidia_host(tmp_path, 4), environ) == HostGpus("NVIDIA", 4, visible)


@pytest.mark.parametrize("environ,visible", [
    ({}, 2), ({"ROCR_VISIBLE_DEVICES": "1"}, 1), ({"HIP_VISIBLE_DEVICES": "-1"}, 0),
    ({"CUDA_VISIBLE_DEVICES": "0"}, 1),  # HIP reads CUDA's variable too
])
def test_amd_gpus_are_render_nodes_of_amds_vendor_id_beside_kfd(tmp_path, environ, visible):
    assert host_gpus(amd_host(tmp_path), environ) == HostGpus("AMD", 2, visible)


def test_no_gpu_without_device_files_or_without_kfd(tmp_path):
    assert host_gpus(tmp_path, {}) is None
    root = amd_host(tmp_path / "no-kfd")
    (root / "dev" / "kfd").unlink()  # render nodes alone are a display, not ROCm's compute
    assert host_gpus(root, {}) is None


@pytest.mark.parametrize("text,build", [
    ("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\nhip: Optional[str] = None\n",
     TorchBuild("2.13.0+cpu", None, None)),
    ("__version__ = '2.5.0a0+e000cf0ad9.nv24.10'\ncuda = '12.6'\nhip = None\n",
     TorchBuild("2.5.0a0+e000cf0ad9.nv24.10", "12.6", None)),
    ("__version__ = '2.4.0+rocm6.1'\ncuda = None\nhip = '6.1.40091-a8dbc0c19'\n",
     TorchBuild("2.4.0+rocm6.1", None, "6.1.40091-a8dbc0c19")),
    ("__version__ = '2.13.0'\n", None),  # says nothing of its build: torch is asked
    ("cuda = (\n", None),
])
def test_the_torch_build_is_read_from_its_version_file(tmp_path, text, build):
    version = tmp_path / "version.py"
    version.write_text(text)
    assert read_torch_build(version) == build


def test_a_rocm_build_is_a_gpu_build_for_amd():
    assert TorchBuild("2.4.0+rocm6.1", None, "6.1").vendor == "AMD"
    assert TorchBuild("2.5.0a0+nv24.10", "12.6", None).vendor == "NVIDIA"
    assert TorchBuild("2.13.0+cpu", None, None).vendor is None


@pytest.fixture
def host(monkeypatch, tmp_path):
    """Point the device files at a folder; the visibility variables cleared (restored afterwards)."""
    for variable in VISIBILITY:
        monkeypatch.delenv(variable, raising=False)

    def make(kind):
        root = {"nvidia": lambda r: nvidia_host(r, 4), "amd": amd_host, "none": lambda r: r}[kind](tmp_path / kind)
        monkeypatch.setattr(devices, "ROOT", root)
        return root
    return make


@pytest.mark.parametrize("kind,named", [("nvidia", "4 NVIDIA GPUs"), ("amd", "2 AMD GPUs")])
def test_a_gpu_host_with_a_cpu_torch_is_refused_in_one_line(host, kind, named):
    host(kind)
    with pytest.raises(ConfigError) as refused:
        resources.check_devices("auto")
    message = str(refused.value)
    assert "\n" not in message
    assert named in message and "torch 2.13.0+cpu (CPU-only build) cannot use them" in message
    assert "image's GPU torch" in message and "--device cpu" in message


def test_a_torch_built_for_the_other_vendor_is_refused(host, monkeypatch):
    host("amd")
    monkeypatch.setattr(devices, "torch_build", lambda: TorchBuild("2.13.0+cu128", "12.8", None))
    with pytest.raises(ConfigError, match=r"2 AMD GPUs and torch 2.13.0\+cu128 \(CUDA 12.8 build\) is built for "
                                          "NVIDIA GPUs"):
        resources.check_devices("auto")


def test_a_matching_build_that_sees_no_gpu_is_refused(host, monkeypatch):
    host("amd")
    monkeypatch.setattr(devices, "torch_build", lambda: TorchBuild("2.4.0+rocm6.1", None, "6.1"))
    monkeypatch.setattr(resources, "gpu_count", lambda: 0)
    with pytest.raises(ConfigError, match=r"\(ROCm 6.1 build\) sees none of them"):
        resources.check_devices("auto")
    monkeypatch.setattr(resources, "gpu_count", lambda: 2)
    resources.check_devices("auto")  # RCCL under the nccl name: the run goes ahead on the GPUs


def test_device_cpu_runs_on_purpose_and_device_gpu_needs_gpus(host):
    host("nvidia")
    resources.check_devices("cpu")
    host("none")
    resources.check_devices("auto")  # a CPU host: the CPU is the answer
    with pytest.raises(ConfigError, match="--device gpu: no NVIDIA or AMD GPU is visible"):
        resources.check_devices("gpu")


def test_an_old_torch_is_refused(host, monkeypatch):
    host("none")
    monkeypatch.setattr(devices, "torch_build", lambda: TorchBuild("2.3.1+cu121", "12.1", None))
    with pytest.raises(ConfigError, match=r"needs torch 2.4 or newer and this Python has torch 2.3.1"):
        resources.check_devices("auto")
    monkeypatch.setattr(devices, "torch_build", lambda: TorchBuild("2.4.0a0+3bcc3cddb5.nv24.07", "12.5", None))
    host("none")
    resources.check_devices("auto")  # NGC 24.07's pre-release of 2.4 is a 2.4


def test_the_launcher_refuses_before_anything_starts_and_device_cpu_hides_the_gpus(host, tmp_path, monkeypatch):
    host("nvidia")
    runs = tmp_path / "runs"
    refused = CliRunner().invoke(launch_command, ["--runs-dir", str(runs), "--backend", "dcp", "--model", "tiny"])
    assert refused.exit_code == 2, refused.output
    lines = refused.output.strip().splitlines()
    assert len(lines) == 1 and "this host has 4 NVIDIA GPUs" in lines[0], refused.output
    assert not runs.exists()  # nothing created
    # --device cpu: the GPUs hidden from this process and its ranks for the launch, two CPU ranks by default (not
    # one a GPU); after it, the environment as it was (a sweep's next job may use them).
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in devices.HIDE_GPUS})
    seen = []
    monkeypatch.setattr(registry, "build_launch", lambda *args, build=registry.build_launch: (
        seen.append((os.environ.get("CUDA_VISIBLE_DEVICES"), resources.visible_gpus())) or build(*args)))
    planned = CliRunner().invoke(launch_command, ["--device", "cpu", "--backend", "dcp", "--model", "tiny", "--plan",
                                                  "--format", "json"])
    assert planned.exit_code == 0, planned.output
    assert seen == [("-1", 0)]
    assert json.loads(planned.output)["ranks"]["nproc_per_node"] == 2
    assert "CUDA_VISIBLE_DEVICES" not in os.environ and resources.visible_gpus() == 4
