"""ckpt_bench.storage's registry: which storage a --save-dir gets, and what its ranks write and read with."""

import importlib.util
import json

import pytest
import torch
import torch.distributed.checkpoint as dcp

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.storage import (
    SCHEMES,
    FsspecStorage,
    LocalStorage,
    S3Storage,
    StorageOptions,
    storage_for,
    worker_storage,
)
from ckpt_bench.storage.baseline import IOShape

OPTIONS = StorageOptions(s3_region="us-east-1")


@pytest.mark.parametrize(
    "save_dir,storage_class",
    [
        (None, LocalStorage),
        ("/data/ckpts", LocalStorage),
        ("relative/ckpts", LocalStorage),
        ("s3://bucket/prefix", S3Storage),
        ("gs://bucket/prefix", FsspecStorage),
        ("az://container/prefix", FsspecStorage),
        ("file:///data/ckpts", FsspecStorage),
        ("memory://ckpts", FsspecStorage),
    ],
)
def test_the_scheme_picks_the_storage_and_its_ranks_side(save_dir, storage_class):
    storage = storage_for(save_dir, OPTIONS)
    assert type(storage) is storage_class
    description = storage.describe()
    assert description["storage"] == storage_class.kind
    assert json.loads(json.dumps(description)) == description  # it travels in worker.json
    assert type(worker_storage(description)) is storage_class.worker


def test_kinds_are_unique_and_options_are_optional(tmp_path):
    kinds = [storage.kind for storage in (*SCHEMES.values(), FsspecStorage)]
    assert len(kinds) == len(set(kinds))
    assert type(storage_for(tmp_path)) is LocalStorage  # a Path works too
    assert type(storage_for("file:///data")) is FsspecStorage


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="gcsfs is installed here")
def test_a_missing_fsspec_package_is_named_in_one_line():
    with pytest.raises(ConfigError) as raised:
        storage_for("gs://bucket/ckpts").check_access()
    message = str(raised.value)
    assert message.startswith("--save-dir gs://bucket/ckpts: fsspec needs a package for gs://")
    assert "gcsfs" in message and "\n" not in message


def test_an_unknown_scheme_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^--save-dir nope://x: .*nope"):
        storage_for("nope://x").check_access()


def test_storage_options_are_the_s3_and_msc_flags():
    flags = StorageOptions.flags()
    assert [flag.canonical for flag in flags.values()] == [
        "--s3-region", "--s3-endpoint", "--s3-part-size", "--s3-throughput-target-gbps", "--s3-max-attempts",
        "--msc-config"]
    assert (flags["s3_part_size"].type, flags["s3_part_size"].min, flags["s3_throughput_target_gbps"].type) == (
        int, 1, float)
    assert StorageOptions.section == "Object storage (--save-dir s3://... or msc://...)"
    assert StorageOptions.from_values({"s3_part_size": 8 << 20}).values() == {
        "s3_region": None, "s3_endpoint": None, "s3_part_size": 8 << 20, "s3_throughput_target_gbps": None,
        "s3_max_attempts": None, "msc_config": None}


@pytest.mark.parametrize(
    "url,options,needle",
    [
        ("s3://", {}, "--save-dir s3://: not an S3 URL (expected s3://bucket/prefix)"),
        ("s3://b/p", {"s3_part_size": 1024}, "--s3-part-size 1024: S3 parts must be at least 5 MiB (5242880)"),
        ("s3://b/p", {"s3_throughput_target_gbps": 0.0}, "--s3-throughput-target-gbps 0.0: must be positive"),
        ("s3://b/p", {"s3_endpoint": "127.0.0.1:9000"}, "--s3-endpoint 127.0.0.1:9000: expected a URL"),
    ],
)
def test_s3_settings_are_checked_before_any_io(url, options, needle):
    with pytest.raises(ConfigError) as raised:
        storage_for(url, StorageOptions(s3_region="us-east-1", **options))
    assert needle in str(raised.value)


def test_s3_ranks_get_the_client_settings(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    storage = storage_for("s3://bucket/p", StorageOptions(s3_region="eu-west-1", s3_endpoint="http://127.0.0.1:9000",
                                                          s3_part_size=8 << 20, s3_max_attempts=2))
    assert storage.describe() == {"storage": "s3", "s3_region": "eu-west-1", "s3_endpoint": "http://127.0.0.1:9000",
                                  "s3_part_size": 8 << 20, "s3_throughput_target_gbps": None, "s3_max_attempts": 2,
                                  "s3_force_path_style": True}
    assert storage.worker_env() == {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}
    ranks = worker_storage(storage.describe())
    assert ranks.client_config().part_size == 8 << 20 and ranks.client_config().force_path_style
    assert ranks.client_config().max_attempts == 2
    assert ranks.local_path("s3://bucket/p/run/iter_0000001") is None


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # one process, no group: DCP says so
@pytest.mark.parametrize("scheme", ["path", "file", "memory"])
def test_dcp_round_trip_through_the_storage(tmp_path, scheme):
    """What a DCP rank does, in one process: the writer and reader come from the storage's description."""
    save_dir = {"path": str(tmp_path / "ckpts"), "file": f"file://{tmp_path}/ckpts",
                "memory": f"memory://{tmp_path.name}/ckpts"}[scheme]
    storage = storage_for(save_dir)
    location = storage.create(tmp_path / "run-1")
    ranks = worker_storage(storage.describe())
    path = f"{location}/iter_0000001"
    saved = {"weight": torch.arange(12.0).reshape(3, 4), "step": torch.tensor(7)}
    dcp.save(saved, storage_writer=ranks.dcp_writer(path, thread_count=2, sync_files=False))
    loaded = {name: torch.zeros_like(tensor) for name, tensor in saved.items()}
    dcp.load(loaded, storage_reader=ranks.dcp_reader(path))
    assert all(torch.equal(loaded[name], saved[name]) for name in saved)
    assert ranks.local_path(path) == {"path": path, "file": f"{tmp_path}/ckpts/run-1/iter_0000001",
                                      "memory": None}[scheme]
    assert storage.iteration_sizes()[1] > 0
    # The storage baseline copies that checkpoint's shape below the run's folder, then removes its copy.
    files = storage.iteration_files(1)
    assert len(files) == 3 and sum(files) == storage.iteration_sizes()[1]  # 2 writer threads + .metadata
    measured = storage.baseline().measure(IOShape.of(files, concurrency=2, fsync=scheme != "memory"))
    assert abs(measured["bytes"] - sum(files)) <= 3 and measured["read_bandwidth"] > 0  # fio: the mean size
    assert storage.iteration_files(1) == files and set(storage.iteration_sizes()) == {1}
    assert storage.remove()


def test_lightning_writes_paths_and_fsspec_urls_with_its_own_io(tmp_path):
    from lightning.pytorch.plugins.io import TorchCheckpointIO

    for save_dir in (str(tmp_path), f"file://{tmp_path}"):
        checkpoint_io = worker_storage(storage_for(save_dir).describe()).lightning_checkpoint_io()
        assert type(checkpoint_io) is TorchCheckpointIO


@pytest.mark.parametrize("url", ["{dir}/plain", "file://{dir}/fsspec"])
def test_plain_file_writers_and_readers_round_trip_a_torch_save(tmp_path, url):
    """What the workload backend's torch-save engine writes through: a file per `torch.save`, its parent made,
    fsynced on this host's disk; read back seekable for `torch.load`."""
    location = url.format(dir=tmp_path)
    storage = worker_storage(storage_for(location).describe())
    state = {"0": {"1": torch.arange(10, dtype=torch.float16)}}
    with storage.file_writer(f"{location}/iter_0000001/model.pt", sync_files=True) as stream:
        torch.save(state, stream)
    with storage.file_reader(f"{location}/iter_0000001/model.pt") as stream:
        loaded = torch.load(stream, weights_only=True)
    assert torch.equal(loaded["0"]["1"], state["0"]["1"])
