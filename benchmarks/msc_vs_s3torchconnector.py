#!/usr/bin/env python3
"""The same DCP checkpoint through NVIDIA's multi-storage-client and through s3torchconnector, on one S3 endpoint.

    python benchmarks/msc_vs_s3torchconnector.py [--mib 256] [--tensors 16] [--threads 2] [--rounds 5]
        [--s3-endpoint URL --bucket NAME]  (default: moto on loopback, tests/local_s3.py)

Megatron-LM reaches object storage through MSC (`msc://PROFILE/PATH`); PyTorch DCP and Lightning users through
s3torchconnector (`s3://`). Here both clients get the same state dict (`--tensors` fp32 tensors, `--mib` MiB in
all) in one process, bare: `torch.distributed.checkpoint.save` with MSC's `MultiStorageFileSystemWriter` or
s3torchconnector's `S3StorageWriter` (each `--threads` writer threads), then `load` with MSC's
`MultiStorageFileSystemReader` (`--threads` prefetch threads; megatron-core uses 2) or `S3StorageReader`, into a
fresh state dict, checked equal. Rounds alternate the order of the two clients (ABBA...). Each figure is the
median of `--rounds`, time.perf_counter around the call, MiB = 2**20 bytes of objects on the endpoint (listed after
each save: the two write the same tensors, framed alike). Neither client caches anything on this host. moto keeps
objects in memory and serves slowly: its ratios mean something, its absolute figures little.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the loopback S3 endpoint of the tests

from local_s3 import CREDENTIALS, S3Endpoint, moto_server  # noqa: E402

MIB = 1 << 20


def state(mib: int, tensors: int) -> dict[str, torch.Tensor]:
    numel = mib * MIB // 4 // tensors
    generator = torch.Generator().manual_seed(0)
    return {f"layer{i}.weight": torch.rand(numel, generator=generator) for i in range(tensors)}


def object_bytes(endpoint: S3Endpoint, bucket: str, prefix: str) -> int:
    pages = endpoint.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
    return sum(item["Size"] for page in pages for item in page.get("Contents", []))


class Msc:
    name = "multi-storage-client"

    def __init__(self, bucket: str, threads: int):
        self.bucket, self.threads = bucket, threads

    def save(self, sd, prefix):
        from multistorageclient.contrib.torch import MultiStorageFileSystemWriter

        dcp.save(sd, storage_writer=MultiStorageFileSystemWriter(f"msc://{self.bucket}/{prefix}",
                                                                 thread_count=self.threads))

    def load(self, sd, prefix):
        from multistorageclient.contrib.torch import MultiStorageFileSystemReader

        dcp.load(sd, storage_reader=MultiStorageFileSystemReader(f"msc://{self.bucket}/{prefix}",
                                                                 thread_count=self.threads))


class S3TorchConnector:
    name = "s3torchconnector"

    def __init__(self, bucket: str, threads: int, region: str):
        from s3torchconnector import S3ClientConfig

        self.bucket, self.threads, self.region = bucket, threads, region
        self.config = S3ClientConfig(force_path_style=True)

    def save(self, sd, prefix):
        from s3torchconnector.dcp import S3StorageWriter

        dcp.save(sd, storage_writer=S3StorageWriter(self.region, f"s3://{self.bucket}/{prefix}",
                                                    s3client_config=self.config, thread_count=self.threads))

    def load(self, sd, prefix):
        from s3torchconnector.dcp import S3StorageReader

        dcp.load(sd, storage_reader=S3StorageReader(self.region, f"s3://{self.bucket}/{prefix}",
                                                    s3client_config=self.config))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--tensors", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--s3-endpoint", help="an existing endpoint (default: start moto on loopback)")
    parser.add_argument("--s3-region", default="us-east-1")
    parser.add_argument("--bucket", help="an existing bucket (default: a new one on the local endpoint)")
    options = parser.parse_args()

    with contextlib.ExitStack() as stack:
        if options.s3_endpoint:
            endpoint = S3Endpoint(options.s3_endpoint, region=options.s3_region)
        else:
            endpoint = stack.enter_context(moto_server())
            os.environ.update(CREDENTIALS)
        bucket = options.bucket or endpoint.create_bucket()
        config = Path(tempfile.mkdtemp()) / "msc.yaml"  # the profile megatron-core's users write: the bucket
        config.write_text(yaml.safe_dump({"profiles": {bucket: {"storage_provider": {"type": "s3", "options": {
            "base_path": bucket, "endpoint_url": endpoint.url, "region_name": endpoint.region}}}}}))
        os.environ["MSC_CONFIG"] = str(config)
        os.environ["AWS_ENDPOINT_URL"] = endpoint.url  # s3torchconnector's DCP classes read it
        clients = [Msc(bucket, options.threads), S3TorchConnector(bucket, options.threads, endpoint.region)]
        saved = state(options.mib, options.tensors)
        times: dict[str, dict[str, list[float]]] = {c.name: {"save": [], "load": [], "bytes": []} for c in clients}
        run = f"bench-{uuid.uuid4().hex[:8]}"
        for round_ in range(options.rounds):
            for client in clients if round_ % 2 == 0 else clients[::-1]:
                prefix = f"{run}/{client.name}/{round_}"
                started = time.perf_counter()
                client.save(saved, prefix)
                times[client.name]["save"].append(time.perf_counter() - started)
                times[client.name]["bytes"].append(object_bytes(endpoint, bucket, prefix))
                loaded = {key: torch.empty_like(value) for key, value in saved.items()}
                started = time.perf_counter()
                client.load(loaded, prefix)
                times[client.name]["load"].append(time.perf_counter() - started)
                if any(not torch.equal(loaded[key], saved[key]) for key in saved):
                    raise SystemExit(f"{client.name}: round {round_} loaded other numbers than it saved")
        result = {"endpoint": endpoint.url, "state_mib": options.mib, "tensors": options.tensors,
                  "threads": options.threads, "rounds": options.rounds, "clients": {}}
        for name, figures in times.items():
            nbytes = statistics.median(figures["bytes"])
            save, load = statistics.median(figures["save"]), statistics.median(figures["load"])
            result["clients"][name] = {
                "objects_mib": round(nbytes / MIB, 2), "save_s": round(save, 3), "load_s": round(load, 3),
                "save_mib_s": round(nbytes / MIB / save, 1), "load_mib_s": round(nbytes / MIB / load, 1),
                "save_s_each": [round(t, 3) for t in figures["save"]],
                "load_s_each": [round(t, 3) for t in figures["load"]]}
        print(json.dumps(result, indent=2))
        for name, row in result["clients"].items():
            print(f"{name:22s} {row['objects_mib']:8.1f} MiB  save {row['save_s']:7.3f} s ({row['save_mib_s']:6.1f} "
                  f"MiB/s)  load {row['load_s']:7.3f} s ({row['load_mib_s']:6.1f} MiB/s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
