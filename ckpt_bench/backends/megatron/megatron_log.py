"""Megatron-LM's own console lines, printed on rank 0 in Megatron-LM's formats.

The benchmark's log parsers read Megatron-LM and Primus logs; printing the same lines here keeps
one set of parsers for both, and lets the launcher show progress from the iteration lines.
"""

from __future__ import annotations

import argparse
from datetime import datetime

import torch

_ARG_COLUMN = 48  # Megatron-LM's `_print_args` pads names with dots to this column


def timestamp() -> str:
    """`YYYY-MM-DD HH:MM:SS.ffffff`, as Megatron-LM prints inside its checkpoint lines."""
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")


def print_rank_0(message: str) -> None:
    if torch.distributed.get_rank() == 0:
        print(message, flush=True)


def print_arguments(args: argparse.Namespace, unknown: list[str]) -> None:
    lines = ["------------------------ arguments ------------------------"]
    for name in sorted(vars(args), key=str.lower):
        lines.append(f"  {name} {'.' * (_ARG_COLUMN - len(name))} {getattr(args, name)}")
    lines.append("-------------------- end of arguments ---------------------")
    if unknown:
        lines.append(f"note: arguments this worker does not act on (printed above, ignored): {', '.join(unknown)}")
    print_rank_0("\n".join(lines))


def iteration_line(iteration: int, train_iters: int, consumed_samples: int, elapsed_ms: float, loss: float) -> str:
    return (
        f" [{timestamp()}] iteration {iteration:8d}/{train_iters:8d} |"
        f" consumed samples: {consumed_samples:12d} |"
        f" elapsed time per iteration (ms): {elapsed_ms:.1f} |"
        f" lm loss: {loss:.6E} |"
    )


def saving_line(iteration: int, save: str, ckpt_format: str) -> str:
    return f"[{timestamp()}] saving checkpoint at iteration {iteration:7d} to {save} in {ckpt_format} format"


def scheduled_line(iteration: int, save: str) -> str:
    return f"  [{timestamp()}] scheduled an async checkpoint save at iteration {iteration:7d} to {save}"


def saved_line(iteration: int, save: str, tp: tuple[int, int], pp: tuple[int, int]) -> str:
    """`tp`, `pp`: (this rank's 0-based rank, group size)."""
    return (
        f"  [{timestamp()}] successfully saved checkpoint from iteration {iteration:7d} to {save}"
        f" [ t {tp[0] + 1}/{tp[1]}, p {pp[0] + 1}/{pp[1]} ]"
    )


def loading_line(load: str, iteration: int, ckpt_format: str) -> str:
    kind = "distributed checkpoint" if ckpt_format == "torch_dist" else "checkpoint"
    return f" loading {kind} from {load} at iteration {iteration}"


def loaded_line(load: str, iteration: int, tp: tuple[int, int], pp: tuple[int, int]) -> str:
    return (
        f"  successfully loaded checkpoint from {load}"
        f" [ t {tp[0] + 1}/{tp[1]}, p {pp[0] + 1}/{pp[1]} ] at iteration {iteration}"
    )
