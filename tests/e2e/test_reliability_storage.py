"""The deletion contract and the launcher's own S3 client against a real endpoint (moto on loopback):
a prefix is removed only when its mark names the run; a resumed sweep removes what a killed attempt
left on S3; a store answering 503 SlowDown to most requests does not fail the launcher (issue 22)."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.storage import OWNER_MARK, StorageOptions, reopen, storage_for
from ckpt_bench.sweep.run import JOB_FILE, set_aside

SLOW_DOWN = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"


def _s3(endpoint_url: str, region: str, url: str, **options):
    return storage_for(url, StorageOptions(s3_region=region, s3_endpoint=endpoint_url, **options))


@contextmanager
def throttling_proxy(target: str, refused_of_five: int = 3) -> Iterator[str]:
    """An S3 endpoint in front of `target` that answers `503 SlowDown` to `refused_of_five` requests of
    every five (60 % by default), as a busy store does, and passes the others on."""
    upstream = urlsplit(target)
    count = iter(range(10**9))

    class Handler(BaseHTTPRequestHandler):
        def _any(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if next(count) % 5 < refused_of_five:
                self.send_response(503)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(SLOW_DOWN)))
                self.end_headers()
                self.wfile.write(SLOW_DOWN)
                return
            connection = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=30)
            connection.request(self.command, self.path, body=body, headers=dict(self.headers))
            answer = connection.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in ("transfer-encoding", "content-length", "connection", "date", "server"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_the_launcher_rides_out_a_store_that_throttles(s3_endpoint, tmp_path):
    bucket = s3_endpoint.create_bucket()
    with throttling_proxy(s3_endpoint.url) as busy:
        storage = _s3(busy, s3_endpoint.region, f"s3://{bucket}/bench")
        storage.check_access()
        location = storage.create(tmp_path / "run")
        s3_endpoint.client().put_object(Bucket=bucket, Key="bench/run/iter_0000001/a.distcp", Body=b"a" * 10)
        assert storage.iteration_sizes() == {1: 10}
        assert storage.remove() and s3_endpoint.object_keys(bucket) == []
        assert location == f"s3://{bucket}/bench/run"
    with throttling_proxy(s3_endpoint.url, refused_of_five=5) as refusing:  # --s3-max-attempts is its limit too
        with pytest.raises(ConfigError, match="503"):
            _s3(refusing, s3_endpoint.region, f"s3://{bucket}/x", s3_max_attempts=1).check_access()


def test_a_dead_endpoint_fails_at_once(s3_endpoint):
    started = time.monotonic()
    with pytest.raises(ConfigError, match="endpoint unreachable"):
        _s3("http://127.0.0.1:9", s3_endpoint.region, "s3://b/p").check_access()
    assert time.monotonic() - started < 5  # not botocore's ~25 s of backoff


def test_an_s3_mark_must_name_the_run(s3_endpoint, tmp_path):
    bucket = s3_endpoint.create_bucket()
    storage = _s3(s3_endpoint.url, s3_endpoint.region, f"s3://{bucket}")
    location = storage.create(tmp_path / "run-a")
    s3_endpoint.client().put_object(Bucket=bucket, Key="run-a/iter_0000001/x", Body=b"x")
    assert not reopen(location, storage.describe(), tmp_path / "run-b").remove()  # another run's mark
    # The same name again (two launches in the same second): a new prefix, the first never written over.
    assert _s3(s3_endpoint.url, s3_endpoint.region, f"s3://{bucket}").create(tmp_path / "run-a") == \
        f"s3://{bucket}/run-a-2"
    assert s3_endpoint.object_keys(bucket, "run-a/") == ["run-a/.ckpt-bench-owned", "run-a/iter_0000001/x"]
    assert storage.remove() and s3_endpoint.object_keys(bucket, "run-a/") == []


def test_resume_removes_what_a_killed_attempt_left_on_s3(s3_endpoint, tmp_path):
    bucket = s3_endpoint.create_bucket()
    job_dir = tmp_path / "sweep" / "0"
    run_dir = job_dir / "20250101-000000-dcp-tiny"
    run_dir.mkdir(parents=True)
    (job_dir / JOB_FILE).write_text(json.dumps({"status": "running"}))
    storage = _s3(s3_endpoint.url, s3_endpoint.region, f"s3://{bucket}/ckpt")
    location = storage.create(run_dir)
    s3_endpoint.client().put_object(Bucket=bucket, Key=f"ckpt/{run_dir.name}/iter_0000001/__0_0.distcp", Body=b"x")
    s3_endpoint.client().put_object(Bucket=bucket, Key="ckpt/someone-else/data", Body=b"y")
    (run_dir / "run.json").write_text(json.dumps({"checkpoint_dir": location, "storage": storage.describe()}))
    set_aside(job_dir, kept=False)
    assert s3_endpoint.object_keys(bucket) == ["ckpt/someone-else/data"]
    assert (job_dir / "attempts" / "1" / run_dir.name / "run.json").is_file()


def test_a_prefix_without_our_mark_is_never_removed(s3_endpoint, tmp_path):
    bucket = s3_endpoint.create_bucket()
    client = s3_endpoint.client()
    client.put_object(Bucket=bucket, Key="theirs/thesis.txt", Body=b"mine")
    client.put_object(Bucket=bucket, Key=f"copied/{OWNER_MARK}", Body=b"created by ckpt-bench for /elsewhere\n")
    for prefix in ("theirs", "copied"):
        assert not reopen(f"s3://{bucket}/{prefix}", {"s3_region": s3_endpoint.region, "s3_endpoint": s3_endpoint.url},
                          Path(tmp_path / prefix)).remove()
    assert s3_endpoint.object_keys(bucket) == [f"copied/{OWNER_MARK}", "theirs/thesis.txt"]
