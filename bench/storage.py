"""Where checkpoints go: a local folder or an S3 prefix, behind one small protocol.

The launcher needs exactly five things from a storage, whatever it is:

* `check_access()` -- fail *before* anything is created or timed, with one line the user can act on
  (a missing bucket, bad credentials, an unreachable endpoint, an unwritable folder);
* `create(run_dir)` -- a fresh folder/prefix for this run, marked as ours (`OWNER_MARK`), so that
  nothing we did not create is ever written over or deleted;
* `iteration_sizes()` -- bytes per saved iteration (`iter_NNNNNNN/`), from what was *written*
  (file sizes, S3 object sizes): bandwidth is never computed from a parameter count;
* `remove()` -- delete the run's checkpoints, only if they carry our mark;
* `worker_env()` -- what the ranks' environment needs to reach the storage (e.g. `AWS_ENDPOINT_URL`:
  s3torchconnector's native client reads the endpoint from there, its DCP classes take none).

    storage = storage_for(save_dir, settings.options)   # no I/O yet
    storage.check_access()
    location = storage.create(run.path)                 # "<save_dir>/<run-name>" or "s3://b/p/<run-name>"
    ... ranks write <location>/iter_0000001/ ...
    sizes = storage.iteration_sizes()
    storage.remove()
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Protocol

from bench.checkpoint_dir import ITER_DIR, iteration_folder_sizes
from bench.config import ConfigError

# Written into every checkpoint folder/prefix we create: we delete one only if it carries our mark.
OWNER_MARK = ".ckpt-bench-owned"

_S3_URL = re.compile(r"^s3://(?P<bucket>[^/]+)/?(?P<prefix>.*)$")


class CheckpointStorage(Protocol):
    """The whole of what the launcher needs from a place that holds checkpoints."""

    kind: str  # "disk" | "s3": recorded in the report
    location: str | None  # this run's folder or s3:// prefix, once `create` has made it

    def check_access(self) -> None:
        """Raise ConfigError (one line) if the storage cannot be used; creates nothing."""
        ...

    def create(self, run_dir: Path) -> str:
        """Make this run's fresh folder/prefix, marked as ours, and return its location."""
        ...

    def iteration_sizes(self) -> dict[int, int]:
        """iteration -> bytes written below `<location>/iter_NNNNNNN/`."""
        ...

    def remove(self) -> bool:
        """Delete this run's checkpoints if we created them; True if something was removed."""
        ...

    def worker_env(self) -> dict[str, str]:
        """Environment variables the ranks need to reach the storage."""
        ...

    def describe(self) -> dict:
        """The storage settings, for the report."""
        ...


def storage_for(save_dir: str | os.PathLike | None, options: dict | None = None) -> CheckpointStorage:
    """The storage for `--save-dir` (None: a folder inside the run directory); no I/O happens here."""
    options = options or {}
    text = None if save_dir is None else os.fspath(save_dir)
    if text is not None and text.startswith("s3://"):
        return S3Storage.from_options(text, options)
    if text is not None and "://" in text:
        scheme = text.split("://", 1)[0]
        raise ConfigError(f"--save-dir {text}: storage scheme {scheme!r} is not supported (use a local path or s3://)")
    return LocalStorage(text)


# --- local disk ---------------------------------------------------------------------------------


def check_writable(parent: str | None) -> None:
    """Refuse an unwritable save dir before creating anything."""
    if parent is None or "://" in parent:
        return
    probe = Path(parent)
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"--save-dir {parent}: not writable ({probe} is not a writable directory)")


def remove_checkpoints(path: Path) -> bool:
    """Delete a checkpoint folder only if this tool created it (it carries OWNER_MARK)."""
    if not (path / OWNER_MARK).is_file():
        return False
    shutil.rmtree(path)
    return True


class LocalStorage:
    """`<save_dir>/<run-name>/` on a filesystem, or `<run-dir>/checkpoints/` without a save dir."""

    kind = "disk"

    def __init__(self, parent: str | None):
        self.parent = parent
        self.location: str | None = None

    def check_access(self) -> None:
        check_writable(self.parent)

    def create(self, run_dir: Path) -> str:
        target = run_dir / "checkpoints" if self.parent is None else Path(self.parent) / run_dir.name
        try:
            target.mkdir(parents=True, exist_ok=False)
            (target / OWNER_MARK).write_text(f"created by ckpt-bench for {run_dir}\n")
        except FileExistsError:
            raise ConfigError(f"--save-dir {self.parent}: {target} already exists; ckpt-bench writes only to a "
                              "folder it creates") from None
        except OSError as error:
            raise ConfigError(f"--save-dir {self.parent or run_dir}: cannot write there ({error.strerror})") from None
        self.location = str(target)
        return self.location

    def iteration_sizes(self) -> dict[int, int]:
        return iteration_folder_sizes(self.location) if self.location else {}

    def remove(self) -> bool:
        return bool(self.location) and remove_checkpoints(Path(self.location))

    def worker_env(self) -> dict[str, str]:
        return {}

    def describe(self) -> dict:
        return {"storage": self.kind}


# --- S3 -----------------------------------------------------------------------------------------


def s3_client_config(settings: dict):
    """s3torchconnector's `S3ClientConfig` from `S3Storage.describe()` (called in the ranks)."""
    from s3torchconnector import S3ClientConfig

    kwargs = {"force_path_style": bool(settings.get("s3_force_path_style"))}
    if settings.get("s3_part_size"):
        kwargs["part_size"] = int(settings["s3_part_size"])
    if settings.get("s3_throughput_target_gbps"):
        kwargs["throughput_target_gbps"] = float(settings["s3_throughput_target_gbps"])
    return S3ClientConfig(**kwargs)


class S3Storage:
    """`s3://bucket/prefix/<run-name>/`, reached like AWS would be (boto3 here, the native client in ranks).

    The launcher side uses boto3 for the up-front checks, the owner mark, object sizes and deletion;
    the ranks write through s3torchconnector. Both read the same endpoint: `--s3-endpoint`, else
    `AWS_ENDPOINT_URL`. With an explicit endpoint, path-style addressing is used (a hostname such
    as `localhost` cannot carry a bucket as a subdomain).
    """

    kind = "s3"
    MIN_PART_SIZE = 5 * 1024 * 1024  # the S3 limit for multipart parts (s3torchconnector enforces it too)

    def __init__(self, url: str, region: str, endpoint: str | None = None, part_size: int | None = None,
                 throughput_target_gbps: float | None = None):
        match = _S3_URL.match(url)
        if not match or not match.group("bucket"):
            raise ConfigError(f"--save-dir {url}: not an S3 URL (expected s3://bucket/prefix)")
        self.url = url
        self.bucket = match.group("bucket")
        self.prefix = match.group("prefix").strip("/")
        self.region = region
        self.endpoint = endpoint
        self.part_size = part_size
        self.throughput_target_gbps = throughput_target_gbps
        self.location: str | None = None
        self._run_prefix: str | None = None
        self._client = None

    @classmethod
    def from_options(cls, url: str, options: dict) -> S3Storage:
        region = options.get("s3_region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if not region:
            raise ConfigError(f"--save-dir {url}: an S3 save dir needs --s3-region (or AWS_REGION)")
        endpoint = options.get("s3_endpoint") or os.environ.get("AWS_ENDPOINT_URL") or None
        if endpoint and not re.match(r"^https?://[^/]+", endpoint):
            raise ConfigError(f"--s3-endpoint {endpoint}: expected a URL such as http://127.0.0.1:9000")
        part_size = options.get("s3_part_size")
        if part_size is not None and part_size < cls.MIN_PART_SIZE:
            raise ConfigError(f"--s3-part-size {part_size}: S3 parts must be at least 5 MiB ({cls.MIN_PART_SIZE})")
        throughput = options.get("s3_throughput_target_gbps")
        if throughput is not None and throughput <= 0:
            raise ConfigError(f"--s3-throughput-target-gbps {throughput}: must be positive")
        return cls(url, region, endpoint, part_size, throughput)

    # boto3 is imported lazily: local runs never need it.
    @property
    def client(self):
        if self._client is None:
            import boto3
            from botocore.config import Config

            config = Config(
                region_name=self.region,
                connect_timeout=5,
                read_timeout=30,
                retries={"max_attempts": 2, "mode": "standard"},
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

    def check_access(self) -> None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except Exception as error:  # every failure here is the user's setup: one line, no traceback
            raise self._fail(error, "checking the bucket") from None

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def _keys(self, prefix: str):
        """(key, size) of every object below `prefix/`."""
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix + "/"):
            for item in page.get("Contents", []):
                yield item["Key"], item["Size"]

    def create(self, run_dir: Path) -> str:
        run_prefix = self._key(run_dir.name)
        location = f"s3://{self.bucket}/{run_prefix}"
        try:
            if next(iter(self._keys(run_prefix)), None) is not None:
                raise ConfigError(f"--save-dir {self.url}: {location} already holds objects; ckpt-bench writes "
                                  "only to a prefix it creates")
            self.client.put_object(Bucket=self.bucket, Key=f"{run_prefix}/{OWNER_MARK}",
                                   Body=f"created by ckpt-bench for {run_dir}\n".encode())
        except ConfigError:
            raise
        except Exception as error:
            raise self._fail(error, f"creating {location}") from None
        self._run_prefix, self.location = run_prefix, location
        return location

    def iteration_sizes(self) -> dict[int, int]:
        sizes: dict[int, int] = {}
        if self._run_prefix is None:
            return sizes
        for key, size in self._keys(self._run_prefix):
            folder, inside, _name = key[len(self._run_prefix) + 1:].partition("/")
            match = ITER_DIR.match(folder)
            if match and inside:
                iteration = int(match.group(1))
                sizes[iteration] = sizes.get(iteration, 0) + size
        return sizes

    def remove(self) -> bool:
        if self._run_prefix is None:
            return False
        try:
            self.client.head_object(Bucket=self.bucket, Key=f"{self._run_prefix}/{OWNER_MARK}")
        except Exception:
            return False  # not ours (or gone): leave it
        keys = [key for key, _size in self._keys(self._run_prefix)]
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = [{"Key": key} for key in keys[start:start + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
        return True

    def worker_env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint} if self.endpoint else {}

    def describe(self) -> dict:
        return {
            "storage": self.kind,
            "s3_region": self.region,
            "s3_endpoint": self.endpoint,
            "s3_part_size": self.part_size,
            "s3_throughput_target_gbps": self.throughput_target_gbps,
            "s3_force_path_style": bool(self.endpoint),
        }


# --- any other fsspec filesystem (gs://, az://, file://, ...) -----------------------------------


class FsspecStorage:
    """`<url>/<run-name>/` on a filesystem fsspec knows (gcsfs for gs://, adlfs for az://, ...).

    Not picked by `storage_for`: only a backend whose ranks write through fsspec themselves (Lightning's
    TorchCheckpointIO) puts one in its plan. The filesystem package must be installed; sizes come from
    the files listed after the run, removal only below a prefix that carries our mark.
    """

    kind = "fsspec"

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.protocol = url.split("://", 1)[0]
        self.location: str | None = None
        self._fs = None
        self._root: str | None = None  # `location` as the filesystem names it (no protocol)

    @property
    def fs(self):
        if self._fs is None:
            self._fs = self._split(self.url)[0]
        return self._fs

    def _split(self, url: str):
        """(filesystem, path as the filesystem names it) for a URL."""
        import fsspec

        try:
            return fsspec.core.url_to_fs(url)
        except ImportError as error:
            raise ConfigError(f"--save-dir {self.url}: fsspec needs a package for {self.protocol}:// "
                              f"({str(error).strip().splitlines()[0]})") from None
        except ValueError as error:
            raise ConfigError(f"--save-dir {self.url}: {error}") from None

    def check_access(self) -> None:
        """The save dir, or the nearest folder above it, must exist (a missing bucket fails here)."""
        path = self._split(self.url)[1].rstrip("/")
        try:
            while path and not self.fs.exists(path):
                path = path.rsplit("/", 1)[0] if "/" in path.strip("/") else ""
        except Exception as error:
            raise ConfigError(f"--save-dir {self.url}: cannot reach it ({type(error).__name__}: {error})") from None
        if not path:
            raise ConfigError(f"--save-dir {self.url}: nothing exists there or above it (a missing bucket?)")

    def create(self, run_dir: Path) -> str:
        location = f"{self.url}/{run_dir.name}"
        root = self._split(location)[1]
        try:
            if self.fs.exists(root):
                raise ConfigError(f"--save-dir {self.url}: {location} already exists; ckpt-bench writes only to a "
                                  "folder it creates")
            self.fs.makedirs(root, exist_ok=True)
            self.fs.pipe(f"{root}/{OWNER_MARK}", f"created by ckpt-bench for {run_dir}\n".encode())
        except ConfigError:
            raise
        except Exception as error:
            raise ConfigError(f"--save-dir {self.url}: cannot write {location} ({type(error).__name__}: "
                              f"{error})") from None
        self._root, self.location = root, location
        return location

    def iteration_sizes(self) -> dict[int, int]:
        sizes: dict[int, int] = {}
        if self._root is None:
            return sizes
        for path, info in self.fs.find(self._root, detail=True).items():
            folder, inside, _name = path[len(self._root.rstrip("/")) + 1:].partition("/")
            match = ITER_DIR.match(folder)
            if match and inside and info.get("type", "file") == "file":
                iteration = int(match.group(1))
                sizes[iteration] = sizes.get(iteration, 0) + int(info.get("size") or 0)
        return sizes

    def remove(self) -> bool:
        if self._root is None or not self.fs.exists(f"{self._root}/{OWNER_MARK}"):
            return False
        self.fs.rm(self._root, recursive=True)
        return True

    def worker_env(self) -> dict[str, str]:
        return {}

    def describe(self) -> dict:
        return {"storage": self.kind, "fsspec_protocol": self.protocol}
