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
        # Hash the tensor's own memory through the buffer protocol: a bytes copy of the whole state
        # just before a timed save would churn the allocator and the page cache the save then uses.
        digest.update(data.reshape(-1).view(torch.uint8).numpy())
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
    """One rank's verdict: every saved tensor must come back with the same digest. A rank that saved none
    (one whose layout writes nothing: DLIO's ZeRO-0 data-parallel ranks) has nothing that could differ; the
    run's verdict (`combine`) needs a tensor checked on some rank."""
    first_mismatch = None
    mismatched = 0
    for name in sorted(expected):
        if actual.get(name) != expected[name]:
            mismatched += 1
            if first_mismatch is None:
                first_mismatch = name if name in actual else f"{name} (missing after load)"
    return {
        "verified": mismatched == 0,
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
    checked = sum(r["tensors_checked"] for r in per_rank.values())
    if not checked:
        return {"verified": False, "reason": "no rank saved a tensor to check"}
    return {
        "verified": not failed,
        "ranks_checked": len(per_rank),
        "tensors_checked": checked,
        "mismatched": sum(r["mismatched"] for r in per_rank.values()),
        "first_mismatch": (
            {"rank": first_rank, "tensor": failed[first_rank]["first_mismatch"]} if failed else None
        ),
    }


# A checkpoint that loads but differs is a failed run, with its own exit code so the launcher (and a
# user reading torchrun's summary) can tell it from a crash.
EXIT_VERIFICATION_FAILED = 3


class VerificationFailed(RuntimeError):
    """The checkpoint loaded, but holds different numbers from those that were saved."""


def combine_calls(verdicts: list[dict]) -> dict:
    """One rank's verdict over several loads: the first failing load's, counts summed."""
    failing = [v for v in verdicts if not v["verified"]]
    first = (failing or verdicts)[0] if verdicts else {"first_mismatch": None}
    return {
        "verified": bool(verdicts) and not failing,
        "tensors_checked": sum(v["tensors_checked"] for v in verdicts),
        "mismatched": sum(v["mismatched"] for v in verdicts),
        "first_mismatch": first["first_mismatch"],
        "load_calls": len(verdicts),
        "load_calls_failed": len(failing),
    }


def publish_verdict(integrity_dir: str | os.PathLike, rank: int, iteration: int, verdict: dict) -> dict:
    """Write this rank's verdict for the report, then (collective) raise VerificationFailed on every
    rank if any rank's checkpoint differs, naming the first such rank and tensor."""
    import torch.distributed as dist

    path = Path(integrity_dir, f"load-rank-{rank}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rank": rank, "iteration": iteration, **verdict}, sort_keys=True))
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, verdict)
    failed = [(r, v) for r, v in enumerate(everyone) if not v["verified"]]
    if failed:
        r, first = failed[0]
        raise VerificationFailed(
            f"checkpoint of iteration {iteration} differs from what was saved on {len(failed)} rank(s); "
            f"rank {r}: {first['mismatched']} of {first['tensors_checked']} tensors differ, "
            f"first: {first['first_mismatch']}"
        )
    return verdict
