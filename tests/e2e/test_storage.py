"""ckpt_bench.storage against a real S3 endpoint (moto on loopback) and the local disk; no ranks launched."""

import pytest

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.storage import OWNER_MARK, LocalStorage, S3Storage, StorageOptions, storage_for


def _s3(endpoint, url):
    return storage_for(url, StorageOptions(s3_region=endpoint.region, s3_endpoint=endpoint.url))


def test_s3_prefix_lifecycle(s3_endpoint, tmp_path):
    bucket = s3_endpoint.create_bucket()
    client = s3_endpoint.client()
    client.put_object(Bucket=bucket, Key="bench/not-ours.txt", Body=b"x")
    storage = _s3(s3_endpoint, f"s3://{bucket}/bench")
    assert isinstance(storage, S3Storage)
    storage.check_access()
    location = storage.create(tmp_path / "20250101-000000-run")
    assert location == f"s3://{bucket}/bench/20250101-000000-run"
    prefix = "bench/20250101-000000-run"
    client.put_object(Bucket=bucket, Key=f"{prefix}/iter_0000001/__0_0.distcp", Body=b"a" * 100)
    client.put_object(Bucket=bucket, Key=f"{prefix}/iter_0000001/.metadata", Body=b"m" * 10)
    client.put_object(Bucket=bucket, Key=f"{prefix}/iter_0000002/__0_0.distcp", Body=b"b" * 7)
    assert storage.iteration_sizes() == {1: 110, 2: 7}
    assert storage.worker_env() == {"AWS_ENDPOINT_URL": s3_endpoint.url}

    # The same name again takes the next free one: we only write where we created.
    again = _s3(s3_endpoint, f"s3://{bucket}/bench")
    assert again.create(tmp_path / "20250101-000000-run") == f"s3://{bucket}/bench/20250101-000000-run-2"
    assert again.remove()

    assert storage.remove()
    assert s3_endpoint.object_keys(bucket) == ["bench/not-ours.txt"]


def test_s3_remove_needs_our_mark(s3_endpoint, tmp_path):
    bucket = s3_endpoint.create_bucket()
    storage = _s3(s3_endpoint, f"s3://{bucket}")
    storage.create(tmp_path / "run")
    s3_endpoint.client().delete_object(Bucket=bucket, Key=f"run/{OWNER_MARK}")
    s3_endpoint.client().put_object(Bucket=bucket, Key="run/iter_0000001/x", Body=b"x")
    assert not storage.remove()
    assert s3_endpoint.object_keys(bucket) == ["run/iter_0000001/x"]


@pytest.mark.parametrize(
    "url,options,needle",
    [
        ("s3://no-such-bucket-here/p", {}, "bucket 'no-such-bucket-here' does not exist"),
        ("s3://b/p", {"s3_endpoint": "http://127.0.0.1:9"}, "endpoint unreachable"),
        ("s3://b/p", {"s3_part_size": 1024}, "--s3-part-size 1024"),
        ("gs://b/p", {}, "fsspec needs a package for gs://"),
    ],
)
def test_s3_setup_errors_are_one_line(s3_endpoint, url, options, needle):
    settings = StorageOptions(**{"s3_region": s3_endpoint.region, "s3_endpoint": s3_endpoint.url, **options})
    with pytest.raises(ConfigError) as raised:
        storage_for(url, settings).check_access()
    assert needle in str(raised.value) and "\n" not in str(raised.value)


def test_s3_needs_a_region(monkeypatch):
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    with pytest.raises(ConfigError, match="--s3-region"):
        storage_for("s3://bucket/prefix")


def test_local_storage(tmp_path):
    storage = storage_for(str(tmp_path / "ckpts"))
    assert isinstance(storage, LocalStorage)
    storage.check_access()
    location = storage.create(tmp_path / "runs" / "run-1")
    (tmp_path / "ckpts" / "run-1" / "iter_0000003").mkdir()
    (tmp_path / "ckpts" / "run-1" / "iter_0000003" / "a.distcp").write_bytes(b"z" * 42)
    assert location == str(tmp_path / "ckpts" / "run-1")
    assert storage.iteration_sizes() == {3: 42}
    assert storage.remove() and not (tmp_path / "ckpts" / "run-1").exists()
