"""What every engine is on a rank, and the states they save: DLIO's tensors, a Megatron GPT's shards.

An `Engine` gets a rank's state (a flat dict of named tensors it allocated once, `allocate`) and saves it
to, or loads it from, one location per checkpoint. The worker around it (`workload.worker`) does the
rest the same way for every engine: barriers, timing, the wait between checkpoints, digests, eviction.
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from ckpt_bench.backends.workload.spec import WorkloadSpec
from ckpt_bench.core.events import Phase
from ckpt_bench.layout.checkpoint_layout import FileShare, Layout, RankShare
from ckpt_bench.layout.dlio_layout import dlio_tensor_name
from ckpt_bench.layout.megatron_shapes import Shard
from ckpt_bench.layout.workload import TORCH_DTYPE
from ckpt_bench.storage.base import WorkerStorage
from ckpt_bench.worker.entry import WorkerContext
from ckpt_bench.worker.phases import PhaseClock

# An async save's pending write: call it to wait until the checkpoint is durable.
Pending = Callable[[], None]


@dataclass
class RankState:
    """The tensors a rank holds, allocated once for the whole run."""

    tensors: dict[str, torch.Tensor]
    """Every tensor by a name unique across the job (digested, perturbed, saved and loaded by name)."""
    files: list[tuple[FileShare, dict]]
    """DLIO's files of this rank, each with its nested dict of the same tensors (for `torch.save`)."""
    perturbed: str | None = None
    """The tensor each save changes (None: the smallest); one no other rank holds a replica of."""

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())




def allocate_dlio(share: RankShare, seed: int, randomize: bool, device: torch.device, fill: bool = True) -> RankState:
    """DLIO's tensors of this rank: flat 1-D, random (`torch.rand`, `randint` for integers) or ones, as
    DLIO fills them (`fill` False: uninitialized, for a load to overwrite). Allocated once; the files'
    dicts hold the same tensors, no copy."""
    generator = torch.Generator(device=device).manual_seed(seed + share.rank)
    tensors: dict[str, torch.Tensor] = {}

    def build(file: FileShare, node):
        if isinstance(node, dict):
            return {key: build(file, value) for key, value in node.items()}
        dtype = getattr(torch, node.torch_dtype)
        if not fill:
            tensor = torch.empty(node.numel, dtype=dtype, device=device)
        elif not randomize:
            tensor = torch.ones(node.numel, dtype=dtype, device=device)
        elif dtype.is_floating_point:
            tensor = torch.rand(node.numel, dtype=dtype, device=device, generator=generator)
        else:
            tensor = torch.randint(0, 127, (node.numel,), dtype=dtype, device=device, generator=generator)
        tensors[dlio_tensor_name(file, node.name)] = tensor
        return tensor

    files = [(file, build(file, file.state_tree())) for file in share.files]
    return RankState(tensors, files)


def allocate_shards(shards: Iterable[Shard], seed: int, randomize: bool, device: torch.device,
                    fill: bool = True) -> dict[str, torch.Tensor]:
    """A Megatron GPT's shards (`megatron_shapes.Shard`) by `Shard.name`, each its local shape: random (or
    ones, as the workload says), or uninitialized for a load to overwrite (`fill` False). A shard's values are
    seeded by its name, not the rank: its replicas hold the same values, as they do in training, so that a
    replica loaded from another rank's write verifies."""
    tensors: dict[str, torch.Tensor] = {}
    for shard in shards:
        dtype = getattr(torch, TORCH_DTYPE[shard.dtype])
        if not fill:
            tensor = torch.empty(shard.local_shape, dtype=dtype, device=device)
        elif randomize:
            generator = torch.Generator(device=device).manual_seed(seed + zlib.crc32(shard.name.encode()))
            tensor = (torch.rand(shard.local_shape, dtype=dtype, device=device, generator=generator)
                      if dtype.is_floating_point else  # int16 main-parameter remainders
                      torch.randint(0, 127, shard.local_shape, dtype=dtype, device=device, generator=generator))
        else:
            tensor = torch.ones(shard.local_shape, dtype=dtype, device=device)
        tensors[shard.name] = tensor
    return tensors


class Engine(ABC):
    """One checkpoint engine on one rank. It marks the phases of its saves and loads (ckpt_bench.worker.phases)
    on `phases` (the rank's thread, from the call's start, in `first_save_phase` / `first_load_phase`) and an
    async save's on `background` (what the worker's wait for durability records with SAVE_END)."""

    first_save_phase = Phase.STATE_DICT
    first_load_phase = Phase.STATE_DICT

    def __init__(self, spec: WorkloadSpec, layout: Layout, context: WorkerContext, storage: WorkerStorage):
        self.spec, self.layout, self.context, self.storage = spec, layout, context, storage
        self.share = layout.ranks[context.rank]
        self.phases = PhaseClock()
        self.background = PhaseClock()

    def allocate(self) -> RankState:
        """This rank's state to save (DLIO's tensors unless the engine saves another layout)."""
        workload = self.layout.workload
        return allocate_dlio(self.share, self.spec.seed, workload.randomize_tensor, self.context.device)

    def allocate_for_load(self) -> RankState:
        """What a load needs before it starts: tensors to load into, unfilled (an engine that loads
        into new tensors, as `torch.load` does, needs only the names)."""
        return allocate_dlio(self.share, self.spec.seed, False, self.context.device, fill=False)

    def prepare(self, state: RankState, location: str) -> None:  # noqa: B027  (optional: most engines need none)
        """Untimed work before a save or load (a writer's set-up, a cached plan). Nothing by default."""

    @abstractmethod
    def save(self, state: RankState, location: str) -> Pending | None:
        """Save `state` to `location`; return how to wait for an async save to be durable, or None when
        the checkpoint is durable on return."""

    @abstractmethod
    def load(self, state: RankState, location: str) -> dict[str, torch.Tensor]:
        """Load the checkpoint at `location` (into `state`'s tensors where the engine loads in place);
        return what was loaded by tensor name, for verification."""

    def close(self) -> None:  # noqa: B027  (optional)
        """Release the engine's resources at the end of a pass (an async writer process)."""
