#!/usr/bin/env python3
"""The whole job's save and restart for example configs of a Primus checkout, at one size and on storages of
several ceilings: what `--plan` projects (docs/projection.md), as a Markdown table.

    python tools/projection_table.py PRIMUS CONFIG... [--nodes 128] [--per-node 8] [--storage-gbps 100 1000]
                                     [--client-gbps 25] [--network-gbps 25] [--engine torch_dist]
                                     [--host-memory-gb 2048] [--set KEY=VALUE ...]

CONFIG: a path under PRIMUS's examples/megatron/configs/ (MI300X/deepseek_v3-BF16-pretrain.yaml). Each config
is planned in its own ckpt_format (or --engine) and its own checkpoint settings (or --set's), with its engine's
global steps computed at the job's size once (cached) and priced for every storage ceiling given: its reads and
writes at that ceiling both ways. A save or restart the hosts cannot hold is "cannot run" with what it would take.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every Primus `--plan` script here takes: the checkout, its configs and the job's size."""
    parser.add_argument("primus", type=Path, help="a Primus checkout (or the snapshot folder holding Primus/)")
    parser.add_argument("configs", nargs="+")
    parser.add_argument("--nodes", type=int, default=128)
    parser.add_argument("--per-node", type=int, default=8)


def checkout(primus: Path) -> Path:
    """The Primus checkout: `primus` itself, or its Primus/ folder (an extracted ../shared/upstream snapshot)."""
    return primus / "Primus" if (primus / "Primus").is_dir() else primus


def plan_command(config: str, args, options: list[str]) -> list[str]:
    """`ckpt_launch.py --plan` of `config` at the job's size (`args`: `add_job_arguments`'s), with `options`."""
    return [sys.executable, str(ROOT / "ckpt_launch.py"), "--workload", f"examples/megatron/configs/{config}",
            "--nnodes", str(args.nodes), "--nproc-per-node", str(args.per_node), "--plan", "--format", "json",
            *options]


def run_plan(primus: Path, command: list[str], env: dict | None = None) -> dict:
    """The plan's JSON, run inside the checkout as a user would; {"error": its last line} where it refuses."""
    done = subprocess.run(command, cwd=checkout(primus), capture_output=True, text=True, env=env)
    if done.returncode:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(done.stdout)


def plan(primus: Path, config: str, args, storage: float) -> dict:
    options = ["--storage-write-gbps", str(storage), "--storage-read-gbps", str(storage),
               "--client-write-gbps", str(args.client_gbps), "--client-read-gbps", str(args.client_gbps),
               "--network-gbps", str(args.network_gbps), "--rank-costs-budget", str(args.budget)]
    if args.engine:
        options += ["--engine", args.engine]
    if args.host_memory_gb:
        options += ["--host-memory-gb", str(args.host_memory_gb)]
    options += [arg for text in args.set for arg in ("--set", text)]
    return run_plan(primus, plan_command(config, args, options))


def seconds(time: dict) -> str:
    if time.get("feasible") is False:
        return f"cannot run ({seconds({**time, 'feasible': None, 'range_s': time['range_if_it_ran_s']})} if it ran)"
    low, high = time["range_s"]
    if low is not None and high is not None and abs(high - low) <= 1e-3 * max(high, 1e-9):
        return f"{low:,.0f}" if low >= 100 else f"{low:.3g}"
    return f"{low:,.3g}-{high:,.3g}" if high is not None else f">= {low:,.3g}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_job_arguments(parser)
    parser.add_argument("--storage-gbps", type=float, nargs="+", default=[100.0, 1000.0])
    parser.add_argument("--client-gbps", type=float, default=25.0)
    parser.add_argument("--network-gbps", type=float, default=25.0)
    parser.add_argument("--engine")
    parser.add_argument("--budget", type=float, default=1200.0)
    parser.add_argument("--host-memory-gb", type=float)
    parser.add_argument("--set", action="append", default=[], help="an experiment argument, as ckpt_launch.py's")
    args = parser.parse_args()
    print(f"{args.nodes} hosts x {args.per_node} ranks; client {args.client_gbps:g} GB/s a host (write and read), "
          f"network {args.network_gbps:g} GB/s a host; GB = 10^9 bytes; seconds")
    print()
    print("| config | engine | storage GB/s | a save writes (GB, hosts) | busiest host GB | global steps, save (s) "
          "| first save (s), binding | later saves (s) | restart reads (GB) | restart (s), binding |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for config in args.configs:
        for storage in args.storage_gbps:
            result = plan(args.primus, config, args, storage)
            projection = result.get("projection") or {}
            if not projection or projection.get("error"):
                why = result.get("error") or projection.get("error") or "no projection (the job is not whole hosts)"
                print(f"| {config} | | {storage:g} | {why} |||||||")
                continue
            save, load = projection["save"], projection["load"]
            steps = sum(t["range_s"][0] or 0 for t in save["terms"] if t["kind"] == "step")
            traffic, reads = projection["save_traffic"], projection["load_traffic"]
            print(f"| {config} | {projection['job']['engine']} | {storage:g} | {traffic['bytes'] / 1e9:,.0f} "
                  f"({traffic['hosts_moving_bytes']}) | {traffic['busiest_host']['bytes'] / 1e9:,.0f} | {steps:,.3g} "
                  f"| {seconds(save)}, {save['binding']} | {seconds(projection['steady_save'])} "
                  f"| {reads['bytes'] / 1e9:,.0f} | {seconds(load)}, {load['binding']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
