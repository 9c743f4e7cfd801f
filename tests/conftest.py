"""Shared fixtures.

`s3_endpoint` (session): a real S3 endpoint -- moto's standalone server on loopback, started as a
process and reached over HTTP exactly as AWS would be (boto3 on the launcher side, s3torchconnector's
native client in the ranks). Nothing is mocked in-process. See local_s3.S3Endpoint:

    def test_something(s3_endpoint):
        bucket = s3_endpoint.create_bucket()          # a fresh, uniquely named bucket
        args = ["--save-dir", f"s3://{bucket}/prefix", *s3_endpoint.options()]   # --s3-endpoint/--s3-region
        s3_endpoint.url, s3_endpoint.region, s3_endpoint.client(), s3_endpoint.object_keys(bucket)

AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY are set to `testing` while the server runs, so child
processes (torchrun and its ranks) inherit them.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import upstream
from local_s3 import MOTO_SERVER, S3Endpoint, moto_server

__all__ = ["S3Endpoint"]

# Runs and sweeps draw report.html (about half a second of CPU each): off for the suite's hundred runs,
# on in the tests that check it (tests/unit/test_report_outputs.py, the run on disk of tests/e2e/test_dcp.py).
os.environ.setdefault("CKPT_BENCH_HTML", "0")
# The projection's cache of the engines' global steps (docs/projection.md): the suite's own, not the user's, and
# removed when the process (pytest, or one of its xdist workers) ends; a cache the caller named is left as it is.
if "CKPT_BENCH_CACHE" not in os.environ:
    os.environ["CKPT_BENCH_CACHE"] = tempfile.mkdtemp(prefix="ckpt-bench-cache-")
    atexit.register(shutil.rmtree, os.environ["CKPT_BENCH_CACHE"], ignore_errors=True)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory) -> S3Endpoint:
    if not MOTO_SERVER.exists():
        pytest.skip(f"{MOTO_SERVER} not installed (pip install 'moto[server]')")
    with moto_server(tmp_path_factory.mktemp("moto")) as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def upstream_megatron_lm(tmp_path_factory) -> Path:
    """Megatron-LM at core_v0.16.1, extracted (see tests/upstream.py)."""
    return upstream.checkout("Megatron-LM", upstream.shared_scratch(tmp_path_factory.getbasetemp()))


@pytest.fixture(scope="session")
def upstream_primus(tmp_path_factory) -> Path:
    """Primus at fd1eeabb, extracted (see tests/upstream.py)."""
    return upstream.checkout("Primus", upstream.shared_scratch(tmp_path_factory.getbasetemp()))
