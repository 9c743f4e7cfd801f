"""`--save-dir msc://PROFILE/PATH`: NVIDIA's multi-storage-client (MSC), the way megatron-core and Megatron-LM
reach object storage (`msc://` paths in `--save`/`--load`, `MSC_CONFIG` naming the profiles).

The profiles come from `--msc-config FILE`, else the `MSC_CONFIG` file, else one written into the run directory
from the S3 options, in which the profile names the bucket: `msc://bench/ckpt` is bucket `bench`, prefix `ckpt`,
at `--s3-endpoint` (or AWS_ENDPOINT_URL) in `--s3-region` (or AWS_REGION), with the AWS credentials of the
environment. The ranks get the file as `MSC_CONFIG`.

Both sides go through MSC itself, whatever the profile's provider is (S3, a POSIX folder, GCS, ...): the launcher
checks, marks, lists, measures and removes with an MSC `StorageClient`; the ranks write and read with MSC's own
classes (`msc.open`, its DCP `MultiStorageFileSystemWriter/Reader`). A profile of a POSIX folder is this host's disk
for the page-cache eviction of a cold load. Needs the `multistorageclient` package (`pip install '.[msc]'`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from ckpt_bench.core.checkpoint_dir import evict_from_page_cache, iter_dir_name, sizes_by_iteration
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.options import Flag, Options
from ckpt_bench.storage.base import BASELINE_FOLDER, OWNER_MARK, folder_names, mark_text
from ckpt_bench.storage.baseline import Baseline, PlainIOBaseline, pieces, read_to_end
from ckpt_bench.storage.s3 import region_and_endpoint

_MSC_URL = re.compile(r"^msc://(?P<profile>[^/]+)/?(?P<path>.*)$")
# The MSC configuration written for a run whose profile is generated from the S3 options (in its run directory).
GENERATED_CONFIG = "msc_config.yaml"
INSTALL_HINT = "pip install multi-storage-client (or ckpt-bench's extra: pip install -e '.[msc]')"

MSC_CONFIG = Flag(("--msc-config",), "MSC configuration file (its `profiles`) for an msc://PROFILE/PATH save dir "
                  "(default: MSC_CONFIG; without either, profile PROFILE is the S3 bucket PROFILE at "
                  "--s3-endpoint in --s3-region).")


@dataclass
class MscOptions(Options):
    """Where an msc:// save dir's profiles come from."""

    msc_config: str | None = MSC_CONFIG.field(None)


def msc_available() -> bool:
    """Whether the `multistorageclient` package imports here (megatron-core 0.16.1 turns MSC on when it does)."""
    import importlib.util

    return importlib.util.find_spec("multistorageclient") is not None


def _read_config(path: str, source: str) -> dict:
    try:
        text = Path(path).read_text()
        config = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as error:
        raise ConfigError(f"{source} {path}: not a readable MSC configuration ({error})") from None
    if not isinstance(config, dict) or not isinstance(config.get("profiles"), dict):
        raise ConfigError(f"{source} {path}: an MSC configuration needs a `profiles` mapping")
    return config


def _client(config: dict, profile: str):
    from multistorageclient import StorageClient, StorageClientConfig

    return StorageClient(StorageClientConfig.from_dict(config, profile=profile))


class MscWorkerStorage:
    """MSC's own writers and readers; the ranks find the profiles in `MSC_CONFIG` (`MscStorage.worker_env`)."""

    def __init__(self, description: dict) -> None:
        self.settings = description

    def dcp_writer(self, path: str, thread_count: int, sync_files: bool):
        from multistorageclient.contrib.torch import MultiStorageFileSystemWriter

        return MultiStorageFileSystemWriter(path, sync_files=sync_files, thread_count=thread_count)

    def dcp_reader(self, path: str):
        from multistorageclient.contrib.torch import MultiStorageFileSystemReader

        return MultiStorageFileSystemReader(path)

    def lightning_checkpoint_io(self):
        from lightning.pytorch.plugins.io import TorchCheckpointIO

        return TorchCheckpointIO()  # opens msc:// through fsspec, whose `msc` protocol MSC registers

    def file_writer(self, path: str, sync_files: bool):
        """`sync_files`: MSC's POSIX files are renamed into place when closed, its objects durable once uploaded."""
        import multistorageclient as msc

        return msc.open(path, "wb")

    def file_reader(self, path: str):
        import multistorageclient as msc

        return msc.open(path, "rb")

    def local_path(self, path: str) -> str | None:
        """The folder on this host's disk where the profile is a POSIX folder; None for an object store."""
        if self.settings.get("msc_provider") != "file":
            return None
        match = _MSC_URL.match(path)
        config = self.settings.get("msc_config") or os.environ.get("MSC_CONFIG")
        if match is None or config is None:
            return None
        return _client(_read_config(config, "MSC_CONFIG"), match["profile"]).get_posix_path(match["path"])


class MscObjects:
    """Plain objects through the run's MSC profile, nothing on top: a `PlainIO` for the storage baseline."""

    tool = "built-in (multi-storage-client StorageClient open/write/read)"

    def __init__(self, storage: MscStorage, prefix: str):
        self.storage, self.prefix = storage, prefix
        self.location = f"msc://{storage.profile}/{prefix}"

    def write(self, name: str, size: int, fsync: bool, block: memoryview) -> None:
        with self.storage.client.open(f"{self.prefix}/{name}", "wb") as handle:
            for piece in pieces(block, size):
                handle.write(piece)

    def read(self, name: str) -> int:
        with self.storage.client.open(f"{self.prefix}/{name}", "rb") as handle:
            return read_to_end(handle)

    def drop_cache(self) -> None:
        local = self.storage.client.get_posix_path(self.prefix)
        if local is not None:
            evict_from_page_cache(local)

    def remove(self) -> None:
        self.storage.delete_below(self.prefix)


class MscStorage:
    """`msc://PROFILE/PATH/<run-name>/`, reached through MSC on both sides."""

    kind = "msc"
    worker = MscWorkerStorage

    def __init__(self, save_dir: str, options: Any = None):
        match = _MSC_URL.match(save_dir)
        if not match:
            raise ConfigError(f"--save-dir {save_dir}: not an MSC URL (expected msc://PROFILE/PATH)")
        self.url, self.profile, self.path = save_dir, match["profile"], match["path"].strip("/")
        config_file = getattr(options, "msc_config", None)
        source = "--msc-config"
        if config_file is None and os.environ.get("MSC_CONFIG"):
            config_file, source = os.environ["MSC_CONFIG"], "MSC_CONFIG"
        self.region = self.endpoint = None
        if config_file is not None:
            self.config_file: str | None = os.path.abspath(config_file)
            self.config = _read_config(self.config_file, source)
            if self.profile not in self.config["profiles"]:
                raise ConfigError(f"--save-dir {save_dir}: {source} {config_file} has no profile {self.profile!r} "
                                  f"(it has {', '.join(sorted(self.config['profiles'])) or 'none'})")
        else:
            self.config_file = None  # written into the run directory by `create`
            self.region, self.endpoint = region_and_endpoint(
                getattr(options, "s3_region", None), getattr(options, "s3_endpoint", None),
                f"--save-dir {save_dir}: give the MSC profiles (--msc-config FILE or MSC_CONFIG), or --s3-region "
                f"(and --s3-endpoint) to reach bucket {self.profile!r} as profile {self.profile!r}")
            provider = {"base_path": self.profile, "region_name": self.region}
            if self.endpoint:
                provider["endpoint_url"] = self.endpoint
            self.config = {"profiles": {self.profile: {"storage_provider": {"type": "s3", "options": provider}}}}
        self.provider = self.config["profiles"][self.profile].get("storage_provider", {}).get("type")
        self.location: str | None = None
        self._run_path: str | None = None
        self._run_dir: Path | None = None

    @cached_property
    def client(self):
        return _client(self.config, self.profile)

    def _fail(self, error: Exception, doing: str) -> ConfigError:
        text = " ".join(str(error).split())[:300] or type(error).__name__
        return ConfigError(f"msc://{self.profile} ({self.provider}): {type(error).__name__} while {doing}: {text}")

    def check_access(self) -> None:
        if not msc_available():
            raise ConfigError(f"--save-dir {self.url}: msc:// needs the multistorageclient package: {INSTALL_HINT}")
        try:
            self.client.is_empty(self.path)
        except Exception as error:  # every failure here is the user's setup: one line, no traceback
            raise self._fail(error, "checking the profile") from None

    def _join(self, *parts: str) -> str:
        return "/".join(part for part in (self.path, *parts) if part)

    def create(self, run_dir: Path) -> str:
        if self.config_file is None:
            self.config_file = str(run_dir / GENERATED_CONFIG)
            Path(self.config_file).write_text(yaml.safe_dump(self.config, sort_keys=False))
        for name in folder_names(run_dir):
            run_path = self._join(name)
            try:
                if not self.client.is_empty(run_path + "/"):
                    continue  # another run's objects: never written over
                self.client.write(f"{run_path}/{OWNER_MARK}", mark_text(run_dir).encode())
            except Exception as error:
                raise self._fail(error, f"creating msc://{self.profile}/{run_path}") from None
            self.attach(f"msc://{self.profile}/{run_path}", run_dir)
            return self.location
        raise ConfigError(f"--save-dir {self.url}: msc://{self.profile}/{self._join(run_dir.name)} and the other "
                          "names for this run's folder already hold objects; ckpt-bench writes only to one it creates")

    def attach(self, location: str, run_dir: Path) -> None:
        self._run_path, self.location, self._run_dir = _MSC_URL.match(location)["path"], location, run_dir

    def free_space(self) -> tuple[str, int] | None:
        local = self.client.get_posix_path(self.path) if self.provider == "file" else None
        if local is None or not os.path.isdir(local):
            return None  # an object store has no free space to ask about
        import shutil

        return local, shutil.disk_usage(local).free

    def _files(self, path: str) -> list[tuple[str, int]]:
        """(path relative to `path`, size) of every object below `path/`."""
        start = len(path) + 1
        return [(item.key[start:] if item.key.startswith(path + "/") else item.key, item.content_length)
                for item in self.client.list(path=path + "/")]

    def iteration_sizes(self) -> dict[int, int]:
        return {} if self._run_path is None else sizes_by_iteration(self._files(self._run_path))

    def iteration_files(self, iteration: int) -> list[int]:
        return [size for _name, size in self._files(f"{self._run_path}/{iter_dir_name(iteration)}")]

    def baseline(self, folder: str = BASELINE_FOLDER) -> Baseline:
        return PlainIOBaseline(MscObjects(self, f"{self._run_path}/{folder}"))

    def remove(self) -> bool:
        if self._run_path is None:
            return False
        try:
            mark = self.client.read(f"{self._run_path}/{OWNER_MARK}")
        except FileNotFoundError:
            return False  # no mark (not ours, or gone): leave it
        if bytes(mark).decode(errors="replace") != mark_text(self._run_dir):
            return False  # a mark, but another run's
        self.delete_below(self._run_path)
        return True

    def delete_below(self, path: str) -> None:
        names = [f"{path}/{name}" for name, _size in self._files(path)]
        if names:
            self.client.delete_many(names)

    def worker_env(self) -> dict[str, str]:
        return {"MSC_CONFIG": self.config_file} if self.config_file else {}

    def diagnose(self) -> str | None:
        try:
            self.client.is_empty(self.path)
        except Exception as error:  # whatever the client raises is the diagnosis
            return str(self._fail(error, "checking the profile after the failure"))
        return None

    def describe(self) -> dict:
        return {"storage": self.kind, "msc_config": self.config_file, "msc_profile": self.profile,
                "msc_provider": self.provider, "s3_region": self.region, "s3_endpoint": self.endpoint}
