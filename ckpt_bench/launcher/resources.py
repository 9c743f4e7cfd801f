"""What a run needs of this host, checked before anything starts: memory (one line and exit 2 when the
ranks of this host cannot hold their state, rather than the kernel killing them minutes later), and the
process group its accelerators call for."""

from __future__ import annotations

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.units import GIB


def default_dist_backend() -> str:
    """nccl where this host has CUDA GPUs, else gloo."""
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def available_memory() -> int:
    """Bytes this host can give a new process without swapping (the kernel's MemAvailable)."""
    import psutil

    return psutil.virtual_memory().available


def check_host_memory(needed: int, what: str, remedy: str) -> None:
    """Refuse with one line when `needed` bytes (everything this host's ranks hold at their peak) exceed
    the available memory. `what` says what needs it, `remedy` what the user can change."""
    available = available_memory()
    if needed > available:
        raise ConfigError(f"{what} need {needed / GIB:.1f} GiB on this host but {available / GIB:.1f} GiB is "
                          f"available: {remedy}")
