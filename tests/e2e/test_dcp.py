"""The DCP backend end to end: real torchrun (2 ranks, gloo), a real S3 endpoint (moto) reached through
s3torchconnector, the report from the shared engine. The run on disk also asks for the interval advice, the summary
on stdout (--format table), the JSON report in --output and in the run directory, and report.html beside it."""

import json
from pathlib import Path

import pytest
from helpers import launch as launch_cli
from html_page import Page

from ckpt_bench.backends.dcp import models
from ckpt_bench.core.events import event_files, read_event_files
from ckpt_bench.present.rows import as_report, headline_rows, phase_table
from ckpt_bench.report.engine import pair


def launch(*args, runs_dir, env=None):
    return launch_cli("--backend", "dcp", *args, runs_dir=runs_dir, timeout=240, env=env)


# Async on S3 only: the async machinery (the future's callback, the wait before the next save) is the
# same on every storage, and S3 is where a slow upload would show it.
@pytest.mark.parametrize("storage,async_save", [("disk", False), ("s3", False), ("s3", True)],
                         ids=["disk-sync", "s3-sync", "s3-async"])
def test_save_then_load(tmp_path, s3_endpoint, storage, async_save):
    args = ["--model", "tiny", "--nproc-per-node", "2", "--dist-backend", "gloo", "--save-calls", "2",
            "--thread-count", "2", "--async-save" if async_save else "--no-async-save"]
    keep = storage == "s3" and not async_save  # one run keeps its checkpoints, to check their layout
    baseline = not async_save  # the storage's own peak beside the sync saves, on disk and on S3
    args += ["--storage-baseline"] if baseline else []
    if storage == "s3":
        bucket = s3_endpoint.create_bucket()
        args += ["--save-dir", f"s3://{bucket}/bench", *s3_endpoint.options()]
        args += ["--keep-checkpoints"] if keep else []
    else:  # with the advice, the summary on stdout, the report in --output and report.html
        args += ["--save-dir", str(tmp_path / "ckpts"), "--mtbf-hours", "10", "--format", "table",
                 "--output", str(tmp_path / "report.json")]
    result = launch(*args, runs_dir=tmp_path / "runs", env={"CKPT_BENCH_HTML": "1"} if storage == "disk" else None)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text() if storage == "disk" else result.stdout)

    assert report["ckpt_format"] == "torch_dcp" and report["world_size"] == 2
    assert report["async_save"] is async_save
    config = report["config"]
    assert config["storage"] == storage and config["model"] == "tiny" and config["thread_count"] == 2
    assert config["sync_files"] is (storage == "disk")
    assert report["verified"] is True and report["verification"]["ranks_checked"] == 2
    assert report["num_saved"] == 2 and report["accurate"] is True
    # Sizes come from what was written (files or objects): the tensors plus DCP's metadata.
    state_bytes = models.estimate_bytes("tiny", "float32")
    for save in report["saves"]:
        assert save["bytes_source"] == "disk" and state_bytes < save["bytes"] < 2 * state_bytes
        assert 0 < save["block_time"] <= save["total_time"]
        assert save["bandwidth"] > 0
    assert [load["iteration"] for load in report["loads"]] == [1, 2]  # every save call is loaded back
    assert report["load_bandwidth_in_mbps"] > 0
    # Each rank's peak memory while each save and load ran: at least the state it holds.
    for record in [*report["saves"], *report["loads"]]:
        assert record["peak_rss_bytes"] > state_bytes
        assert record["peak_rss_bytes"] == record["peak_rss_bytes_per_rank"]["max"]
    if baseline:
        measured = report["storage_baseline"]
        assert measured["tool"] in ("fio", "built-in (os.write/os.read)") if storage == "disk" else \
            measured["tool"].startswith("built-in (s3torchconnector")
        # The last checkpoint's shape: its files (2 threads x 2 ranks + .metadata), bytes and fsync.
        assert measured["files"] >= 4 and measured["concurrency"] == 4 and measured["fsync"] is (storage == "disk")
        assert abs(measured["bytes"] - report["saves"][-1]["bytes"]) <= measured["files"]  # fio: the mean size
        assert measured["write_bandwidth"] > 0 and measured["read_bandwidth"] > 0 and 3 <= len(measured["rounds"]) <= 6
        # The peak is the fastest round; a save or load that still beat it has no fraction but says so.
        assert measured["write_bandwidth"] == max(r["write_bandwidth"] for r in measured["rounds"])
        for kind in ("save", "load"):
            assert (report[f"{kind}_fraction_of_peak"] or 0) > 0 or report[f"{kind}_above_peak"]["ratio"] > 1
        assert report["measurement"]["storage_baseline"].startswith(f"measured with {measured['tool']}")
    else:
        assert "storage_baseline" not in report and report["measurement"]["storage_baseline"].startswith("not")
    if async_save:  # every rank's phases (issue 29): blocking ones sum to its block time, all to its total
        check_phases(report)
    # The checkpoints this run created are gone; nothing else was touched.
    if keep:
        run = Path(report["run"]["dir"]).name
        assert report["save"] == f"s3://{bucket}/bench/{run}"
        keys = s3_endpoint.object_keys(bucket)
        assert f"bench/{run}/.ckpt-bench-owned" in keys
        assert {f"bench/{run}/iter_000000{k}/.metadata" for k in (1, 2)} <= set(keys)
        assert not [key for key in keys if "storage-baseline" in key]  # the baseline's objects never stay
    elif storage == "s3":
        assert s3_endpoint.object_keys(bucket) == []
    else:
        assert list((tmp_path / "ckpts").iterdir()) == []
        check_advice_summary_and_page(report, result.stdout)


def check_advice_summary_and_page(report: dict, stdout: str) -> None:
    """The advice at --mtbf-hours 10 from the run's own saves and load, in --output and the run directory alike;
    report.html beside it, self-contained, with the timeline and the advice; the summary, not JSON, on stdout."""
    advice = report["advice"]
    assert advice["mtbf_s"] == 36000.0 and advice["checkpoint_cost_s"] > 0
    assert advice["checkpoint_cost_from"].startswith("save total time")
    assert advice["restart_cost_s"] == round(report["load_time"] + 300.0, 3)
    assert 0 < advice["goodput_at_optimum"] < 1 and advice["daly_interval_s"] > 0
    run_dir = Path(report["run"]["dir"])
    assert json.loads((run_dir / "report.json").read_text())["advice"] == advice
    page = Page((run_dir / "report.html").read_text())
    assert page.external == [] and page.sections["timeline"]["svg"] == 2 and "advice" in page.sections
    assert not stdout.lstrip().startswith("{")
    for needle in ("slowest rank", "Daly interval", "goodput", str(run_dir / "report.html")):
        assert needle in stdout, needle


def check_phases(report: dict) -> None:
    """Each save and load of each rank carries its phases, in order, summing to its own times; the report has the
    slowest rank's and every rank's, and the summary names where the time went."""
    for op in pair(read_event_files(event_files(Path(report["run"]["dir"]) / "events"))):
        phases = op.phases()
        assert phases, f"{op.kind} {op.iteration} of rank {op.rank} has no phases"
        if op.kind == "save":
            assert [p["phase"] for p in phases if p["blocking"]] == ["state_dict", "stage", "schedule"]
            assert abs(sum(p["seconds"] for p in phases if p["blocking"]) - op.block_s()) < 1e-6
        else:
            assert [p["phase"] for p in phases][:2] == ["state_dict", "metadata"]
        assert abs(sum(p["seconds"] for p in phases) - op.total_s()) < 1e-6
    for record in [*report["saves"], *report["loads"]]:
        assert len(record["phases_per_rank"]) == 2 and record["phases_rank"] in (0, 1)
    typed = as_report(report)
    assert dict(headline_rows(typed))["where the time goes"].startswith("last save: ")
    columns, _rows = phase_table(typed)
    assert columns[:3] == ["phase", "first save 1 s", "share"]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--save-dir", "s3://no-such-bucket/x"], "bucket 'no-such-bucket' does not exist"),
        (["--model", "gpt-17"], "--model 'gpt-17' is not known: use one of tiny, small"),
        (["--dtype", "int3"], "--dtype 'int3' is not supported"),
        (["--model", "llama2-13b"], "--model llama2-13b in float32 is 48.5 GiB per copy"),
        (["--save-dir", "s3://b/x", "--sync-files"], "--sync-files applies to a local --save-dir only"),
    ],
)
def test_mistakes_are_one_line_before_launch(tmp_path, s3_endpoint, args, needle):
    result = launch("--dist-backend", "gloo", *s3_endpoint.options(), *args, runs_dir=tmp_path / "runs")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
