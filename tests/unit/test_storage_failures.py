"""What a failing rank's log says went wrong with the storage (launcher.torchrun.storage_failure): the
lines are the clients' own, copied from real runs."""

from __future__ import annotations

import pytest

from ckpt_bench.launcher.torchrun import storage_failure

# An endpoint that accepted the uploads and never answered them (a proxy in front of moto that held
# every PUT under iter_*): s3torchconnector's rank failed after 365 s with this, and the report said
# `cause: null` (issue 22, 7b).
UNANSWERED_UPLOAD = (
    "[rank0]: s3torchconnectorclient._mountpoint_s3_client.S3Exception: Client error: Unknown CRT error: "
    "CRT error 2073: aws-c-http: AWS_ERROR_HTTP_CHANNEL_THROUGHPUT_FAILURE, Http connection channel shut "
    "down due to failure to meet throughput minimum")


@pytest.mark.parametrize(("log", "cause"), [
    (UNANSWERED_UPLOAD, "the endpoint stopped answering (the S3 client gave up after its retries: no bytes moved)"),
    ("S3Exception: Client error: Unknown CRT error: CRT error 1029: aws-c-io: AWS_IO_TLS_ERROR_NEGOTIATION_FAILURE, "
     "TLS negotiation failed", "S3 client error AWS_IO_TLS_ERROR_NEGOTIATION_FAILURE"),
    ("OSError: [Errno 28] No space left on device: '/ckpt/iter_0000002/__0_0.distcp'",
     "No space left on device on /ckpt/iter_0000002/__0_0.distcp"),
    ("S3Exception: Client error: Service error: NoSuchBucket", "the bucket does not exist"),
    ("RuntimeError: CUDA out of memory", None),
])
def test_a_rank_log_names_what_went_wrong_with_the_storage(log, cause):
    assert storage_failure(f"Traceback (most recent call last):\n  ...\n{log}\n") == cause
