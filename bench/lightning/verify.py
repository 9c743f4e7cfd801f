"""Integrity for Lightning checkpoints: digest what training holds, compare with what came back.

Digested: the module's state dict and every optimizer's state dict -- the tensors a resumed run
depends on. For FSDP2 each rank digests its own shards (`DTensor.to_local()`), which is what that
rank writes and reads back. A DDP load returns the checkpoint as a dict without touching the model,
so the dict's `state_dict` / `optimizer_states` are digested; an FSDP2 load fills the model and
optimizer in place, so the live state is digested after it (the load pass starts from a different
seed, so a load that did nothing cannot pass).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor

from bench import integrity


class VerificationFailed(RuntimeError):
    """The checkpoint loaded, but holds different numbers from those that were saved."""


def _local(state):
    if isinstance(state, DTensor):
        return state.to_local()
    if isinstance(state, dict):
        return {key: _local(value) for key, value in state.items()}
    if isinstance(state, (list, tuple)):
        return [_local(value) for value in state]
    return state


def live_digests(trainer) -> dict[str, str]:
    state = {
        "state_dict": trainer.lightning_module.state_dict(),
        "optimizer_states": [optimizer.state_dict() for optimizer in trainer.optimizers],
    }
    return integrity.state_digests(_local(state))


def loaded_digests(trainer, loaded: dict, strategy: str) -> dict[str, str]:
    if strategy == "fsdp":
        return live_digests(trainer)
    return integrity.state_digests({key: loaded.get(key) for key in ("state_dict", "optimizer_states")})


def write_verdict(integrity_dir: str, rank: int, iteration: int, verdicts: list[dict]) -> dict:
    """This rank's verdict over all its load calls (the first failing one, else the last), then
    collective: every rank raises if any rank's checkpoint differs."""
    failing = [v for v in verdicts if not v["verified"]]
    verdict = failing[0] if failing else verdicts[-1]
    verdict = {**verdict, "load_calls": len(verdicts), "load_calls_failed": len(failing)}
    path = Path(integrity_dir, f"load-rank-{rank}.json")
    path.write_text(json.dumps({"rank": rank, "iteration": iteration, **verdict}, sort_keys=True))
    everyone = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(everyone, verdict)
    failed = [(r, v) for r, v in enumerate(everyone) if not v["verified"]]
    if failed:
        r, first = failed[0]
        raise VerificationFailed(
            f"checkpoint iter {iteration} differs from what was saved on {len(failed)} rank(s); rank {r}: "
            f"{first['mismatched']} of {first['tensors_checked']} tensors differ, first: {first['first_mismatch']}"
        )
    return verdict
