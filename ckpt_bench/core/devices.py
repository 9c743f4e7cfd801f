"""The GPUs a host has and the torch build that should use them, both read without importing torch (a second
and a half of CPU a launcher's ranks, starting at the same time, would lack).

A host's GPUs are its device files, as a container sees them (it holds those of its own GPUs only):

    NVIDIA  /dev/nvidia<N>, one a GPU (nvidiactl, nvidia-uvm and nvidia-caps are not GPUs)
    AMD     /dev/kfd, ROCm's compute interface, and a render node /dev/dri/renderD<N> a GPU whose PCI vendor
            (/sys/class/drm/renderD<N>/device/vendor) is AMD's, 0x1002

narrowed as their runtimes narrow them: CUDA_VISIBLE_DEVICES (CUDA, and HIP too), HIP_VISIBLE_DEVICES and
ROCR_VISIBLE_DEVICES (ROCm), each a list the runtime reads up to its first invalid entry ("-1" hides all).
Everything is read under `ROOT`, so a test can point it at a folder laid out like one.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/")
AMD_PCI_VENDOR = "0x1002"
# What hides every GPU from the CUDA and HIP runtimes (their lists end at the first invalid entry).
HIDE_GPUS = {"CUDA_VISIBLE_DEVICES": "-1", "HIP_VISIBLE_DEVICES": "-1"}
_VISIBILITY = {"NVIDIA": ("CUDA_VISIBLE_DEVICES",),
               "AMD": ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")}


@dataclass(frozen=True)
class HostGpus:
    """A host's GPUs of one vendor: how many it has (`present`) and how many this process may use (`visible`)."""

    vendor: str  # "NVIDIA" or "AMD"
    present: int
    visible: int

    def describe(self) -> str:
        hidden = f", {self.present - self.visible} hidden" if self.visible < self.present else ""
        return f"{self.visible} {self.vendor} GPU{'s' if self.visible != 1 else ''}{hidden}"


def host_gpus(root: Path | None = None, environ: Mapping[str, str] | None = None) -> HostGpus | None:
    """This host's GPUs from its device files (NVIDIA's first where it somehow has both); None without any."""
    root = ROOT if root is None else root
    environ = os.environ if environ is None else environ
    for vendor, present in (("NVIDIA", _nvidia_gpus(root)), ("AMD", _amd_gpus(root))):
        if present:
            visible = present
            for variable in _VISIBILITY[vendor]:
                if variable in environ:
                    visible = min(visible, _listed(environ[variable], present))
            return HostGpus(vendor, present, visible)
    return None


def visible_gpus(root: Path | None = None, environ: Mapping[str, str] | None = None) -> int:
    """The GPUs this process may use, of whichever vendor the host has."""
    gpus = host_gpus(root, environ)
    return gpus.visible if gpus else 0


def _nvidia_gpus(root: Path) -> int:
    return sum(1 for path in (root / "dev").glob("nvidia*") if re.fullmatch(r"nvidia\d+", path.name))


def _amd_gpus(root: Path) -> int:
    if not (root / "dev" / "kfd").exists():
        return 0
    count = 0
    for node in (root / "dev" / "dri").glob("renderD*"):
        try:
            vendor = (root / "sys" / "class" / "drm" / node.name / "device" / "vendor").read_text().strip()
        except OSError:
            continue
        count += vendor.lower() == AMD_PCI_VENDOR
    return count


def _listed(value: str, present: int) -> int:
    """How many devices a *_VISIBLE_DEVICES list selects: its entries up to the first invalid one (an index
    out of range, a negative one, anything else that is not a device's UUID)."""
    count = 0
    for entry in value.split(","):
        entry = entry.strip()
        if entry.isdigit() and int(entry) < present or re.fullmatch(r"(GPU|MIG)-[\w-]+", entry):
            count += 1
        else:
            break
    return count


@dataclass(frozen=True)
class TorchBuild:
    """What torch was built for, from its `version.py`."""

    version: str
    cuda: str | None
    hip: str | None

    @property
    def vendor(self) -> str | None:
        """The GPUs it can use: "AMD" for a ROCm build (torch.version.hip), "NVIDIA" for a CUDA one, else None."""
        return "AMD" if self.hip else "NVIDIA" if self.cuda else None

    def describe(self) -> str:
        kind = f"ROCm {self.hip}" if self.hip else f"CUDA {self.cuda}" if self.cuda else "CPU-only"
        return f"torch {self.version} ({kind} build)"


def torch_build() -> TorchBuild | None:
    """The installed torch's build; None where torch is not installed or its version.py cannot be read."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return read_torch_build(Path(spec.submodule_search_locations[0]) / "version.py")


def read_torch_build(version_file: Path) -> TorchBuild | None:
    try:
        module = ast.parse(version_file.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    values = {}
    for node in module.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and getattr(node, "value", None) is not None:
            try:
                values[target.id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    if "__version__" not in values or "cuda" not in values or "hip" not in values:
        return None
    return TorchBuild(str(values["__version__"]), values["cuda"], values["hip"])
