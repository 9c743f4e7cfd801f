"""What the numbers were measured on: recorded in every report."""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import platform
import socket
import sys
from importlib import metadata
from pathlib import Path

import psutil

from ckpt_bench.core.checkpoint_dir import filesystem_type

PACKAGES = ("torch", "megatron-core", "lightning", "s3torchconnector")


def package_versions(names=PACKAGES) -> dict[str, str | None]:
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def describe_environment(save_dir: str | os.PathLike | None = None) -> dict:
    from ckpt_bench import __version__

    env = {
        "ckpt_bench": __version__,
        "python": platform.python_version(),
        **package_versions(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        # The host's memory: MLPerf Storage's rules weigh the checkpoint bytes a host writes against it.
        "memory_bytes": psutil.virtual_memory().total,
        "save_dir_filesystem": filesystem_type(save_dir) if save_dir and "://" not in str(save_dir) else None,
    }
    env.update(_accelerator())
    env["argv"] = sys.argv
    return env


def _accelerator() -> dict:
    """`cuda_available` and `gpu` as torch sees them; {} without torch."""
    if importlib.util.find_spec("torch") is None:
        return {}
    if not gpu_count():
        return {"cuda_available": False, "gpu": None}
    import torch

    return {"cuda_available": True, "gpu": torch.cuda.get_device_name(0)}


@functools.cache
def gpu_count() -> int:
    """The CUDA (or ROCm) GPUs torch sees on this host. A torch built for neither sees none, which its
    `version.py` says: read as text, since importing torch costs a launcher a second and a half of CPU that
    its ranks, starting at the same time, then lack."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return 0
    if not _built_for_a_gpu(Path(spec.submodule_search_locations[0]) / "version.py"):
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _built_for_a_gpu(version_file: Path) -> bool:
    """Whether torch's `version.py` names a CUDA or ROCm (HIP) build; True where it cannot be read (then ask torch)."""
    try:
        module = ast.parse(version_file.read_text())
    except (OSError, SyntaxError, ValueError):
        return True
    values = {}
    for node in module.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and getattr(node, "value", None) is not None:
            try:
                values[target.id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return not ("cuda" in values and "hip" in values) or bool(values["cuda"] or values["hip"])
