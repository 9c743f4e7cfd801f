"""Layout-independent integrity: one checksum per logical tensor of a sharded state dict.

Per-shard digests (ckpt_bench.worker.integrity) line up only when the load uses the layout of the save. After a
load on another layout (resharding: other TP/PP/EP sizes, another world size) each logical tensor is
checked instead, whole: every element contributes `(global index + 1) x (its bits + 1) mod P`, summed
exactly in integers, so neither the order of the shards nor which rank holds them matters, and a
value moved to another position changes the sum. Each element is counted once: only the main replica
of a shard (replica_id all zero) contributes; data-parallel copies do not.

    checksums = global_checksums(format.state_dict(iteration))   # collective: every rank calls it
    # {key: "checksum:elements"}, the same dict on every rank
"""

from __future__ import annotations

import torch
from megatron.core.dist_checkpointing.dict_utils import nested_values
from megatron.core.dist_checkpointing.mapping import ShardedTensor, apply_factories

P = (1 << 31) - 1  # a prime: products of two residues fit in int64, and so do sums of 2**32 of them
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _is_main_replica(replica_id) -> bool:
    return all(r == 0 for r in replica_id) if isinstance(replica_id, tuple) else replica_id == 0


def global_indices(sharded: ShardedTensor) -> torch.Tensor:
    """The linear index, in the global tensor, of every element of this rank's `data` (flattened)."""
    local_shape = (1,) * sharded.prepend_axis_num + tuple(sharded.local_shape)
    strides = [1] * len(sharded.global_shape)
    for dim in range(len(strides) - 2, -1, -1):
        strides[dim] = strides[dim + 1] * sharded.global_shape[dim + 1]
    index = torch.zeros(local_shape, dtype=torch.int64)
    for dim, (size, offset, stride) in enumerate(zip(local_shape, sharded.global_offset, strides, strict=True)):
        view = [1] * len(local_shape)
        view[dim] = size
        index = index + ((torch.arange(size, dtype=torch.int64) + offset) * stride).reshape(view)
    index = index.reshape(-1)
    if sharded.flattened_range is not None:
        index = index[sharded.flattened_range]
    return index


def shard_checksum(sharded: ShardedTensor) -> tuple[int, int]:
    """(checksum mod P, elements) of this rank's part of one logical tensor."""
    data = sharded.data.detach().to("cpu").contiguous().reshape(-1)
    bits = data.view(_BITS[data.element_size()]).to(torch.int64)
    bits = (bits ^ (bits >> 32)) & 0xFFFFFFFF  # every bit counts, 8-byte types' upper half too
    positions = (global_indices(sharded) % P) + 1
    terms = (positions * ((bits % P) + 1)) % P
    return int(terms.sum().item()) % P, data.numel()


def global_checksums(sharded_state_dict: dict) -> dict[str, str]:
    """Per logical tensor key, "checksum:elements" over all ranks (a collective: call on every rank)."""
    apply_factories(sharded_state_dict)
    local: dict[str, list[int]] = {}
    for value in nested_values(sharded_state_dict):
        if isinstance(value, ShardedTensor) and value.data is not None and _is_main_replica(value.replica_id):
            checksum, elements = shard_checksum(value)
            total = local.setdefault(value.key, [0, 0])
            total[0] = (total[0] + checksum) % P
            total[1] += elements
    every_rank: list[dict] = [None] * torch.distributed.get_world_size()  # type: ignore[list-item]
    torch.distributed.all_gather_object(every_rank, local)
    combined: dict[str, list[int]] = {}
    for rank_sums in every_rank:
        for key, (checksum, elements) in rank_sums.items():
            total = combined.setdefault(key, [0, 0])
            total[0] = (total[0] + checksum) % P
            total[1] += elements
    return {key: f"{checksum}:{elements}" for key, (checksum, elements) in sorted(combined.items())}
