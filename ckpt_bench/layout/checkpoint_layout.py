"""What each rank of a workload's job holds and writes per save: the types every layout fills in (DLIO's
`dlio_layout`, Megatron's `megatron_shapes` and `megatron_torch`), and every engine reads. Plain Python.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ckpt_bench.layout.workload import DTYPE_BYTES, TORCH_DTYPE, Workload, WorkloadError, is_int
from ckpt_bench.model.tensors import ParameterCounts

__all__ = ["FileShare", "Layout", "RankShare", "RankSpread", "TensorSpec", "checkpoint_dir", "ranks_that_run"]


def checkpoint_dir(step: int, epoch: int = 1) -> str:
    """The folder, under the checkpoint folder, of DLIO's save number ``step`` (1-based; DLIO's epoch is 1)."""
    return f"global_epoch{epoch}_step{step}"


def ranks_that_run(world_size: int, run_ranks: Sequence[int] | None) -> tuple[int, ...]:
    """The ranks of a job of `world_size` ranks that run, in the order they run (running rank i plays job rank
    `run_ranks[i]`): all of them (None), or a subset -- DLIO's first N, or whole hosts of the job picked by
    their bytes (`--subset-hosts busiest`). Raises WorkloadError for ranks the job does not have or repeats."""
    if run_ranks is None:
        return tuple(range(world_size))
    ranks = tuple(run_ranks)
    if not ranks or len(set(ranks)) != len(ranks) or not all(
            is_int(r) and 0 <= r < world_size for r in ranks):
        shown = f"{list(ranks[:8])}{' ...' if len(ranks) > 8 else ''}"
        raise WorkloadError(f"ranks that run {shown}: each must be a distinct rank of the job's 0..{world_size - 1}")
    return ranks


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One tensor of a checkpoint file: DLIO saves flat 1-D tensors."""

    name: str
    """Its key path in the saved dict, keys joined by ``.``: ``"3.1"`` is ``state["3"]["1"]``; ``"2"`` is
    ``state["2"]``. DLIO's keys are strings (layer and tensor indices, or ``"a"``)."""

    numel: int
    """Number of elements."""

    dtype: str
    """DLIO datatype name, one of :data:`DTYPE_BYTES` (``TORCH_DTYPE[dtype]`` names the torch dtype)."""

    @property
    def shape(self) -> tuple[int]:
        """The tensor's shape: ``(numel,)``."""
        return (self.numel,)

    @property
    def nbytes(self) -> int:
        """Bytes of tensor data (numel × element size)."""
        return self.numel * DTYPE_BYTES[self.dtype]

    @property
    def torch_dtype(self) -> str:
        """The torch dtype's attribute name (``"float16"``, ``"bfloat16"``, ...)."""
        return TORCH_DTYPE[self.dtype]


@dataclass(frozen=True)
class FileShare:
    """One file a rank writes per save (and reads per load)."""

    name: str
    """File name as DLIO writes it, inside ``<checkpoint_folder>/global_epoch1_step<k>/``."""

    kind: str
    """``"model"`` (layer tensors), ``"optimizer"`` or ``"model_states"`` (a non-transformer model's bytes)."""

    tensors: tuple[TensorSpec, ...]
    """The tensors, in DLIO's dict insertion order (shared between files of the same content: do not mutate)."""

    empty_dicts: tuple[str, ...] = ()
    """Key paths of nested dicts DLIO saves empty (a layer whose every tensor floored to 0 elements)."""

    separator: str = "."
    """What joins the keys of a tensor's name (Megatron's files use "/": their keys hold dots)."""

    @cached_property
    def nbytes(self) -> int:
        """Tensor bytes of the file (torch.save adds a small pickle and zip overhead on top)."""
        return sum(t.nbytes for t in self.tensors)

    def state_tree(self) -> dict[str, Any]:
        """The file's dict structure with each tensor replaced by its :class:`TensorSpec` (for an engine that
        rebuilds the dict to ``torch.save``), keys in DLIO's insertion order."""
        tree: dict[str, Any] = {}
        for path in self.empty_dicts:
            node = tree
            for key in path.split(self.separator):
                node = node.setdefault(key, {})
        for spec in self.tensors:
            *parents, leaf = spec.name.split(self.separator)
            node = tree
            for key in parents:
                node = node.setdefault(key, {})
            node[leaf] = spec
        if self.empty_dicts and all(key.isdigit() for key in tree):
            # DLIO inserts layers in increasing order, empty ones included
            tree = {key: tree[key] for key in sorted(tree, key=int)}
        return tree


@dataclass(frozen=True)
class RankShare:
    """What one rank holds and writes per save."""

    rank: int
    """Global rank."""

    files: tuple[FileShare, ...]
    """Files it writes each save, in DLIO's order; empty for a rank that writes nothing (ZeRO 0, dp rank > 0)."""

    bytes: int
    """Tensor bytes it writes each save."""

    resident_bytes: int
    """Tensor bytes DLIO keeps allocated on it: ``bytes`` plus, with ZeRO 2 on dp rank > 0, the model it holds
    and does not write."""

    tp_rank: int
    """Tensor-parallel rank (rank % tp)."""

    pp_rank: int
    """Pipeline stage ((rank // tp) % pp)."""

    dp_rank: int
    """Data-parallel rank (rank // (tp·pp))."""

    mp_rank: int
    """Model-parallel rank (rank % (tp·pp)), the ``mp_rank`` of the file names."""

    ep_rank: int = 0
    """Expert-parallel rank (a Megatron MoE's; 0 otherwise)."""

    read_bytes: int | None = None
    """Tensor bytes it reads from storage per load, where that differs from what it writes (None: the same):
    DCP reads every shard a rank holds, replicas included; Megatron's legacy format has every rank read its
    model-parallel folder's model file."""

    @property
    def load_bytes(self) -> int:
        """Tensor bytes it reads per load."""
        return self.bytes if self.read_bytes is None else self.read_bytes


@dataclass(frozen=True)
class RankSpread:
    """Tensor bytes per rank per save over a job: the least, the median (a rank's own value), the most, and
    the rank that writes the most (the lowest such rank)."""

    min: int
    median: int
    max: int
    largest_rank: int


def _spread(written: dict[int, int]) -> RankSpread:
    """The spread of `written` (rank -> bytes); the largest rank is the lowest of those that write the most."""
    largest = max(sorted(written), key=written.__getitem__)
    return RankSpread(min(written.values()), statistics.median_low(written.values()), written[largest], largest)


@dataclass(frozen=True)
class Layout:
    """The checkpoint of a workload on a world size: per rank (all of them, or the subset that runs)."""

    workload: Workload
    """The workload laid out."""

    world_size: int
    """Ranks of the whole job."""

    data_parallelism: int
    """world_size // (tp·pp)."""

    ranks: tuple[RankShare, ...]
    """The ranks that run, in the order they run: all ``world_size`` of them, or a subset (`ranks_that_run`);
    ``ranks[i].rank`` is the job rank that running rank i plays."""

    total_bytes: int
    """Tensor bytes the whole job (all ``world_size`` ranks) writes per save."""

    dlio_reported_bytes: int | None = None
    """DLIO's formulas only (`dlio_layout`): what DLIO itself reports as ``checkpoint_size_GB`` (× 2**30) for a
    run of exactly these ranks -- the model bytes it allocates (ZeRO-2's copies it does not write included; a
    non-transformer's ``model_size_bytes`` instead, once) plus the optimizer bytes, summed over the ranks that
    run. None: a state DLIO does not lay out (a Megatron GPT's)."""

    parameters: ParameterCounts | None = None
    """The model's total and active parameters (each once), where it is a transformer."""

    job_rank_bytes: tuple[int, ...] = ()
    """Tensor bytes each rank of the whole job writes per save, in rank order."""

    @property
    def spread(self) -> RankSpread:
        """Bytes per rank over the whole job: MoE, pipeline and ZeRO layouts give ranks different shares."""
        return _spread(dict(enumerate(self.job_rank_bytes)))

    @property
    def run_spread(self) -> RankSpread:
        """Bytes per rank over the ranks that run (a subset's, beside the job's `spread`)."""
        return _spread({share.rank: share.bytes for share in self.ranks})

    @property
    def run_bytes(self) -> int:
        """Tensor bytes written per save by the ranks in :attr:`ranks`."""
        return sum(r.bytes for r in self.ranks)

    @property
    def mlperf_checkpoint_bytes(self) -> int:
        """MLPerf's ``checkpoint_size_GB`` (× 2**30) of a run of these ranks, which DLIO divides by rank 0's
        duration: DLIO's all-reduced sum of the state each rank that runs writes -- :attr:`run_bytes` -- or,
        laid out by DLIO's own formulas, exactly the figure DLIO reports (:attr:`dlio_reported_bytes`)."""
        return self.run_bytes if self.dlio_reported_bytes is None else self.dlio_reported_bytes

    @property
    def is_subset(self) -> bool:
        """True when only some of the job's ``world_size`` ranks run."""
        return len(self.ranks) < self.world_size

    def files(self, step: int = 1) -> Iterator[tuple[int, str, FileShare]]:
        """(rank, path relative to the checkpoint folder, file) for every file of save number ``step``."""
        folder = checkpoint_dir(step)
        for share in self.ranks:
            for f in share.files:
                yield share.rank, f"{folder}/{f.name}", f
