"""What the numbers were measured on: recorded in every report."""

from __future__ import annotations

import os
import platform
import socket
import sys
from importlib import metadata

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
    try:
        import torch

        env["cuda_available"] = torch.cuda.is_available()
        env["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        pass
    env["argv"] = sys.argv
    return env
