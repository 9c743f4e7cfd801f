"""Where checkpoints go, chosen by the scheme of `--save-dir` from one registry.

    a path              LocalStorage    (ckpt_bench.storage.local)
    s3://bucket/prefix  S3Storage       (ckpt_bench.storage.s3: boto3 here, s3torchconnector in the ranks)
    msc://profile/path  MscStorage      (ckpt_bench.storage.msc: NVIDIA's multi-storage-client on both sides)
    any other URL       FsspecStorage   (ckpt_bench.storage.fsspec: gs://, az://, file://, memory://, ...)

The launcher needs five things from a storage, whatever it is (`CheckpointStorage`):

* `check_access()` -- fail *before* anything is created or timed, with one line the user can act on
  (a missing bucket, bad credentials, an unreachable endpoint, an unwritable folder, a missing package);
* `create(run_dir)` -- a fresh folder/prefix for this run, marked as ours (`OWNER_MARK`), so that
  nothing we did not create is ever written over or deleted;
* `iteration_sizes()` -- bytes per saved iteration (`iter_NNNNNNN/`), from what was *written*
  (file sizes, object sizes): bandwidth is never computed from a parameter count;
* `remove()` -- delete the run's checkpoints, only if they carry our mark naming this run;
* `attach(location, run_dir)` / `reopen` -- the folder an earlier process made (a sweep's killed
  attempt), so that it can be removed under the same rule;
* `free_space()` -- room where the checkpoints go, where the storage can tell;
* `worker_env()` / `describe()` -- what the ranks need to reach it: environment variables (e.g.
  `AWS_ENDPOINT_URL`) and a JSON description the worker spec carries.

A rank turns that description back into its writers and readers (`WorkerStorage`), so no backend
branches on the scheme:

    storage = storage_for(save_dir, config)        # launcher; no I/O yet
    storage.check_access()
    location = storage.create(run.path)            # "<save_dir>/<run-name>", "s3://b/p/<run-name>", ...
    spec["dcp"]["storage"] = storage.describe()
    ...
    io = worker_storage(spec["dcp"]["storage"])    # rank
    dcp.save(state, storage_writer=io.dcp_writer(f"{location}/iter_0000001", thread_count=1, sync_files=True))
    ...
    sizes = storage.iteration_sizes()              # launcher
    storage.remove()

A new scheme is one module here (its CheckpointStorage and WorkerStorage) and one line in `SCHEMES`;
its options, if any, join `StorageOptions`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckpt_bench.storage.base import OWNER_MARK, CheckpointStorage, WorkerStorage
from ckpt_bench.storage.fsspec import FsspecStorage
from ckpt_bench.storage.local import LocalStorage, check_writable
from ckpt_bench.storage.msc import MscOptions, MscStorage
from ckpt_bench.storage.s3 import S3Options, S3Storage

__all__ = [
    "OWNER_MARK", "CheckpointStorage", "FsspecStorage", "LocalStorage", "MscStorage", "S3Storage", "StorageOptions",
    "WorkerStorage", "check_writable", "reopen", "storage_for", "worker_storage",
]


@dataclass
class StorageOptions(MscOptions, S3Options):
    """The options of every scheme: the dataclass each checkpoint-writing runner's config inherits from."""

    section = "Object storage (--save-dir s3://... or msc://...)"


# URL scheme -> storage ("" is a plain path); a scheme not listed is reached through fsspec.
SCHEMES: dict[str, type[CheckpointStorage]] = {
    "": LocalStorage,
    "s3": S3Storage,
    "msc": MscStorage,
}
FALLBACK: type[CheckpointStorage] = FsspecStorage


def storage_for(save_dir: str | os.PathLike | None, options: Any = None) -> CheckpointStorage:
    """The storage for `--save-dir` (None: a folder inside the run directory), with `options` an object
    holding `StorageOptions`' fields (a runner's config) or None; validates them, does no I/O."""
    text = None if save_dir is None else os.fspath(save_dir)
    scheme = text.split("://", 1)[0] if text is not None and "://" in text else ""
    return SCHEMES.get(scheme, FALLBACK)(text, options)


def worker_storage(description: dict) -> WorkerStorage:
    """In a rank: how to write and read the storage that `describe()` returned in the launcher."""
    by_kind = {storage.kind: storage for storage in (*SCHEMES.values(), FALLBACK)}
    return by_kind[description["storage"]].worker(description)


def reopen(location: str, description: dict, run_dir: Path) -> CheckpointStorage:
    """The checkpoint folder an earlier process made for the run in `run_dir` (run.json's `checkpoint_dir`
    and `storage`: the settings `describe()` gave), attached: `remove()` then deletes it only if its mark
    proves it is that run's."""
    settings = {name: description[name] for name in StorageOptions.flags() if description.get(name) is not None}
    storage = storage_for(location, StorageOptions(**settings))
    storage.attach(location, run_dir)
    return storage
