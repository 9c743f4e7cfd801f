"""torch's global-plan validation where its pairwise overlap checks would take hours: the same sweep, its checks
counted exactly, a sample of them run and timed.

`_validate_global_plan` (torch/distributed/checkpoint/default_planner.py, 651-711 in torch 2.13), which every DCP
save's coordinator runs in `create_global_plan`, checks each tensor's chunks for bounds, overlap and fill. For the
overlap it sorts the chunks by their offset along the tensor's largest dimension and sweeps them: each chunk is
checked (`_check_box_overlap`) against every chunk before it that still reaches past its start. Where the chunks
all span that dimension (an FSDP2 chunk of a layer's weight whose columns are its largest dimension: Llama 3.1
70B's `linear_fc2`, each layer x rank's rows), every chunk is checked against every other: (layers x ranks)^2 / 2
checks a key, 3.4 billion at 80 layers x 1,024 ranks, about a microsecond each on one core here.

Where a plan's checks number at least `COUNTED_FROM`, `counted_validation` stands in for torch's function during
the step (`default_planner._validate_global_plan`, looked up when `create_global_plan` calls it) and does what it
does but most of the checks: each chunk's bounds and each key's fill as torch checks them, the sweep's sort and its
list of open chunks as torch keeps them, and the sweep's checks counted. Those of some chunks run through torch's
own `_check_box_overlap` in torch's loop, each such chunk's whole, where its checks hold a multiple of a stride in
the sweep's count (about `SAMPLE` in all), twice: untimed, then timed (in torch's sweep the chunk before went
through about the same open chunks just before). A chunk with more checks is likelier timed, and a check costs
more in a long list of open chunks (which outgrows the CPU's caches) than in a short one, so each timed chunk's CPU
counts over the chance it had (Horvitz-Thompson, the stride's multiples offset at random). The step's CPU is what
ran but the sampled checks, plus every check at the estimated time a check; the step says how many it counted
(`Pairwise`). What it cannot do: find an overlap among the checks it does not run (a plan torch would refuse for an
overlap alone, its fill and bounds right, passes); the plans here are the layout's, whose fill is checked. Below
`COUNTED_FROM` torch's own function runs (its checks still counted). `checks` counts a plan's checks without the
sweep (numpy over the offsets sorted as torch sorts them): the same number as torch's calls
(tests/unit/test_pairwise_checks.py).

Measured on Llama 3.1 70B under FSDP2 at 1,024 ranks, torch's own validation against this one (the step's CPU):
22.7 s against 23.0 and 24.2 s at 4 layers; at 8 layers torch's took 100 s in one process and 161 s in another
(the same 134,774,784 checks: where the chunks lie in memory moves it), this one 132 and 142 s, and in the process
where torch's took 161 s, torch's loop timed chunk by chunk in place gave 1.21 us a check, this one 1.15.
"""

from __future__ import annotations

import math
import random
import sys
import time
from bisect import bisect_right, insort
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from torch.distributed.checkpoint import default_planner
from torch.distributed.checkpoint.metadata import BytesStorageMetadata

__all__ = ["COUNTED_FROM", "SAMPLE", "Pairwise", "checks", "counted_validation", "key_checks"]

#: A plan with fewer pairwise checks than this runs torch's own validation (about 4 s of CPU here).
COUNTED_FROM = 4_000_000
#: About how many of a counted plan's checks run and are timed, at most (about 0.3 s here, and as long again warming).
SAMPLE = 500_000
#: About how many chunks' checks are timed, at least (where each has tens of thousands, more checks than SAMPLE).
TIMED_CHUNKS = 64


@dataclass(frozen=True)
class Pairwise:
    """The pairwise overlap checks of a global plan's validation, counted: `checks` the sweep makes, `timed` of them
    run and timed, `check_s` CPU seconds a check (None: torch's own validation ran them all)."""

    checks: int
    timed: int
    check_s: float | None = None

    def as_dict(self) -> dict:
        return {"checks": self.checks, "timed": self.timed, "check_s": self.check_s}


def key_checks(size: Sequence[int], offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """How many `_check_box_overlap` calls torch's sweep makes for each of one key's chunks (`offsets`, `sizes`: one
    row a chunk, in the metadata's order), in the sweep's order. Sorted as torch sorts them (the offset along the
    largest dimension, then every offset, then their order), a chunk is checked against those before it that end
    after its start: all before it, less those that end at or before its start, which are any that do (a later
    chunk starts no earlier) but empty chunks starting where it starts and sorted after it. A key with a chunk of a
    negative size (which torch's bounds check refuses) is swept as torch sweeps it."""
    count = len(offsets)
    if count < 2:
        return np.zeros(count, dtype=np.int64)
    dims = len(size)
    sweep = max(range(dims), default=0, key=lambda d: size[d])
    order = np.lexsort((np.arange(count), *(offsets[:, d] for d in reversed(range(dims))), offsets[:, sweep]))
    starts = offsets[order, sweep]
    ends = starts + sizes[order, sweep]
    if (ends < starts).any():
        return _swept(starts.tolist(), ends.tolist())
    ended = np.searchsorted(np.sort(ends), starts, side="right")  # chunks ending at or before each start
    empties = np.concatenate(([0], np.cumsum(ends == starts)))
    later_empties = empties[np.searchsorted(starts, starts, side="right")] - empties[:-1]
    return np.arange(count) - ended + later_empties


def _swept(starts: list[int], ends: list[int]) -> np.ndarray:
    """Each chunk's checks as torch's sweep makes them (its open chunks, without checking them)."""
    active: list[tuple[int, int]] = []
    counts = []
    for index, (start, end) in enumerate(zip(starts, ends, strict=True)):
        del active[:bisect_right(active, (start, sys.maxsize))]
        counts.append(len(active))
        insort(active, (end, index))
    return np.array(counts, dtype=np.int64)


def _chunk_arrays(chunks) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([chunk.offsets for chunk in chunks], dtype=np.int64),
            np.array([chunk.sizes for chunk in chunks], dtype=np.int64))


def _tensor_keys(metadata) -> Iterator[tuple[str, object]]:
    for key, value in metadata.state_dict_metadata.items():
        if not isinstance(value, BytesStorageMetadata) and len(value.size) > 0:
            yield key, value


def checks(metadata) -> tuple[int, int]:
    """The pairwise checks torch's validation makes over a global plan's metadata, and the most one chunk makes
    (`OverflowError` for offsets beyond 64 bits)."""
    counts = [key_checks(value.size, *_chunk_arrays(value.chunks)) for _, value in _tensor_keys(metadata)]
    return sum(int(c.sum()) for c in counts), max((int(c.max()) for c in counts if len(c)), default=0)


@dataclass
class _Sweep:
    """What a counted sweep did: the checks it made (counted), those run and timed, the CPU of each pass, and the
    CPU of all the checks estimated from the timed ones."""

    made: int = 0
    timed: int = 0
    timed_s: float = 0.0  # CPU of the checks timed
    warming_s: float = 0.0  # CPU of the same checks run just before, untimed
    estimated_s: float = 0.0  # each timed chunk's CPU over the chance it had of being timed (Horvitz-Thompson)


def _counted(global_plan: list, metadata, stride: int, phase: int = 0) -> tuple[list[str], _Sweep]:
    """torch's `_validate_global_plan` but its pairwise checks: its errors, and the sweep's count of its checks; the
    checks of each chunk whose checks hold a multiple of `stride` in that count run as torch's loop runs them, twice:
    first untimed, as in torch's sweep the chunk before went through about the same open chunks just before (and
    left them in the CPU's caches, or not: a key's chunks may outgrow them), then timed. A chunk with more checks
    is likelier timed (its checks over the stride), and a check costs more in a long list of open chunks (outside
    the caches) than in a short one: each timed chunk's CPU counts over that chance (the multiples offset by
    `phase`, drawn at random: the chance is then the chunk's checks over the stride, or 1)."""
    errors: list[str] = []
    done = _Sweep()
    overlap = default_planner._check_box_overlap
    for key, value in _tensor_keys(metadata):
        chunks = value.chunks
        volume = 0
        for chunk in chunks:
            if not default_planner._check_box_bounds(value.size, chunk):
                errors.append(f"key:{key} has out of bounds chunk: tensor-size:{value.size} chunk: {chunk}")
            volume += math.prod(chunk.sizes)
        if len(chunks) > 1:
            dims = len(value.size)
            sweep = max(range(dims), default=0, key=lambda d: value.size[d])
            active: list[tuple[int, int]] = []
            for index in sorted(range(len(chunks)),
                                key=lambda i: (chunks[i].offsets[sweep], *(chunks[i].offsets[d] for d in range(dims)))):
                current = chunks[index]
                start = current.offsets[sweep]
                cutoff = bisect_right(active, (start, sys.maxsize))
                if cutoff:
                    del active[:cutoff]
                if (done.made + phase + len(active)) // stride > (done.made + phase) // stride:
                    for timed in (False, True):
                        started = time.thread_time()
                        for _, other_index in active:
                            other = chunks[other_index]
                            if overlap(current, other) and timed:
                                errors.append(f"key:{key} has overlapping chunks: {current} {other}")
                        spent = time.thread_time() - started
                        if timed:
                            done.timed += len(active)
                            done.timed_s += spent
                            done.estimated_s += spent * max(1.0, stride / len(active))
                        else:
                            done.warming_s += spent
                done.made += len(active)
                insort(active, (start + current.sizes[sweep], index))
        if len(global_plan) > 1 and volume != math.prod(value.size):
            errors.append(f"key:{key} invalid fill tensor-volume: {math.prod(value.size)} chunks-volume: {volume}")
    return errors, done


class _Validation:
    """What `counted_validation` records of the validation it stood in for."""

    def __init__(self) -> None:
        self.pairwise: Pairwise | None = None
        self.counting_s = 0.0  # CPU spent counting, not torch's work: left out of the step's
        self.left_out_s = 0.0  # CPU of the sampled checks' runs, in place of which all the checks are estimated

    def __call__(self, global_plan: list, metadata) -> list[str]:
        started = time.thread_time()
        try:
            total, most = checks(metadata)
        except OverflowError:  # offsets beyond 64 bits: torch's own
            total = most = None
        self.counting_s = time.thread_time() - started
        if total is None or total < COUNTED_FROM:
            self.pairwise = None if total is None else Pairwise(total, total)
            return _ORIGINAL(global_plan, metadata)
        # A chunk's checks are timed whole, as torch's loop runs them, where they hold a multiple of the stride: each
        # with a chance of its checks over the stride, about SAMPLE checks in all at most, and at least about
        # TIMED_CHUNKS chunks' (at 80 layers a chunk may have 80,000 checks).
        stride = max(1, min(total // TIMED_CHUNKS, total * most // SAMPLE))
        errors, sweep = _counted(global_plan, metadata, stride, random.Random(total).randrange(stride))
        if sweep.made != total:
            raise AssertionError(f"the sweep made {sweep.made} checks where {total} were counted")
        self.left_out_s = sweep.warming_s + sweep.timed_s
        self.pairwise = Pairwise(total, sweep.timed, sweep.estimated_s / total)
        return errors

    def counted_s(self) -> float:
        """The seconds the step stands for beyond its CPU: every check at the sample's time a check in place of the
        sampled ones' runs, less the counting's own CPU."""
        pairwise = self.pairwise
        if pairwise is None or pairwise.check_s is None:
            return -self.counting_s
        return pairwise.checks * pairwise.check_s - self.left_out_s - self.counting_s


_ORIGINAL = default_planner._validate_global_plan


@contextmanager
def counted_validation() -> Iterator[_Validation]:
    """torch's global-plan validation, its pairwise checks counted (and sampled where many) while in the block."""
    validation = _Validation()
    default_planner._validate_global_plan = validation
    try:
        yield validation
    finally:
        default_planner._validate_global_plan = _ORIGINAL
