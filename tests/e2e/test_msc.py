"""`--save-dir msc://PROFILE/PATH` (NVIDIA's multi-storage-client) against a real S3 endpoint (moto on loopback):
the storage's lifecycle through MSC, megatron-core's own MSC path in the built-in worker, and the real Megatron-LM's
pretrain_gpt.py saving and loading through it."""

import pytest
import yaml
from helpers import assert_one_line_error, launch, launch_ok
from test_real_megatron_lm import run

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.storage import OWNER_MARK, MscStorage, StorageOptions, storage_for

pytest.importorskip("multistorageclient")


def _msc(endpoint, url: str, **options) -> MscStorage:
    return storage_for(url, StorageOptions(s3_region=endpoint.region, s3_endpoint=endpoint.url, **options))


def test_msc_profile_lifecycle(s3_endpoint, tmp_path, monkeypatch):
    """A profile generated from the S3 options names the bucket; the run's folder is marked, sized and removed
    through MSC, and nothing else is touched. A profile the MSC configuration lacks is one line."""
    monkeypatch.delenv("MSC_CONFIG", raising=False)
    bucket = s3_endpoint.create_bucket()
    s3_endpoint.client().put_object(Bucket=bucket, Key="bench/not-ours.txt", Body=b"x")
    storage = _msc(s3_endpoint, f"msc://{bucket}/bench")
    storage.check_access()
    run_dir = tmp_path / "20250101-000000-run"
    run_dir.mkdir()
    assert storage.create(run_dir) == f"msc://{bucket}/bench/20250101-000000-run"
    config = yaml.safe_load((run_dir / "msc_config.yaml").read_text())
    assert config["profiles"][bucket]["storage_provider"] == {
        "type": "s3", "options": {"base_path": bucket, "region_name": s3_endpoint.region,
                                  "endpoint_url": s3_endpoint.url}}
    assert storage.worker_env() == {"MSC_CONFIG": str(run_dir / "msc_config.yaml")}
    client = s3_endpoint.client()
    client.put_object(Bucket=bucket, Key="bench/20250101-000000-run/iter_0000002/__0_0.distcp", Body=b"a" * 100)
    client.put_object(Bucket=bucket, Key="bench/20250101-000000-run/iter_0000002/.metadata", Body=b"m" * 10)
    assert storage.iteration_sizes() == {2: 110} and sorted(storage.iteration_files(2)) == [10, 100]
    assert storage.worker(storage.describe()).local_path(storage.location) is None  # an object store

    again = _msc(s3_endpoint, f"msc://{bucket}/bench", msc_config=str(run_dir / "msc_config.yaml"))
    assert again.create(run_dir).endswith("-run-2")  # the name is taken: the next one
    client.delete_object(Bucket=bucket, Key=f"bench/20250101-000000-run-2/{OWNER_MARK}")
    assert not again.remove()  # no mark: not ours to delete
    assert storage.remove()
    assert s3_endpoint.object_keys(bucket) == ["bench/not-ours.txt"]

    with pytest.raises(ConfigError, match=r"has no profile 'other' \(it has " + bucket):
        storage_for("msc://other/x", StorageOptions(msc_config=str(run_dir / "msc_config.yaml")))
    with pytest.raises(ConfigError, match="NoSuchBucket while checking the profile"):
        _msc(s3_endpoint, "msc://no-such-bucket-here/x").check_access()


def test_builtin_worker_saves_and_loads_through_msc(tmp_path, s3_endpoint, monkeypatch):
    """torch_dist through megatron-core's MSC path (synchronous: the async writer's start-up is the disk tests'), then
    a cold load through MSC's reader: every tensor verified, the report naming the path taken, the objects removed
    after."""
    monkeypatch.delenv("MSC_CONFIG", raising=False)
    bucket = s3_endpoint.create_bucket()
    report = launch_ok("--save-dir", f"msc://{bucket}/ckpt", *s3_endpoint.options(),
                       "--train-iters", "4", "--save-interval", "2",
                       "--format", "json", runs_dir=tmp_path / "runs")
    assert report["run"]["status"] == "ok" and report["verification"]["verified"]
    assert report["config"]["msc"] is True and report["config"]["storage"] == "msc"
    assert report["config"]["fsync"] is None  # an object store: durable once uploaded
    assert [s["iteration"] for s in report["saves"]] == [2, 4] and all(s["bytes"] > 100_000 for s in report["saves"])
    assert any("went through multi-storage-client" in note for note in report["notes"]), report["notes"]
    assert s3_endpoint.object_keys(bucket) == []

    local = launch("--save-dir", f"s3://{bucket}/ckpt", *s3_endpoint.options(), runs_dir=tmp_path / "r")
    assert_one_line_error(local, "msc://PROFILE/PATH")


def test_real_megatron_lm_saves_and_loads_through_msc(tmp_path, s3_endpoint, upstream_megatron_lm, monkeypatch):
    """Megatron-LM's own pretrain_gpt.py with --save/--load msc://BUCKET/...: its log times the saves and the
    load, the sizes come from the bucket."""
    monkeypatch.delenv("MSC_CONFIG", raising=False)
    bucket = s3_endpoint.create_bucket()
    report = run(tmp_path, upstream_megatron_lm, "--save-dir", f"msc://{bucket}/ckpt", *s3_endpoint.options())
    assert report["run"]["status"] == "ok", report["notes"]
    assert [s["iteration"] for s in report["saves"]] == [2, 4] and all(s["bytes"] > 100_000 for s in report["saves"])
    assert report["load"]["iteration"] == 4 and report["load"]["time_source"].startswith("megatron")
    assert report["config"]["msc"] is True
    assert "the checkpoint folder holds what the log says was saved: iterations 2, 4" in report["notes"]
    assert s3_endpoint.object_keys(bucket) == []
