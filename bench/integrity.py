"""Integrity: a checkpoint that loads but holds different numbers is a failed checkpoint.

At save time each rank records a digest of every tensor it saved (its local shard, for sharded
tensors); after the load pass each rank digests what it loaded and compares. Digests are of the raw
bytes (dtype and shape included), so a bf16 round-trip or a reshaped tensor is a mismatch too.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def tensor_digest(tensor: torch.Tensor) -> str:
    import torch  # imported here: reading verdicts (the launcher, ckpt_report.py) needs no torch

    data = tensor.detach()
    if data.device.type != "cpu":
        data = data.cpu()
    data = data.contiguous()
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{data.dtype}|{tuple(data.shape)}|".encode())
    if data.numel():
        digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def iter_tensors(state, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """(dotted name, tensor) for every tensor in a nested dict/list state, in a stable order."""
    import torch

    if isinstance(state, torch.Tensor):
        yield prefix, state
    elif isinstance(state, Mapping):
        for key in sorted(state, key=str):
            yield from iter_tensors(state[key], f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(state, (list, tuple)):
        for index, item in enumerate(state):
            yield from iter_tensors(item, f"{prefix}.{index}" if prefix else str(index))


def state_digests(state) -> dict[str, str]:
    return {name: tensor_digest(tensor) for name, tensor in iter_tensors(state)}


def manifest_path(directory: str | os.PathLike, iteration: int, rank: int) -> Path:
    return Path(directory) / f"iter_{iteration:07d}" / f"rank-{rank}.json"


def write_manifest(directory: str | os.PathLike, iteration: int, rank: int, digests: dict[str, str]) -> Path:
    path = manifest_path(directory, iteration, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(digests, sort_keys=True))
    return path


def read_manifest(directory: str | os.PathLike, iteration: int, rank: int) -> dict[str, str]:
    return json.loads(manifest_path(directory, iteration, rank).read_text())


def compare(expected: dict[str, str], actual: dict[str, str]) -> dict:
    """One rank's verdict: every saved tensor must come back with the same digest."""
    first_mismatch = None
    mismatched = 0
    for name in sorted(expected):
        if actual.get(name) != expected[name]:
            mismatched += 1
            if first_mismatch is None:
                first_mismatch = name if name in actual else f"{name} (missing after load)"
    return {
        "verified": mismatched == 0 and bool(expected),
        "tensors_checked": len(expected),
        "mismatched": mismatched,
        "first_mismatch": first_mismatch,
    }


def combine(per_rank: dict[int, dict]) -> dict:
    """The report's `verification` section from every rank's verdict."""
    if not per_rank:
        return {"verified": False, "reason": "no rank reported a verification result"}
    failed = {rank: result for rank, result in sorted(per_rank.items()) if not result["verified"]}
    first_rank = next(iter(failed), None)
    return {
        "verified": not failed,
        "ranks_checked": len(per_rank),
        "tensors_checked": sum(r["tensors_checked"] for r in per_rank.values()),
        "mismatched": sum(r["mismatched"] for r in per_rank.values()),
        "first_mismatch": (
            {"rank": first_rank, "tensor": failed[first_rank]["first_mismatch"]} if failed else None
        ),
    }
