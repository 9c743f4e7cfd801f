"""`--workload` end to end: real torchrun ranks allocate their share of a small DLIO workload and save and
load it through the torch-save and DCP engines, on disk and on a real S3 endpoint (moto on loopback)."""

from __future__ import annotations

import json

from helpers import ROOT, launch_ok, saved_tensor_bytes

from ckpt_bench.layout.dlio_layout import layout
from ckpt_bench.layout.dlio_yaml import load_dlio_yaml

TINY = ROOT / "tests" / "fixtures" / "workloads" / "tiny_test.yaml"


def test_torch_save_on_disk_writes_dlio_files_and_reports_mlperf_figures(tmp_path):
    report = launch_ok("--workload", TINY, "--nproc-per-node", "2", "--save-dir", tmp_path / "ckpt",
                       "--keep-checkpoints", "--format", "json", runs_dir=tmp_path / "runs")
    expected = layout(load_dlio_yaml(TINY), world_size=2)
    assert report["verified"] is True and report["verification"]["ranks_checked"] == 2
    assert report["num_saved"] == 2 and len(report["loads"]) == 2 and report["ckpt_format"] == "torch-save"
    config = report["config"]
    assert config["workload"] == "tiny_test" and config["tensor_bytes_per_save"] == expected.run_bytes
    assert config["fsync"] is True and report["measurement"]["fsync"] is True

    # DLIO's files and dicts, byte for byte the tensors DLIO writes (torch.save adds its zip framing).
    folder = tmp_path / "ckpt" / report["run"]["dir"].rsplit("/", 1)[1] / "iter_0000002"
    written = {path.name: path for path in folder.iterdir()}
    assert set(written) == {f.name for share in expected.ranks for f in share.files}
    tensor_bytes = sum(saved_tensor_bytes(path) for path in written.values())
    assert tensor_bytes == expected.run_bytes
    save = report["saves"][-1]
    assert expected.run_bytes < save["bytes"] < expected.run_bytes * 1.01

    # MLPerf's figures from the same events, and DLIO's summary.json beside the report.
    mlperf = report["mlperf"]
    assert mlperf["dlio"]["checkpoint_size_GB"] == round(expected.dlio_reported_bytes / 2**30, 6)
    assert mlperf["mlpstorage"]["mean_of_max_save_duration"] >= mlperf["dlio"]["save_checkpoint_duration_mean_seconds"]
    assert mlperf["mlpstorage"]["calculated_mean_load_throughput_from_strict_times"] > 0
    summary = json.loads((tmp_path / "runs" / report["run"]["dir"].rsplit("/", 1)[1] / "summary.json").read_text())
    assert summary["metric"] == mlperf["dlio"] and summary["workload"] == "tiny_test"

    # The harness holds no copy: a save's peak is the rank's state and the engine's own needs.
    rank0_state = expected.ranks[0].resident_bytes
    assert save["peak_rss_bytes"] < 3 * 2**30 and save["peak_rss_bytes"] > rank0_state


def test_dcp_to_s3_async_through_the_real_client(tmp_path, s3_endpoint):
    bucket = s3_endpoint.create_bucket()
    report = launch_ok("--workload", TINY, "--engine", "dcp", "--async-save", "--thread-count", "2",
                       "--nproc-per-node", "2", "--save-calls", "2", "--load-calls", "1",
                       "--save-dir", f"s3://{bucket}/wl", *s3_endpoint.options(), "--format", "json",
                       runs_dir=tmp_path / "runs")
    assert report["verified"] is True and report["num_saved"] == 2 and report["async_save"] is True
    assert report["config"]["storage"] == "s3" and report["measurement"]["fsync"] is None
    expected = layout(load_dlio_yaml(TINY), world_size=2)
    assert all(save["bytes"] >= expected.run_bytes for save in report["saves"])
    assert s3_endpoint.object_keys(bucket) == []  # removed: the run created them


def test_torch_save_to_s3_through_the_real_client(tmp_path, s3_endpoint):
    """DLIO's files as S3 objects through s3torchconnector's writer and reader."""
    bucket = s3_endpoint.create_bucket()
    report = launch_ok("--workload", TINY, "--nproc-per-node", "2", "--save-calls", "1", "--load-calls", "1",
                       "--save-dir", f"s3://{bucket}/wl", *s3_endpoint.options(), "--keep-checkpoints",
                       "--format", "json", runs_dir=tmp_path / "runs")
    assert report["verified"] is True and report["config"]["storage"] == "s3"
    expected = layout(load_dlio_yaml(TINY), world_size=2)
    names = {key.rsplit("/", 1)[1] for key in s3_endpoint.object_keys(bucket) if "/iter_0000001/" in key}
    assert names == {f.name for share in expected.ranks for f in share.files}
