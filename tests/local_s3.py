"""A real S3 endpoint on loopback: moto's standalone server, for tests and storage benchmarks.

The server runs as its own process and is reached over HTTP exactly as AWS would be (boto3 in the
launcher, s3torchconnector's native client in the ranks); nothing is mocked in-process. moto keeps
objects in memory and answers each ranged GET slowly (~0.5 s), so its numbers measure the client
path and the request pattern, not a production S3.

    with moto_server() as s3:           # sets AWS_ACCESS_KEY_ID/SECRET=testing for this process
        bucket = s3.create_bucket()
        ckpt_launch.py --save-dir s3://{bucket}/x --s3-endpoint {s3.url} --s3-region {s3.region}
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MOTO_SERVER = Path(sys.executable).with_name("moto_server")
REGION = "us-east-1"
# moto accepts any credentials; the clients (boto3, the CRT client in the ranks) just need some.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@dataclass
class S3Endpoint:
    url: str  # e.g. http://127.0.0.1:54321
    server: subprocess.Popen | None = None  # the server process, for a test that kills it mid-run
    region: str = REGION

    def stop(self) -> None:
        """Kill the server now, as a crashed endpoint would vanish (fault-injection tests)."""
        if self.server is not None:
            self.server.kill()
            self.server.wait()

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.url, region_name=self.region)

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a unique name by default) and return its name."""
        name = name or f"ckpt-bench-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def object_keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def options(self) -> list[str]:
        """The ckpt_launch.py options that point a run at this endpoint."""
        return ["--s3-endpoint", self.url, "--s3-region", self.region]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def moto_server(log_dir: str | os.PathLike | None = None, timeout_s: float = 30) -> Iterator[S3Endpoint]:
    """Start `moto_server` on a free loopback port, wait until it answers, stop it on exit.

    The test credentials are set in this process's environment (so child processes inherit them)
    for as long as the server runs, and restored afterwards.
    """
    if not MOTO_SERVER.exists():
        raise FileNotFoundError(f"moto_server not found next to {sys.executable} (pip install 'moto[server]')")
    saved = {key: os.environ.get(key) for key in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = Path(log_dir or tempfile.mkdtemp(prefix="moto-")) / "moto_server.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen([str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                                  stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/moto-api/", timeout=1):
                        break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"moto_server did not start on {url}; see {log_path}") from None
                    time.sleep(0.2)
            yield S3Endpoint(url, server)
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
