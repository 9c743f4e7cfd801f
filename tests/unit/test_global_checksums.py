"""Layout-independent integrity: the same logical tensor split any way sums to the same checksum;
a value changed or moved does not."""

import torch
from megatron.core.dist_checkpointing.mapping import ShardedTensor

from ckpt_bench.backends.megatron.global_checksums import P, global_indices, shard_checksum

TENSOR = torch.arange(24, dtype=torch.float32).reshape(4, 6) * 0.5


def shards(tensor: torch.Tensor, axis: int, parts: int) -> list[ShardedTensor]:
    """`tensor` cut in `parts` along `axis`, as ranks would hold it."""
    size = tensor.shape[axis] // parts
    result = []
    for part in range(parts):
        chunk = tensor.narrow(axis, part * size, size).contiguous()
        offset = tuple(part * size if dim == axis else 0 for dim in range(tensor.dim()))
        result.append(ShardedTensor("w", chunk, chunk.dtype, tuple(chunk.shape), tuple(tensor.shape), offset, None))
    return result


def checksum(pieces: list[ShardedTensor]) -> tuple[int, int]:
    sums = [shard_checksum(piece) for piece in pieces]
    return sum(s for s, _ in sums) % P, sum(n for _, n in sums)


def test_global_indices_place_every_element():
    (right,) = shards(TENSOR, 1, 2)[1:]
    assert global_indices(right).tolist() == [r * 6 + c for r in range(4) for c in range(3, 6)]


def test_the_checksum_does_not_depend_on_the_layout():
    whole = checksum(shards(TENSOR, 0, 1))
    assert checksum(shards(TENSOR, 0, 2)) == whole == checksum(shards(TENSOR, 1, 3))
    assert whole[1] == 24


def test_a_changed_or_moved_value_changes_it():
    whole = checksum(shards(TENSOR, 0, 1))
    changed = TENSOR.clone()
    changed[2, 3] += 1e-3
    moved = TENSOR.clone()
    moved[[0, 1]] = moved[[1, 0]]  # the same values, rows swapped
    assert checksum(shards(changed, 0, 2)) != whole
    assert checksum(shards(moved, 1, 2)) != whole
