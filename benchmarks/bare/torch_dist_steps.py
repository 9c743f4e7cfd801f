"""megatron-core's global steps as they really run: the workload's torch_dist engine (the same code a `--workload`
run uses, the experiment's settings applied) saves and loads on N gloo ranks, and each of megatron-core's global
steps is timed where megatron-core calls it, on rank 0: its CPU (this thread's, `time.thread_time`: what the
projection computes) and its wall time.

    torchrun --nproc-per-node N benchmarks/bare/torch_dist_steps.py --workload EXP.yaml [--set K=V ...] \
        --save-calls 3 --save-dir DIR --out steps.json

The steps, by the function megatron-core (and torch) call them through (core_v0.16.1):
    sharding validation      save_preprocess (save); determine_global_metadata + validate_integrity_and_strict_load
                             (load)
    fully parallel           determine_main_replica_uniform_distribution, in the fully parallel save's
      distribution           apply_saving_parallelization (and the load's)
    sharding validation,     the wrapper's own determine_global_metadata + validate_sharding_integrity
      again
    global plan              save_state_dict_async_plan
    finalize                 save_state_dict_async_finalize
    metadata                 FileSystemReader.read_metadata (each call)
    load plan                the load's _DistWrapper.reduce_scatter (gather, create_global_plan, scatter)
Each rank's bytes read at the restart go to rank 0 too: what its reader asks the checkpoint for (each item's stored
length, and .metadata at each read), and what read(2) delivered (/proc/self/io rchar: buffers' read-ahead too).
"""

import argparse
import dataclasses
import gc
import json
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.distributed as dist
from megatron.core.dist_checkpointing import serialization, state_dict_utils, validation
from megatron.core.dist_checkpointing.strategies import fully_parallel, state_dict_saver
from megatron.core.dist_checkpointing.strategies import torch as mcore_torch
from megatron.core.dist_checkpointing.strategies.filesystem_async import FileSystemWriterAsync
from torch.distributed.checkpoint import filesystem, utils

from ckpt_bench.backends.workload.engines import ENGINES, state_layout
from ckpt_bench.backends.workload.engines.torch_dist import TorchDistEngine
from ckpt_bench.backends.workload.spec import WorkloadSpec
from ckpt_bench.core.experiment import parse_assignment
from ckpt_bench.layout.sources import resolve_workload
from ckpt_bench.worker import cpu_compat
from ckpt_bench.worker.entry import WorkerContext


class Steps:
    """Rank 0's CPU and wall seconds per step of the operation in progress; a step called inside another counts as
    its own, not the outer one's."""

    def __init__(self) -> None:
        self.current: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
        self.stack: list[list] = []  # [name, cpu at entry, wall at entry, inner cpu, inner wall]

    def timed(self, name: str, function):
        steps = self

        def wrapper(*args, **kwargs):
            steps.stack.append([name, time.thread_time(), time.monotonic(), 0.0, 0.0])
            try:
                return function(*args, **kwargs)
            finally:
                _, cpu, wall, inner_cpu, inner_wall = steps.stack.pop()
                cpu, wall = time.thread_time() - cpu, time.monotonic() - wall
                entry = steps.current[name]
                entry[0] += cpu - inner_cpu
                entry[1] += wall - inner_wall
                entry[2] += 1
                if steps.stack:
                    steps.stack[-1][3] += cpu
                    steps.stack[-1][4] += wall

        return wrapper

    def timed_for_caller(self, function):
        """`function`, its time the step's below the one running (the CPU layer's call of the torch function it
        intercepted: megatron-core's own work, as a GPU rank does it, not the layer's)."""
        steps = self

        def wrapper(*args, **kwargs):
            name = steps.stack[-2][0] if len(steps.stack) > 1 else OUTSIDE
            return steps.timed(name, function)(*args, **kwargs)

        return wrapper

    def take(self) -> dict:
        taken = {name: {"cpu_s": round(cpu, 4), "wall_s": round(wall, 4), "calls": calls}
                 for name, (cpu, wall, calls) in self.current.items()}
        self.current.clear()
        return taken


#: What each rank does for itself whatever the rank count (the projection leaves it out: not a rank-count cost).
OWN = "own plan and state (per rank)"
#: ckpt-bench's CPU layer (`cpu_compat`'s torch function mode): its own dispatch of every torch call megatron-core
#: makes on a CPU rank, which a GPU rank does not pay; the torch call itself stays its step's.
LAYER = "our CPU layer's dispatch (not on GPUs)"
OUTSIDE = "outside a timed step"


def instrument(steps: Steps) -> None:
    """Time megatron-core's global steps where it looks them up (module attributes, replaced in place), and each
    rank's own planning apart."""
    serialization.save_preprocess = steps.timed("sharding validation", state_dict_utils.save_preprocess)
    fully_parallel.determine_main_replica_uniform_distribution = steps.timed(
        "fully parallel distribution", fully_parallel.determine_main_replica_uniform_distribution)
    validate, determine = fully_parallel.validate_sharding_integrity, fully_parallel.determine_global_metadata
    fully_parallel.determine_global_metadata = steps.timed("sharding validation, again", determine)
    fully_parallel.validate_sharding_integrity = steps.timed("sharding validation, again", validate)
    mcore_torch.save_state_dict_async_plan = steps.timed("global plan", state_dict_saver.save_state_dict_async_plan)
    finalize = state_dict_saver.save_state_dict_async_finalize
    mcore_torch.save_state_dict_async_finalize = steps.timed("finalize", finalize)
    determine = serialization.determine_global_metadata
    serialization.determine_global_metadata = steps.timed("sharding validation", determine)
    serialization.validate_integrity_and_strict_load = steps.timed(
        "sharding validation", validation.validate_integrity_and_strict_load)
    filesystem.FileSystemReader.read_metadata = steps.timed("metadata", filesystem.FileSystemReader.read_metadata)
    utils._DistWrapper.reduce_scatter = steps.timed("load plan", utils._DistWrapper.reduce_scatter)
    for planner in (mcore_torch.MCoreSavePlanner, mcore_torch.MCoreLoadPlanner):
        for method in ("set_up_planner", "create_local_plan", "finish_plan"):
            setattr(planner, method, steps.timed(OWN, getattr(planner, method)))
    mode = cpu_compat._CudaToCpu
    dispatch = mode.__torch_function__

    rewritten = (torch.Tensor.cuda, torch.Tensor.to, torch.Tensor.type)  # the layer tells these by identity

    def layered(self, func, types, args=(), kwargs=None):
        inner = func if func in rewritten else steps.timed_for_caller(func)
        return dispatch(self, inner, types, args, kwargs)

    mode.__torch_function__ = steps.timed(LAYER, layered)
    for writer_method in ("prepare_local_plan", "prepare_write_data"):
        setattr(FileSystemWriterAsync, writer_method, steps.timed(OWN, getattr(FileSystemWriterAsync, writer_method)))


def read_bytes() -> int:
    """This process's bytes read through read(2) and its kin (page cache or storage, buffers' read-ahead
    included)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


class RequestedBytes:
    """The bytes this rank's DCP reader asks the checkpoint for: each read item's stored length (a tensor's bytes
    with its torch.save framing), summed over `FileSystemReader.read_data`'s plans."""

    def __init__(self) -> None:
        self.total = 0
        read_data = filesystem.FileSystemReader.read_data
        counter = self

        def counted(reader, plan, planner):
            counter.total += sum(reader.storage_data[item.storage_index].length for item in plan.items)
            return read_data(reader, plan, planner)

        filesystem.FileSystemReader.read_data = counted


def settled() -> None:
    """Untimed: a collection of the heap now, and what exists so far frozen out of later ones, so that a
    collection a step happens to trigger (any step may, at random) does not land in its time."""
    gc.collect()
    gc.freeze()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", required=True)
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--save-calls", type=int, default=3)
    parser.add_argument("--save-dir", required=True)
    parser.add_argument("--out", required=True)
    options = parser.parse_args()
    context = WorkerContext.join("gloo")
    world = context.world_size
    workload = resolve_workload(options.workload, dict(parse_assignment(text) for text in options.set))
    layout = state_layout(ENGINES["torch_dist"], workload, world)
    spec = WorkloadSpec(workload=dataclasses.asdict(workload), world_size=world, run_ranks=None, engine="torch_dist",
                        save_calls=options.save_calls, load_calls=1, time_between_checkpoints=0.0, sync_files=True,
                        async_save=False, thread_count=2, dist_backend="gloo", storage={"storage": "disk"}, seed=1234,
                        events_dir=options.save_dir)
    engine = TorchDistEngine(spec, layout, context, storage=None)
    steps, requested = Steps(), RequestedBytes()
    instrument(steps)
    state = engine.allocate()
    saves = []
    for call in range(1, options.save_calls + 1):
        location = f"{options.save_dir}/iter_{call:07d}"
        engine.prepare(state, location)
        settled()
        dist.barrier()
        steps.take()
        engine.save(state, location)
        saves.append(steps.take())
    engine.close()
    # A restart's process holds only what it loads (the product runs it as a pass of its own): the save's
    # tensors and state dict go first.
    del state
    engine._state_dict = {}
    gc.collect()
    loaded = engine.allocate_for_load()
    engine.prepare(loaded, location)
    settled()
    dist.barrier()
    steps.take()
    before = read_bytes()
    engine.load(loaded, location)
    rank_read = read_bytes() - before
    load = steps.take()
    metadata = (Path(location) / ".metadata").stat().st_size * load.get("metadata", {}).get("calls", 0)
    reads = [None] * world
    dist.all_gather_object(reads, (requested.total + metadata, rank_read))
    if context.rank == 0:
        checkpoint = Path(location)
        Path(options.out).write_text(json.dumps({
            "world_size": world, "saves": saves, "load": load, "read_bytes": [r[0] for r in reads],
            "rchar_bytes": [r[1] for r in reads],
            "tensor_read_bytes": [share.load_bytes for share in layout.ranks],
            "files": {path.name: path.stat().st_size for path in checkpoint.iterdir() if path.is_file()},
            "settings": engine.settings.as_dict()}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
