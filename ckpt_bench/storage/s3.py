"""`--save-dir s3://bucket/prefix`: the launcher reaches S3 with boto3, the ranks with s3torchconnector.

The launcher side uses boto3 for the up-front checks, the owner mark, object sizes and deletion; the
ranks write through s3torchconnector's native (CRT) client. The launcher retries a throttled request
(503 SlowDown and the like) as many times as the ranks' client would (`--s3-max-attempts`, else 10),
with jittered backoff, but not an endpoint that does not answer: that fails its one line at once.
Both read the same endpoint: `--s3-endpoint`, else `AWS_ENDPOINT_URL`. With an explicit endpoint,
path-style addressing is used (a hostname such as `localhost` cannot carry a bucket as a subdomain).
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from ckpt_bench.core.checkpoint_dir import iter_dir_name, sizes_by_iteration
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.options import Flag, Options
from ckpt_bench.storage.base import BASELINE_FOLDER, OWNER_MARK, folder_names, mark_text
from ckpt_bench.storage.baseline import Baseline, PlainIOBaseline, pieces, read_to_end

_S3_URL = re.compile(r"^s3://(?P<bucket>[^/]+)/?(?P<prefix>.*)$")

S3_REGION = Flag(("--s3-region",), "Region of the bucket (default: AWS_REGION).")
S3_ENDPOINT = Flag(("--s3-endpoint",), "Endpoint URL, e.g. a local S3-compatible server (default: AWS_ENDPOINT_URL).")
S3_PART_SIZE = Flag(("--s3-part-size",), "Multipart upload part size in bytes (at least 5 MiB).", type=int, min=1)
S3_THROUGHPUT_TARGET_GBPS = Flag(("--s3-throughput-target-gbps",),
                                 "Throughput target of the ranks' S3 client, in Gbit/s.", type=float)
DEFAULT_MAX_ATTEMPTS = 10  # s3torchconnector's own default
# Error codes of a store that is busy, not broken: retried (`S3Storage._retrying`).
THROTTLING = frozenset({"SlowDown", "503", "ServiceUnavailable", "500", "InternalError", "RequestTimeout",
                        "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException"})
MAX_BACKOFF_S = 5.0
S3_MAX_ATTEMPTS = Flag(("--s3-max-attempts",), "Attempts of each S3 request by the ranks' client before the save "
                       "or load fails (s3torchconnector's default, 10, gives up on a dead endpoint after about "
                       "75 s).", type=int, min=1)


@dataclass
class S3Options(Options):
    """How an s3:// save dir is reached. Unset: the AWS environment decides (region, endpoint) or
    s3torchconnector's defaults do (part size, throughput target). Checked by `S3Storage`, which also
    applies the environment."""

    section = "S3 storage (--save-dir s3://...)"

    s3_region: str | None = S3_REGION.field(None)
    s3_endpoint: str | None = S3_ENDPOINT.field(None)
    s3_part_size: int | None = S3_PART_SIZE.field(None)
    s3_throughput_target_gbps: float | None = S3_THROUGHPUT_TARGET_GBPS.field(None)
    s3_max_attempts: int | None = S3_MAX_ATTEMPTS.field(None)


class S3WorkerStorage:
    """s3torchconnector's DCP and Lightning classes, all with the client settings of `S3Storage.describe()`.

    Its DCP classes take no endpoint: the native client reads `AWS_ENDPOINT_URL`, which
    `S3Storage.worker_env()` puts in the ranks' environment.
    """

    def __init__(self, description: dict) -> None:
        self.settings = description

    def client_config(self):
        from s3torchconnector import S3ClientConfig

        kwargs = {"force_path_style": bool(self.settings.get("s3_force_path_style"))}
        if self.settings.get("s3_part_size"):
            kwargs["part_size"] = int(self.settings["s3_part_size"])
        if self.settings.get("s3_throughput_target_gbps"):
            kwargs["throughput_target_gbps"] = float(self.settings["s3_throughput_target_gbps"])
        if self.settings.get("s3_max_attempts"):
            kwargs["max_attempts"] = int(self.settings["s3_max_attempts"])
        return S3ClientConfig(**kwargs)

    def dcp_writer(self, path: str, thread_count: int, sync_files: bool):
        """`sync_files` does not apply: an upload is durable once S3 acknowledges it."""
        from s3torchconnector.dcp import S3StorageWriter

        return S3StorageWriter(self.settings["s3_region"], path, s3client_config=self.client_config(),
                               thread_count=thread_count)

    def dcp_reader(self, path: str):
        from s3torchconnector.dcp import S3StorageReader

        return S3StorageReader(self.settings["s3_region"], path, s3client_config=self.client_config())

    @cached_property
    def _checkpoint(self):
        """One client for every file of a rank (created on first use, before the first timed call)."""
        from s3torchconnector import S3Checkpoint

        return S3Checkpoint(self.settings["s3_region"], endpoint=self.settings.get("s3_endpoint"),
                            s3client_config=self.client_config())

    def file_writer(self, path: str, sync_files: bool):
        """`sync_files` does not apply: the object is durable once S3 acknowledges the upload (on close)."""
        return self._checkpoint.writer(path)

    def file_reader(self, path: str):
        return self._checkpoint.reader(path)

    def lightning_checkpoint_io(self):
        from s3torchconnector.lightning import S3LightningCheckpoint

        return S3LightningCheckpoint(region=self.settings["s3_region"], s3client_config=self.client_config(),
                                     endpoint=self.settings.get("s3_endpoint"))

    def local_path(self, path: str) -> str | None:
        return None


class S3Objects:
    """Plain objects through the S3 client the ranks used (s3torchconnector's, with the run's client
    settings), nothing on top: a `PlainIO` for the storage baseline."""

    tool = "built-in (s3torchconnector S3Client put_object/get_object)"

    def __init__(self, settings: dict, bucket: str, prefix: str, remove_prefix):
        from s3torchconnector._s3client import S3Client

        self.client = S3Client(settings["s3_region"], endpoint=settings.get("s3_endpoint"),
                               s3client_config=S3WorkerStorage(settings).client_config())
        self.bucket, self.prefix = bucket, prefix
        self.location = f"s3://{bucket}/{prefix}"
        self._remove_prefix = remove_prefix

    def write(self, name: str, size: int, fsync: bool, block: memoryview) -> None:
        writer = self.client.put_object(self.bucket, f"{self.prefix}/{name}")
        for piece in pieces(block, size):
            writer.write(piece)
        writer.close()  # the upload completes here; there is nothing to fsync

    def read(self, name: str) -> int:
        return read_to_end(self.client.get_object(self.bucket, f"{self.prefix}/{name}"))

    def drop_cache(self) -> None:
        pass  # nothing on this host caches the objects

    def remove(self) -> None:
        self._remove_prefix(self.prefix)


def region_and_endpoint(region: str | None, endpoint: str | None, no_region: str) -> tuple[str, str | None]:
    """The S3 region and endpoint as AWS's clients take them: the options given, else AWS_REGION (or
    AWS_DEFAULT_REGION) and AWS_ENDPOINT_URL. Raises ConfigError `no_region` without a region, and one line for an
    endpoint that is no URL."""
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        raise ConfigError(no_region)
    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL") or None
    if endpoint and not re.match(r"^https?://[^/]+", endpoint):
        raise ConfigError(f"--s3-endpoint {endpoint}: expected a URL such as http://127.0.0.1:9000")
    return region, endpoint


class S3Storage:
    """`s3://bucket/prefix/<run-name>/`, reached like AWS would be (boto3 here, the native client in ranks)."""

    kind = "s3"
    worker = S3WorkerStorage
    MIN_PART_SIZE = 5 * 1024 * 1024  # the S3 limit for multipart parts (s3torchconnector enforces it too)

    def __init__(self, save_dir: str, options: S3Options | None = None):
        match = _S3_URL.match(save_dir)
        if not match or not match.group("bucket"):
            raise ConfigError(f"--save-dir {save_dir}: not an S3 URL (expected s3://bucket/prefix)")
        options = options or S3Options()
        region, endpoint = region_and_endpoint(
            options.s3_region, options.s3_endpoint,
            f"--save-dir {save_dir}: an S3 save dir needs --s3-region (or AWS_REGION)")
        part_size = options.s3_part_size
        if part_size is not None and part_size < self.MIN_PART_SIZE:
            raise ConfigError(f"--s3-part-size {part_size}: S3 parts must be at least 5 MiB ({self.MIN_PART_SIZE})")
        throughput = options.s3_throughput_target_gbps
        if throughput is not None and throughput <= 0:
            raise ConfigError(f"--s3-throughput-target-gbps {throughput}: must be positive")
        self.url = save_dir
        self.bucket = match.group("bucket")
        self.prefix = match.group("prefix").strip("/")
        self.region = region
        self.endpoint = endpoint
        self.part_size = part_size
        self.throughput_target_gbps = throughput
        self.max_attempts = options.s3_max_attempts
        self.location: str | None = None
        self._run_prefix: str | None = None
        self._run_dir: Path | None = None
        self._client = None

    # boto3 is imported lazily: local runs never need it.
    @property
    def client(self):
        if self._client is None:
            import boto3
            from botocore.config import Config

            # One retry for a dropped connection; throttling is retried by `_retrying`, a dead endpoint is not
            # (botocore's own backoff would take ~25 s to give up on it).
            config = Config(
                region_name=self.region,
                connect_timeout=5,
                read_timeout=30,
                retries={"total_max_attempts": 2, "mode": "standard"},
                s3={"addressing_style": "path"} if self.endpoint else None,
            )
            self._client = boto3.client("s3", endpoint_url=self.endpoint, config=config)
        return self._client

    def _fail(self, error: Exception, doing: str) -> ConfigError:
        """One line for what went wrong talking to S3."""
        from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

        where = f"s3://{self.bucket}" + (f" at {self.endpoint}" if self.endpoint else f" in {self.region}")
        if isinstance(error, NoCredentialsError):
            return ConfigError(f"{where}: no AWS credentials found (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
                               "or AWS_PROFILE)")
        if isinstance(error, EndpointConnectionError) or type(error).__name__ in (
            "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError"
        ):
            return ConfigError(f"{where}: endpoint unreachable while {doing} ({error})")
        if isinstance(error, ClientError):
            code = str(error.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchBucket"):
                return ConfigError(f"{where}: bucket {self.bucket!r} does not exist; create it first")
            if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                        "InvalidToken"):
                return ConfigError(f"{where}: access denied while {doing} ({code}): check the credentials and "
                                   "the bucket policy")
            if code in ("301", "PermanentRedirect", "AuthorizationHeaderMalformed"):
                return ConfigError(f"{where}: the bucket is not in region {self.region!r} ({code}); "
                                   "set --s3-region to the bucket's region")
            return ConfigError(f"{where}: S3 error while {doing}: {code or error}")
        return ConfigError(f"{where}: cannot reach S3 while {doing}: {type(error).__name__}: {error}")

    def _retrying(self, call: Callable[..., Any], **arguments) -> Any:
        """`call(**arguments)`, again after a throttled answer, up to --s3-max-attempts times in all (full-jitter
        exponential backoff, as AWS's clients do); any other error is raised at once."""
        from botocore.exceptions import ClientError

        attempts = self.max_attempts or DEFAULT_MAX_ATTEMPTS
        for attempt in range(1, attempts + 1):
            try:
                return call(**arguments)
            except ClientError as error:
                code = str(error.response.get("Error", {}).get("Code", ""))
                if code not in THROTTLING or attempt == attempts:
                    raise
                time.sleep(random.uniform(0, min(MAX_BACKOFF_S, 0.1 * 2 ** attempt)))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def check_access(self) -> None:
        try:
            self._retrying(self.client.head_bucket, Bucket=self.bucket)
        except Exception as error:  # every failure here is the user's setup: one line, no traceback
            raise self._fail(error, "checking the bucket") from None

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def _keys(self, prefix: str) -> list[tuple[str, int]]:
        """(key, size) of every object below `prefix/` (listed again from the start if throttled)."""
        def listing() -> list[tuple[str, int]]:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix + "/")
            return [(item["Key"], item["Size"]) for page in pages for item in page.get("Contents", [])]

        return self._retrying(listing)

    def _holds_objects(self, prefix: str) -> bool:
        answer = self._retrying(self.client.list_objects_v2, Bucket=self.bucket, Prefix=prefix + "/", MaxKeys=1)
        return bool(answer.get("Contents"))

    def create(self, run_dir: Path) -> str:
        for name in folder_names(run_dir):
            run_prefix = self._key(name)
            location = f"s3://{self.bucket}/{run_prefix}"
            try:
                if self._holds_objects(run_prefix):
                    continue  # another run's objects: never written over
                self._retrying(self.client.put_object, Bucket=self.bucket, Key=f"{run_prefix}/{OWNER_MARK}",
                               Body=mark_text(run_dir).encode())
            except Exception as error:
                raise self._fail(error, f"creating {location}") from None
            self.attach(location, run_dir)
            return location
        raise ConfigError(f"--save-dir {self.url}: s3://{self.bucket}/{self._key(run_dir.name)} and the other names "
                          "for this run's prefix already hold objects; ckpt-bench writes only to a prefix it creates")

    def attach(self, location: str, run_dir: Path) -> None:
        self._run_prefix, self.location, self._run_dir = _S3_URL.match(location).group("prefix"), location, run_dir

    def free_space(self) -> tuple[str, int] | None:
        return None  # a bucket has no free space to ask about

    def iteration_sizes(self) -> dict[int, int]:
        if self._run_prefix is None:
            return {}
        start = len(self._run_prefix) + 1
        return sizes_by_iteration((key[start:], size) for key, size in self._keys(self._run_prefix))

    def iteration_files(self, iteration: int) -> list[int]:
        return [size for _key, size in self._keys(f"{self._run_prefix}/{iter_dir_name(iteration)}")]

    def baseline(self, folder: str = BASELINE_FOLDER) -> Baseline:
        return PlainIOBaseline(S3Objects(self.describe(), self.bucket, f"{self._run_prefix}/{folder}",
                                         self._delete_below))

    def remove(self) -> bool:
        if self._run_prefix is None:
            return False
        from botocore.exceptions import ClientError

        try:
            answer = self._retrying(self.client.get_object, Bucket=self.bucket, Key=f"{self._run_prefix}/{OWNER_MARK}")
            mark = answer["Body"].read()
        except ClientError:
            return False  # no mark (not ours, or gone): leave it; an unreachable endpoint raises
        if mark.decode(errors="replace") != mark_text(self._run_dir):
            return False  # a mark, but another run's
        self._delete_below(self._run_prefix)
        return True

    def _delete_below(self, prefix: str) -> None:
        keys = [key for key, _size in self._keys(prefix)]
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = [{"Key": key} for key in keys[start:start + 1000]]
            self._retrying(self.client.delete_objects, Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})

    def worker_env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint} if self.endpoint else {}

    def diagnose(self) -> str | None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except Exception as error:  # whatever the client raises is the diagnosis
            return str(self._fail(error, "checking the bucket after the failure"))
        return None

    def describe(self) -> dict:
        return {
            "storage": self.kind,
            "s3_region": self.region,
            "s3_endpoint": self.endpoint,
            "s3_part_size": self.part_size,
            "s3_throughput_target_gbps": self.throughput_target_gbps,
            "s3_max_attempts": self.max_attempts,
            "s3_force_path_style": bool(self.endpoint),
        }
