"""Every Megatron example experiment of a Primus checkout, planned as `--workload EXPERIMENT --plan` would plan it:
one row a config, at the smallest number of 8-GPU nodes its own layout fits (its TP, PP, EP, ETP, CP and batch
sizes, as tuned in the file), in its own `ckpt_format`.

    python tools/primus_table.py PRIMUS_CHECKOUT [--platform MI300X] [--moe-only] [--max-nodes 128]

Prints a Markdown table: the model (dense, MoE, +MLA, +MTPn), total and active parameters, the world size, the
bytes a save writes, each rank's bytes (least, median, most, and the rank that writes most), and for a config
that cannot be planned the one line `ckpt_launch.py` would print. Nothing is allocated or written.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ckpt_bench.benchmark import registry  # noqa: E402
from ckpt_bench.cli.launch import parse_argv  # noqa: E402
from ckpt_bench.core.errors import ConfigError  # noqa: E402

GPUS_PER_NODE = 8
# Refusals that more ranks can cure: a layout or batch that does not divide this world size.
_TOO_FEW_RANKS = ("is not a multiple of", "is not divisible by")


def plan(config: Path, primus: Path, nodes: int) -> dict:
    values, given = parse_argv(["--workload", str(config), "--primus-path", str(primus), "--nnodes", str(nodes),
                                "--nproc-per-node", str(GPUS_PER_NODE), "--plan"])
    launch, _ = registry.build_launch(values, given, {})
    return registry.runner_for(launch).preview(launch)


def smallest_plan(config: Path, primus: Path, max_nodes: int) -> dict | str:
    """The plan at the fewest nodes (powers of two) that hold the config's layout, or the refusal's line."""
    nodes = 1
    while True:
        try:
            return plan(config, primus, nodes)
        except ConfigError as error:
            message = str(error).replace(str(config), config.name)
            if not any(text in message for text in _TOO_FEW_RANKS) or nodes * 2 > max_nodes:
                return message
            nodes *= 2


def _billions(count: int | None) -> str:
    return "" if count is None else f"{count / 1e9:,.1f} B"


def _gib(count: int) -> str:
    return f"{count / 2**30:,.1f}"  # GiB, as ckpt_launch.py prints sizes


def row(config: Path, result: dict | str) -> str:
    if isinstance(result, str):
        return f"| {config.stem} | | | | | | | {result} |"
    spread = result["rank_bytes"]
    ranks = (f"{_gib(spread['min'])} / {_gib(spread['median'])} / {_gib(spread['max'])} "
             f"(rank {spread['largest_rank']})")
    return (f"| {config.stem} | {result['model']} | {_billions(result['parameters'])} | "
            f"{_billions(result['active_parameters'])} | {result['engine']} | {result['world_size']} | "
            f"{_gib(result['total_bytes'])} | {ranks} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("primus", type=Path, help="a Primus checkout")
    parser.add_argument("--platform", default="MI300X", help="examples/megatron/configs/<platform> (default MI300X)")
    parser.add_argument("--moe-only", action="store_true", help="only the configs whose model has experts")
    parser.add_argument("--max-nodes", type=int, default=128, help="the most 8-GPU nodes tried (default 128)")
    options = parser.parse_args()
    folder = options.primus / "examples" / "megatron" / "configs" / options.platform
    configs = sorted(folder.glob("*.yaml"))
    if not configs:
        sys.exit(f"error: no example configs in {folder}")
    os.chdir(options.primus)  # Primus's presets are found from the checkout, as inside it
    print("| config | model | parameters | active | engine | ranks | GiB a save | GiB a rank: min / median / max "
          "(largest) |")
    print("|---|---|---|---|---|---|---|---|")
    for config in configs:
        result = smallest_plan(config, options.primus, options.max_nodes)
        if options.moe_only and (isinstance(result, str) or "MoE" not in result["model"]):
            continue
        print(row(config, result), flush=True)


if __name__ == "__main__":
    main()
