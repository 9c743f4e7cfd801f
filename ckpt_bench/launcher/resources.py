"""What a run needs of this host, checked before anything starts: a torch that can use the host's GPUs
(`check_devices`: never a silent CPU run on a GPU host), memory (one line and exit 2 when the ranks of this
host cannot hold their state, rather than the kernel killing them minutes later), the process group its
accelerators call for, ranks the host can run (`check_ranks_per_node`) and room for the checkpoints the run
keeps (`check_free_space`)."""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ckpt_bench.core import devices
from ckpt_bench.core.environment import gpu_count
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.units import GIB, MIB

if TYPE_CHECKING:
    from ckpt_bench.storage import CheckpointStorage

# What a rank holds before any state of its own: Python with torch and the process group (~275 MB
# measured per rank here). Ranks that cannot have even that are refused, whatever the backend.
RANK_BASE_BYTES = 256 * MIB
# Ranks per CPU core on a host without GPUs: oversubscribed ranks work (gloo), a thousand do not.
RANKS_PER_CPU = 4


def default_dist_backend() -> str:
    """nccl where this host has CUDA GPUs, else gloo."""
    return "nccl" if gpu_count() else "gloo"


# The hosts the checks are for, where they are not this one (`--emit`: the cluster's nodes): their memory in bytes
# and where that figure comes from.
_OTHER_HOSTS: contextvars.ContextVar[tuple[int, str, int] | None] = contextvars.ContextVar("other_hosts",
                                                                                        default=None)


@contextlib.contextmanager
def checked_for_nodes(memory_bytes: int, source: str, gpus: int) -> Iterator[None]:
    """Within it, the host checks are of a cluster's node of `memory_bytes` (`source`: where that figure comes from,
    for the message) and `gpus` GPUs, instead of this host."""
    token = _OTHER_HOSTS.set((memory_bytes, source, gpus))
    try:
        yield
    finally:
        _OTHER_HOSTS.reset(token)


def available_memory() -> int:
    """Bytes this host can give a new process without swapping (the kernel's MemAvailable)."""
    import psutil

    return psutil.virtual_memory().available


def check_host_memory(needed: int, what: str, remedy: str) -> None:
    """Refuse with one line when `needed` bytes (everything this host's ranks hold at their peak) exceed
    the available memory (a node's, within `checked_for_nodes`). `what` says what needs it, `remedy` what the user
    can change."""
    nodes = _OTHER_HOSTS.get()
    available = available_memory() if nodes is None else nodes[0]
    where = "on this host" if nodes is None else "on each node"
    has = "is available" if nodes is None else f"is a node's ({nodes[1]})"
    if needed > available:
        raise ConfigError(f"{what} need {needed / GIB:.1f} GiB {where} but {available / GIB:.1f} GiB {has}: "
                          f"{remedy}")


def visible_gpus() -> int:
    """The NVIDIA or AMD GPUs this process may use, without importing torch (`ckpt_bench.core.devices`); within
    `checked_for_nodes`, a node's."""
    nodes = _OTHER_HOSTS.get()
    return devices.visible_gpus() if nodes is None else nodes[2]


# The oldest torch ckpt-bench runs on; a pre-release of it counts (NGC's 2.4.0a0+... is a 2.4).
MIN_TORCH = (2, 4)
INSTALL_HINT = "install ckpt-bench into the Python that has the image's GPU torch (docs/clusters.md)"


@contextlib.contextmanager
def device_environment(device: str | None) -> Iterator[None]:
    """Around a launch (its options' checks and its run): with `--device cpu`, the CUDA and HIP runtimes of this
    process and every process it starts see no GPU, so ranks, process groups and frameworks all take their CPU
    paths (gloo, CPU tensors); after it, the environment is as it was (a sweep's next job may use the GPUs)."""
    if device != "cpu":
        yield
        return
    saved = {name: os.environ.get(name) for name in devices.HIDE_GPUS}
    os.environ.update(devices.HIDE_GPUS)
    gpu_count.cache_clear()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        gpu_count.cache_clear()


def check_devices(device: str) -> None:
    """Refuse, in one line, a run whose ranks would land on the CPU of a host with GPUs (`--device auto`, the
    default) or without GPUs to land on (`--device gpu`): the torch build and the devices named, and what to
    do. `--device cpu` is the CPU on purpose (its GPUs hidden: `device_environment`)."""
    build = devices.torch_build()
    if build is not None:
        match = re.match(r"(\d+)\.(\d+)", build.version)
        if match and tuple(map(int, match.groups())) < MIN_TORCH:
            raise ConfigError(f"ckpt-bench needs torch {'.'.join(map(str, MIN_TORCH))} or newer and this Python has "
                              f"{build.describe()}: run it in an environment with a newer torch")
    if device == "cpu":
        return
    gpus = devices.host_gpus()
    if gpus is None or not gpus.visible:
        if device == "gpu":
            hidden = f" ({gpus.describe()}: *_VISIBLE_DEVICES hides them)" if gpus else ""
            raise ConfigError(f"--device gpu: no NVIDIA or AMD GPU is visible to this process{hidden}; run where "
                              "there are GPUs, or give --device cpu")
        return
    if build is None and importlib.util.find_spec("torch") is None:
        problem = "this Python has no torch"
    elif build is not None and build.vendor is None:
        problem = f"{build.describe()} cannot use them"
    elif build is not None and build.vendor != gpus.vendor:
        problem = f"{build.describe()} is built for {build.vendor} GPUs"
    elif not gpu_count():
        problem = (f"{build.describe() if build else 'torch'} sees none of them (torch.cuda.is_available() is False: "
                   "a driver older than the build, or a container started without its GPUs)")
    else:
        return
    raise ConfigError(f"this host has {gpus.describe()} and {problem}: {INSTALL_HINT}, or give --device cpu to "
                      "benchmark the CPU on purpose")


def check_ranks_per_node(ranks: int, dist_backend: str | None) -> None:
    """Refuse more ranks on this host than it can run: one GPU each for nccl on a GPU host, at most
    RANKS_PER_CPU per core without GPUs, and never more than the memory holds at RANK_BASE_BYTES each."""
    gpus = visible_gpus()
    if gpus and dist_backend != "gloo" and ranks > gpus:
        raise ConfigError(f"--nproc-per-node {ranks}: this host has {gpus} GPU(s) and nccl needs one per rank; "
                          f"use --nproc-per-node {gpus} or fewer (or --dist-backend gloo)")
    cpus = len(os.sched_getaffinity(0))
    if not gpus and ranks > RANKS_PER_CPU * cpus:
        raise ConfigError(f"--nproc-per-node {ranks}: this host has {cpus} CPU core(s) for its ranks; use at most "
                          f"{RANKS_PER_CPU * cpus} ({RANKS_PER_CPU} per core)")
    check_host_memory(ranks * RANK_BASE_BYTES, f"--nproc-per-node {ranks}: the ranks alone (Python and torch, "
                      f"{RANK_BASE_BYTES // MIB} MiB each)", "use fewer ranks per node")


def check_free_space(storage: CheckpointStorage, needed: int | None) -> None:
    """Refuse a run whose checkpoints (`needed` bytes at their peak, when the plan can tell) do not fit in
    the free space of the storage (a local filesystem; an object store does not say)."""
    space = storage.free_space() if needed is not None else None
    if space is None or needed <= space[1]:
        return
    folder, free = space
    raise ConfigError(f"the checkpoints this run keeps need {_size(needed)} and {folder} has {_size(free)} free: "
                      "save fewer or smaller checkpoints, or give a --save-dir with room")


def _size(count: int) -> str:
    return f"{count / GIB:.1f} GiB" if count >= GIB else f"{count / MIB:.1f} MiB"
