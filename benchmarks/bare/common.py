"""What the bare save scripts share around (never inside) the timed call: their arguments, and the
slowest rank's duration per call written by rank 0."""

import argparse
import json

import torch.distributed as dist


def parse_arguments(description: str, step_between_saves: bool = False) -> argparse.Namespace:
    """The scripts' arguments; `step_between_saves`: the script offers --step-between-saves."""
    parser = argparse.ArgumentParser(description=description.split("\n\n")[0])
    if step_between_saves:
        parser.add_argument("--step-between-saves", action="store_true",
                            help="update every tensor in place before each save (untimed), as training does")
    parser.add_argument("--spec", required=True, help="the worker.json ckpt-bench wrote for the same state")
    parser.add_argument("--save-calls", type=int, required=True)
    parser.add_argument("--save-dir", required=True)
    parser.add_argument("--out", required=True, help="JSON list: seconds per call, slowest rank")
    return parser.parse_args()


def write_slowest(durations: list[float], out: str) -> None:
    """Collective: every rank's durations to rank 0, which writes each call's slowest."""
    per_rank = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, durations)
    if dist.get_rank() == 0:
        with open(out, "w") as handle:
            json.dump([max(call) for call in zip(*per_rank, strict=True)], handle)
