"""Collective bandwidth, measured and named the way nccl-tests does (its doc/PERFORMANCE.md).

For each collective and message size we time `iters` back-to-back operations after `warmup`
untimed ones, and report:

* `time_us`: mean time of one operation on the slowest rank (a collective is done when its last
  rank is; this is also the report engine's rule for checkpoints).
* `algbw_gbps`: size / time, in GB/s (1e9 bytes/s, as nccl-tests).
* `busbw_gbps`: algbw x the collective's bus factor, the rate each link must sustain with an optimal
  algorithm: comparable across collectives and rank counts, and with the fabric's rated speed.

`size` follows nccl-tests too: the whole buffer of an all-reduce or broadcast, the gathered output
of an all-gather and the input of a reduce-scatter (n ranks x one rank's chunk).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

from ckpt_bench.core.units import KIB, MIB

DEFAULT_MIN_SIZE = 1 * KIB
DEFAULT_MAX_SIZE = 256 * MIB
SIZE_STEP = 4  # 1 KiB, 4 KiB, ... 256 MiB: 10 sizes
# Fewer iterations for large messages, so the whole sweep stays short: at most this many bytes moved
# per (collective, size) in the timed loop, never fewer than MIN_ITERS iterations.
BYTES_PER_SIZE = 1 << 30
MIN_ITERS = 3

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' busbw / algbw: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n, broadcast 1."""
    if collective == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if collective in ("all_gather", "reduce_scatter"):
        return (ranks - 1) / ranks
    if collective == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {collective!r}")


def message_sizes(min_size: int = DEFAULT_MIN_SIZE, max_size: int = DEFAULT_MAX_SIZE) -> list[int]:
    sizes, size = [], min_size
    while size <= max_size:
        sizes.append(size)
        size *= SIZE_STEP
    return sizes


def iterations_for(size: int, iters: int) -> int:
    return max(MIN_ITERS, min(iters, BYTES_PER_SIZE // size))


@dataclass
class Measurement:
    collective: str
    size: int  # bytes, as nccl-tests counts them (see the module docstring)
    count: int  # float32 elements in that buffer
    iters: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float


def _operation(collective: str, count: int, ranks: int, device: torch.device) -> Callable[[], None]:
    """One call of `collective` on buffers of `count` float32 elements (allocated once, reused)."""
    chunk = count // ranks
    if collective == "all_reduce":
        buffer = torch.ones(count, device=device)
        return lambda: dist.all_reduce(buffer)
    if collective == "broadcast":
        buffer = torch.ones(count, device=device)
        return lambda: dist.broadcast(buffer, src=0)
    # The *_single names replace *_into_tensor / *_tensor in recent torch; same semantics.
    if collective == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        source, output = torch.ones(chunk, device=device), torch.empty(count, device=device)
        return lambda: gather(output, source)
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    source, output = torch.ones(count, device=device), torch.empty(chunk, device=device)
    return lambda: scatter(output, source)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    collective: str, size: int, iters: int, warmup: int, device: torch.device
) -> Measurement:
    """Time one collective at one size; every rank must call it with the same arguments."""
    ranks = dist.get_world_size()
    count = max(ranks, size // 4 // ranks * ranks)  # whole float32 elements, divisible into chunks
    nbytes = count * 4
    iters = iterations_for(nbytes, iters)
    operation = _operation(collective, count, ranks, device)
    for _ in range(warmup):
        operation()
    _synchronize(device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        operation()
    _synchronize(device)
    elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's time
    seconds = elapsed.item()
    algbw = nbytes / seconds / 1e9
    return Measurement(
        collective, nbytes, count, iters, round(seconds * 1e6, 2), round(algbw, 4),
        round(algbw * bus_factor(collective, ranks), 4),
    )


def sweep(
    collectives: Iterable[str], sizes: Iterable[int], iters: int, warmup: int, device: torch.device,
    on_result: Callable[[Measurement], None] = lambda m: None,
) -> tuple[list[dict], dict[str, str]]:
    """Every collective at every size. A collective the process group does not implement is
    recorded as unsupported (with the error) instead of failing the sweep."""
    results, unsupported = [], {}
    for collective in collectives:
        for size in sizes:
            try:
                measurement = measure(collective, size, iters, warmup, device)
            except (RuntimeError, NotImplementedError) as error:
                unsupported[collective] = str(error).splitlines()[0]
                break
            on_result(measurement)
            results.append(asdict(measurement))
    return results, unsupported


def format_size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


TABLE_HEADER = f"{'collective':<15}{'size':>10}{'iters':>7}{'time (us)':>13}{'algbw (GB/s)':>14}{'busbw (GB/s)':>14}"


def table_row(m: dict | Measurement) -> str:
    m = asdict(m) if isinstance(m, Measurement) else m
    return (f"{m['collective']:<15}{format_size(m['size']):>10}{m['iters']:>7}{m['time_us']:>13.1f}"
            f"{m['algbw_gbps']:>14.3f}{m['busbw_gbps']:>14.3f}")


def format_table(results: dict) -> str:
    """The results document (see ckpt_bench.backends.comms.worker) as a table."""
    lines = [f"# {results['dist_backend']}, {results['world_size']} ranks on {results['nnodes']} node(s), "
             "float32; time: mean per op on the slowest rank; GB/s = 1e9 bytes/s", TABLE_HEADER]
    lines += [table_row(m) for m in results["results"]]
    lines += [f"{name:<15}unsupported: {why}" for name, why in results.get("unsupported", {}).items()]
    return "\n".join(lines)
