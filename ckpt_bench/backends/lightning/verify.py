"""Integrity for Lightning checkpoints: digest what training holds, compare with what came back.

Digested: the module's state dict and every optimizer's state dict -- the tensors a resumed run
depends on. For FSDP2 each rank digests its own shards (`DTensor.to_local()`), which is what that
rank writes and reads back. A DDP load returns the checkpoint as a dict without touching the model,
so the dict's `state_dict` / `optimizer_states` are digested; an FSDP2 load fills the model and
optimizer in place, so the live state is digested after it (the load pass starts from a different
seed, so a load that did nothing cannot pass).
"""

from __future__ import annotations

from torch.distributed.tensor import DTensor

from ckpt_bench.worker import integrity


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
