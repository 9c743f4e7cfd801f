#!/usr/bin/env python3
"""The projection of the whole job, checked in a lab whose ceilings are known: local "hosts" (one
`ckpt_launch.py` each, one multi-node torchrun job on loopback) write a Megatron GPT's sharded state (the tiny
experiment of ckpt_bench/configs/tiny_gpt.yaml, a little larger) through two engines:

* dcp: to an S3 endpoint (moto) through a proxy that caps each host's bytes (its client ceiling: a NIC) and all
  hosts' bytes together (the storage's ceiling);
* torch_dist: megatron-core's torch_dist to a folder on this machine's disk, each host's processes in a blkio
  cgroup whose throttle caps the reads and the fsync'd writes they issue (megatron-core's writers fsync each
  file: its pages reach the disk from the writer's own context, so the kernel charges them to its cgroup). cgroup
  v1's throttle is not hierarchical: the client case caps each host in a cgroup of its own, the storage case all
  hosts in one. Needs root and cgroup v1's blkio controller; the case says why it is skipped otherwise. The
  hosts share this machine's page cache where a real host's is its own, so the job is laid out with no shard on two
  hosts (a pipeline stage a host, its 2 ranks the stage's replicas: `_sets`).

    python benchmarks/projection_lab.py [--engines dcp torch_dist] [--hosts 2 4] [--rounds 2] [--cases client storage]

For each engine, case and job of H hosts x 2 ranks: a subset run of the job's busiest host alone projects the
whole job with the lab's storage ceiling given (--storage-write-gbps / --storage-read-gbps), then the whole job
runs for real on H hosts; rounds interleave the cases and sizes. It prints, per engine, case and size, the
projected and the measured steady save (the median of the saves after the first) and cold load, their ratio, the
binding limit the projection names, and whether it is the one the lab set; it exits 1 if any ratio is off by more
than 25 %.

The proxy: each connection is put on its host by the connecting process's `LAB_HOST` environment variable
(every host's launcher, torchrun and ranks inherit it), found through psutil from the connection's port; bytes
in both directions take tokens from the host's bucket and from the shared one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the loopback S3 endpoint of the tests

from local_s3 import moto_server  # noqa: E402

from ckpt_bench.layout.megatron_shapes import MegatronGPT, host_held_bytes  # noqa: E402
from ckpt_bench.layout.sources import resolve_workload  # noqa: E402

MB = 10**6
RANKS_PER_HOST = 2
EXPERIMENT = ROOT / "ckpt_bench" / "configs" / "tiny_gpt.yaml"
# The state: the tiny GPT, a little larger so that a save takes seconds at a few MB/s.
SETS = ("--set", "num_layers=2", "--set", "hidden_size=512", "--set", "ffn_hidden_size=1536")


def _sets(engine: str, hosts: int) -> tuple[str, ...]:
    """The experiment's settings for `engine` on `hosts` hosts. torch_dist reads from this machine's one page cache,
    which every lab "host" shares, where a real host's is its own: a pipeline stage a host (a layer or more each),
    its 2 ranks the stage's data-parallel replicas, so that no two hosts hold the same shard and the one cache
    serves each host as its own would (the restart without the fully parallel load reads each replica). The output
    layer is its own weight: tied, the last stage's copy is keyed as the first stage's embedding."""
    if engine != "torch_dist":
        return SETS
    return ("--set", f"num_layers={max(2, hosts)}", *SETS[2:], "--set", f"pipeline_model_parallel_size={hosts}",
            "--set", "untie_embeddings_and_output_weights=true")
# (per host, all hosts) MB/s: the client binds at every size; the storage binds from 2 hosts on. On the disk the
# throttle caps one or the other (cgroup v1): a host alone there gets the storage's whole ceiling.
CASES = {"client": (4.0, 1000.0), "storage": (8.0, 12.0)}
DISK_CASES = {"client": (4.0, None), "storage": (None, 12.0)}
# The storage figure the projection is given where only the hosts are capped: no cap, about this disk's own rate
# unthrottled (`dd conv=fsync` here: 1.1 GB/s), as the S3 client case's 1,000 MB/s in all.
UNCAPPED_DISK_MB_S = 1000.0
EXPECTED = {"client": "client", "storage": "storage"}
ENGINES = ("dcp", "torch_dist")
BLKIO = Path("/sys/fs/cgroup/blkio")


# ---- the proxy -------------------------------------------------------------------------------------------------


class Bucket:
    """Tokens (bytes) at `rate` a second, a burst of 50 ms."""

    def __init__(self, rate: float):
        self.rate, self.burst = rate, rate * 0.05
        self.tokens, self.stamp = self.burst, time.monotonic()

    async def take(self, amount: int) -> None:
        while True:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            if self.tokens >= amount:
                self.tokens -= amount
                return
            await asyncio.sleep((amount - self.tokens) / self.rate)


def _host_of(port: int, listen: int) -> str | None:
    """The LAB_HOST of the process whose socket's local port is `port` (a client of the proxy)."""
    import psutil

    for connection in psutil.net_connections(kind="tcp"):
        if connection.laddr and connection.laddr.port == port and connection.raddr and \
                connection.raddr.port == listen and connection.pid:
            with contextlib.suppress(psutil.Error):
                return psutil.Process(connection.pid).environ().get("LAB_HOST")
    return None


async def _pipe(reader, writer, buckets: list[Bucket]) -> None:
    try:
        while chunk := await reader.read(64 * 1024):
            for bucket in buckets:
                await bucket.take(len(chunk))
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


def serve_proxy(listen: int, target: int, per_host: float, total: float) -> None:
    """Forward 127.0.0.1:`listen` to 127.0.0.1:`target`, capped per host and in all (bytes a second)."""
    shared, hosts = Bucket(total), {}

    async def handle(reader, writer) -> None:
        port = writer.get_extra_info("peername")[1]
        host = await asyncio.get_running_loop().run_in_executor(None, _host_of, port, listen)
        buckets = [shared] + ([hosts.setdefault(host, Bucket(per_host))] if host is not None else [])
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", target)
        await asyncio.gather(_pipe(reader, upstream_writer, buckets), _pipe(upstream_reader, writer, buckets))

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", listen)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# ---- the disk's throttle ---------------------------------------------------------------------------------------


def disk_unavailable(folder: Path) -> str | None:
    """Why the ceilings of the disk holding `folder` cannot be set here (None: they can)."""
    if not (BLKIO / "blkio.throttle.write_bps_device").exists():
        return "no cgroup v1 blkio controller at /sys/fs/cgroup/blkio"
    if os.geteuid() != 0:
        return "cgroups are made by root"
    if os.major(os.stat(folder).st_dev) == 0:
        return f"{folder} is on no block device (tmpfs?): its reads and writes cannot be throttled"
    return None


@contextlib.contextmanager
def throttled(folder: Path, per_host: float | None, total: float | None, hosts: int):
    """A cgroup per host (capped at `per_host` bytes a second) or one for every host (capped at `total`), each
    throttling reads and writes to the disk that holds `folder`; yields each host's cgroup. Removed after."""
    device = os.stat(folder).st_dev
    disk = f"{os.major(device)}:{os.minor(device)}"
    names = [f"ckpt-bench-lab-{os.getpid()}-{host}" for host in range(hosts)] if per_host else \
        [f"ckpt-bench-lab-{os.getpid()}-all"]
    made = []
    try:
        for name in names:
            group = BLKIO / name
            group.mkdir()
            made.append(group)
            for limit in ("blkio.throttle.write_bps_device", "blkio.throttle.read_bps_device"):
                (group / limit).write_text(f"{disk} {int(per_host or total)}\n")
        yield [made[host % len(made)] for host in range(hosts)]
    finally:
        for group in made:
            with contextlib.suppress(OSError):
                group.rmdir()


# ---- the runs --------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(args: list[str], host: int, runs: Path, cgroup: Path | None) -> subprocess.Popen:
    def join() -> None:  # in the child, before it runs: it and everything it starts are in the host's cgroup
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    return subprocess.Popen([sys.executable, str(ROOT / "ckpt_launch.py"), *args, "--runs-dir", str(runs),
                             "--format", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env={**os.environ, "LAB_HOST": str(host)}, preexec_fn=join if cgroup else None)


def _common(engine: str, job_ranks: int, storage: list[str], gbps: float, save_calls: int) -> list[str]:
    return ["--workload", str(EXPERIMENT), *_sets(engine, job_ranks // RANKS_PER_HOST), "--engine", engine,
            "--job-ranks", str(job_ranks),
            "--nproc-per-node", str(RANKS_PER_HOST), *storage, "--save-calls", str(save_calls), "--load-calls", "1",
            "--time-between-checkpoints", "0", "--storage-write-gbps", f"{gbps:.6f}", "--storage-read-gbps",
            f"{gbps:.6f}", "--network-gbps", "1"]


def _finish(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=1800)
    if process.returncode:
        raise RuntimeError(f"a run failed ({process.returncode}): {err.strip().splitlines()[-1:]}")
    return json.loads(out)


def _steady(report: dict) -> tuple[float, float]:
    saves = [s["total_time"] for s in report["saves"] if s.get("complete")]
    return statistics.median(saves[1:] or saves), report["load_time"]


def project_one_host(engine: str, hosts: int, storage: list[str], gbps: float, runs: Path,
                     cgroups: list[Path | None]) -> dict:
    """The job of `hosts` hosts projected from a run of its busiest host alone."""
    args = _common(engine, hosts * RANKS_PER_HOST, storage, gbps, save_calls=3)
    report = _finish(_launch([*args, "--subset", "--subset-hosts", "busiest", "--nnodes", "1"], 0, runs, cgroups[0]))
    projection = report["projection"]
    load = projection["load"]["seconds"] or projection["load"]["range_s"][0]
    return {"save": projection["save"]["seconds"] or projection["save"]["range_s"][0],
            "save_binding": projection["save"]["binding"], "load": load,
            "load_binding": projection["load"]["binding"],
            "client": projection["inputs"]["client_write_gbps"]["value"],
            "load_one_cache": _one_cache_restart(projection, engine, hosts, load)}


def _one_cache_restart(projection: dict, engine: str, hosts: int, load: float) -> float | None:
    """The projected restart were the job's hosts to share one page cache, as the lab's do (one machine): its storage
    term's low end (each host's page cache serving its ranks' replicas once) with the job's held shards read once,
    the rest of the restart as projected. None where the restart does not read through page caches (S3, or the fully
    parallel load) or the storage does not bind."""
    cached = projection["load_traffic"].get("page_cached")
    if cached is None or projection["load"]["binding"] != "storage":
        return None
    overrides = {key: yaml.safe_load(value)
                 for key, value in (pair.split("=", 1) for pair in _sets(engine, hosts)[1::2])}
    world = hosts * RANKS_PER_HOST
    once = host_held_bytes(MegatronGPT(resolve_workload(str(EXPERIMENT), overrides), world), world)[0]
    storage = next(term for term in projection["load"]["terms"] if term["name"] == "storage")["range_s"][0]
    return load - storage + storage * once / cached["bytes"]


def run_job(engine: str, hosts: int, storage: list[str], gbps: float, runs: Path,
            cgroups: list[Path | None]) -> tuple[float, float]:
    """The whole job on `hosts` local hosts (one launcher each, one torchrun job): its steady save and load."""
    run_id, port = f"lab-{time.time_ns()}", _free_port()
    args = [*_common(engine, hosts * RANKS_PER_HOST, storage, gbps, save_calls=3), "--nnodes", str(hosts),
            "--run-id", run_id, "--master-port", str(port)]
    agents = [_launch([*args, "--node-rank", str(rank)], rank, runs, cgroups[rank]) for rank in range(hosts)]
    reports = [_finish(agent) for agent in agents]
    return _steady(reports[0])


@contextlib.contextmanager
def capped_s3(s3, case: str):
    """The S3 endpoint behind the proxy of `case`'s ceilings: yields (its storage options, a storage ceiling)."""
    per_host, total = CASES[case]
    listen = _free_port()
    proxy = subprocess.Popen([sys.executable, __file__, "--serve-proxy", str(listen), s3.url.rsplit(":", 1)[1],
                              str(per_host * MB), str(total * MB)])
    time.sleep(1.0)
    try:
        yield lambda: ["--save-dir", f"s3://{s3.create_bucket()}/lab", "--s3-endpoint",
                       f"http://127.0.0.1:{listen}", "--s3-region", "us-east-1"], total * MB / 1e9
    finally:
        proxy.terminate()
        proxy.wait()


def measure(engine: str, case: str, hosts: int, storage: list[str], gbps: float, runs: Path,
            cgroups: list[Path | None]) -> tuple[dict, tuple[float, float]]:
    projected = project_one_host(engine, hosts, storage, gbps, runs, cgroups)
    return projected, run_job(engine, hosts, storage, gbps, runs, cgroups)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--hosts", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--serve-proxy", nargs=4, type=float, metavar=("LISTEN", "TARGET", "PER_HOST", "TOTAL"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_proxy:
        listen, target, per_host, total = args.serve_proxy
        serve_proxy(int(listen), int(target), per_host, total)
        return 0
    engines = list(args.engines)
    results: dict[tuple[str, str, int], dict[str, list]] = {}
    with moto_server() as s3, tempfile.TemporaryDirectory(prefix="ckpt-bench-lab-", dir=ROOT) as folder:
        runs = Path(folder)
        if "torch_dist" in engines and (why := disk_unavailable(runs)):
            print(f"the torch_dist case is skipped: {why}", file=sys.stderr)
            engines.remove("torch_dist")
        for round_index in range(args.rounds):
            for engine in engines:
                for case in args.cases if round_index % 2 == 0 else reversed(args.cases):
                    for hosts in args.hosts:
                        if engine == "dcp":
                            with capped_s3(s3, case) as (storage, gbps):
                                projected, measured = measure(engine, case, hosts, storage(), gbps, runs,
                                                              [None] * hosts)
                        else:
                            per_host, total = DISK_CASES[case]
                            checkpoints = runs / f"checkpoints-{time.time_ns()}"
                            checkpoints.mkdir()
                            gbps = (total or UNCAPPED_DISK_MB_S) * MB / 1e9
                            with throttled(checkpoints, per_host and per_host * MB, total and total * MB,
                                           hosts) as cgroups:
                                projected, measured = measure(engine, case, hosts, ["--save-dir", str(checkpoints)],
                                                              gbps, runs, cgroups)
                        entry = results.setdefault((engine, case, hosts), {"projected": [], "measured": []})
                        entry["projected"].append(projected)
                        entry["measured"].append(measured)
                        print(f"round {round_index + 1} {engine} {case} {hosts} hosts: projected save "
                              f"{projected['save']:.2f} s ({projected['save_binding']}), load "
                              f"{projected['load']:.2f} s; measured save {measured[0]:.2f} s, load "
                              f"{measured[1]:.2f} s", file=sys.stderr, flush=True)
    return report_table(results)


def report_table(results: dict) -> int:
    s3 = ", ".join(f"{case}: {h:g} MB/s a host, {t:g} MB/s in all" for case, (h, t) in CASES.items())
    disk = ", ".join(f"{case}: " + (f"{h:g} MB/s a host" if h else f"{t:g} MB/s in all")
                     for case, (h, t) in DISK_CASES.items())
    print(f"caps: {s3} (S3, dcp); {disk} (disk, torch_dist); {RANKS_PER_HOST} ranks a host; medians over rounds")
    print(f"{'engine':<10} {'case':<8} {'hosts':>5} {'save proj':>10} {'save meas':>10} {'ratio':>6} {'binding':>9} "
          f"{'load proj':>10} {'load meas':>10} {'ratio':>6} {'binding':>9}")
    worst = 0.0
    for (engine, case, hosts), entry in sorted(results.items()):
        projected, measured = entry["projected"], entry["measured"]
        save_p = statistics.median(p["save"] for p in projected)
        load_p = statistics.median(p["load"] for p in projected)
        save_m = statistics.median(m[0] for m in measured)
        load_m = statistics.median(m[1] for m in measured)
        binding = statistics.mode(p["save_binding"] for p in projected)
        load_binding = statistics.mode(p["load_binding"] for p in projected)
        ratios = (save_p / save_m, load_p / load_m)
        worst = max(worst, *(abs(r - 1) for r in ratios))
        right = "" if binding == EXPECTED[case] else " (expected " + EXPECTED[case] + ")"
        print(f"{engine:<10} {case:<8} {hosts:>5} {save_p:>10.2f} {save_m:>10.2f} {ratios[0]:>6.2f} "
              f"{binding + right:>9} {load_p:>10.2f} {load_m:>10.2f} {ratios[1]:>6.2f} {load_binding:>9}")
    for (engine, case, hosts), entry in sorted(results.items()):
        shared = [p["load_one_cache"] for p in entry["projected"] if p.get("load_one_cache") is not None]
        if shared:
            load_m = statistics.median(m[1] for m in entry["measured"])
            print(f"{engine} {case} {hosts} hosts: the restart projected with one page cache for all the lab's hosts "
                  f"(each shard read once by the job): {statistics.median(shared):.2f} s against {load_m:.2f} s "
                  f"measured ({statistics.median(shared) / load_m:.2f})")
    print(f"largest error {worst:.0%} (goal: within 25 %)")
    return 0 if worst <= 0.25 else 1


if __name__ == "__main__":
    sys.exit(main())
