"""What the numbers were measured on: recorded in every report. The software stack is named as the ranks
load it, so two runs can be told apart: torch and what it was built for (`cuda`, `rocm`), Transformer Engine,
Apex, and the megatron-core that `import megatron.core` finds (a checkout on PYTHONPATH, as some images have
it, wins over an installed one); each null where absent."""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import platform
import socket
import sys
from pathlib import Path

from ckpt_bench.core.checkpoint_dir import filesystem_type
from ckpt_bench.core.devices import host_gpus, torch_build

PACKAGES = ("torch", "lightning", "s3torchconnector")
# The distribution names each GPU library is installed under, the first found wins (NGC and ROCm images use
# the first; a pip install of Transformer Engine's torch part alone has the second).
GPU_LIBRARIES = {"transformer-engine": ("transformer-engine", "transformer-engine-torch"), "apex": ("apex",)}


def package_versions(names=PACKAGES) -> dict[str, str | None]:
    from importlib import metadata  # imported when asked: email's parsers, a sixth of a log report's start-up

    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def describe_environment(save_dir: str | os.PathLike | None = None) -> dict:
    import psutil  # here: a report of logs never describes the host it runs on

    from ckpt_bench import __version__

    env = {
        "ckpt_bench": __version__,
        "python": platform.python_version(),
        **package_versions(),
        **gpu_stack(),
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


def usable_cores(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may keep busy: those it may run on (its affinity), fewer where its cgroup's CPU quota
    allows fewer (a container's limit: cgroup v2's `cpu.max`, v1's `cpu/cpu.cfs_quota_us` over its period)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
    for quota_file, period_file in (("cpu.max", None), ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us")):
        try:
            words = (cgroup / quota_file).read_text().split()
            quota, period = (words[0], words[1]) if period_file is None else (
                words[0], (cgroup / period_file).read_text().strip())
            if quota not in ("max", "-1"):
                return max(1, min(cores, -(-int(quota) // int(period))))
        except (OSError, ValueError, IndexError):
            continue
    return cores


def gpu_stack() -> dict[str, str | None]:
    """What torch was built for, Transformer Engine, Apex and megatron-core, without importing any of them."""
    build = torch_build()
    stack = {"cuda": build.cuda if build else None, "rocm": build.hip if build else None}
    for key, names in GPU_LIBRARIES.items():
        stack[key] = next(filter(None, package_versions(names).values()), None)
    stack["megatron-core"] = megatron_core_version()
    return stack


def megatron_core_version(checkout: Path | None = None) -> str | None:
    """The version of the megatron-core `import megatron.core` loads, or that a Megatron-LM `checkout` holds: its
    package_info.py, read as text (the same file in a checkout and in an installed wheel)."""
    if checkout is not None:
        folder = checkout / "megatron" / "core"
    else:
        try:
            spec = importlib.util.find_spec("megatron.core")
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        folder = Path(spec.submodule_search_locations[0])
    try:
        module = ast.parse((folder / "package_info.py").read_text())
    except (OSError, SyntaxError, ValueError):
        return None if checkout is not None else package_versions(("megatron-core",))["megatron-core"]
    parts = {}
    for node in module.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                parts[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    if not {"MAJOR", "MINOR", "PATCH"} <= parts.keys():
        return None if checkout is not None else package_versions(("megatron-core",))["megatron-core"]
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}{parts.get('PRE_RELEASE', '')}"


def _accelerator() -> dict:
    """`cuda_available` and `gpu` as torch sees them, and the host's own GPUs from its device files
    (`host_gpus`: what a torch that sees none was missing); {} without torch."""
    gpus = host_gpus()
    described = {"host_gpus": gpus.describe() if gpus else None}
    if importlib.util.find_spec("torch") is None:
        return described
    if not gpu_count():
        return {"cuda_available": False, "gpu": None, **described}
    import torch

    return {"cuda_available": True, "gpu": torch.cuda.get_device_name(0), **described}


@functools.cache
def gpu_count() -> int:
    """The CUDA (or ROCm) GPUs torch sees on this host. A torch built for neither sees none, which its
    `version.py` says (`torch_build`): read as text, since importing torch costs a launcher a second and a half
    of CPU that its ranks, starting at the same time, then lack. Where the build cannot be read, torch is asked."""
    if importlib.util.find_spec("torch") is None:
        return 0
    build = torch_build()
    if build is not None and build.vendor is None:
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
