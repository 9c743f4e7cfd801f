"""Nothing of the user's is touched, and our own writes never crash (issue 22, 20.6): the deletion
contract (a mark naming the run, checked before any removal), sweep folders that are not ours, attempts
set aside by --resume, run ids that are names, `~`, colliding names, atomic run-directory files.
Real files and the real CLI; S3 cases are in tests/e2e/test_reliability_storage.py."""

from __future__ import annotations

import json
import traceback
from pathlib import Path

import pytest
from helpers import assert_one_line_error, launch

from ckpt_bench.cli.launch import parse_argv
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.rundir import RunDir, write_atomic
from ckpt_bench.storage import OWNER_MARK, reopen, storage_for
from ckpt_bench.sweep.run import JOB_FILE, build_sweep, run_job, run_sweep, set_aside
from ckpt_bench.worker.entry import error_text

HYDRA_DCP = {"defaults": ["_self_"], "hydra": {"mode": "MULTIRUN", "sweeper": {"params": {"+thread_count": "1,2"}}},
             "+model": "tiny", "+backend": "gloo", "+world_size": 1, "+checkpoint.storage": "disk", "epochs": 1}


def _run_in(tmp_path: Path, name: str) -> Path:
    run_dir = tmp_path / "runs" / name
    run_dir.mkdir(parents=True)
    return run_dir


def test_a_mark_must_name_the_run(tmp_path):
    storage = storage_for(str(tmp_path / "ckpt"))
    location = Path(storage.create(_run_in(tmp_path, "run-a")))
    (location / "iter_0000001").mkdir()
    other = storage_for(str(tmp_path / "ckpt"))
    other.attach(str(location), tmp_path / "runs" / "run-b")  # a mark, but another run's
    assert not other.remove() and location.is_dir()
    copied = tmp_path / "ckpt" / "user-folder"
    copied.mkdir()
    (copied / OWNER_MARK).write_text((location / OWNER_MARK).read_text())  # a copied mark proves nothing
    (copied / "thesis.txt").write_text("mine")
    assert not reopen(str(copied), {"storage": "disk"}, tmp_path / "runs" / "user-folder").remove()
    assert (copied / "thesis.txt").read_text() == "mine"
    assert storage.remove() and not location.exists()


def test_a_save_folder_name_taken_by_another_run_gets_a_suffix(tmp_path):
    first = storage_for(str(tmp_path / "ckpt")).create(_run_in(tmp_path / "a", "20250101-000000-dcp"))
    second = storage_for(str(tmp_path / "ckpt")).create(_run_in(tmp_path / "b", "20250101-000000-dcp"))
    assert Path(second).name == "20250101-000000-dcp-2" and Path(first).name == "20250101-000000-dcp"


def test_tilde_is_expanded_and_runs_and_saves_in_one_folder_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    storage = storage_for("~/ckpt")
    assert storage.create(_run_in(tmp_path, "r")) == str(tmp_path / "ckpt" / "r")
    assert not (Path.cwd() / "~").exists()
    same = storage_for(str(tmp_path / "runs"))
    with pytest.raises(ConfigError, match="is also --runs-dir"):
        same.create(tmp_path / "runs" / "r2")


@pytest.mark.parametrize("run_id", ["../escaped", "/tmp/abs", "a/b/c", ".", "..", ""])
def test_run_ids_are_names_not_paths(tmp_path, run_id):
    result = launch("--backend", "dcp", "--model", "tiny", "--run-id", run_id, runs_dir=tmp_path / "runs")
    assert_one_line_error(result, f"--run-id {run_id!r}: a run id is a folder name")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "escaped").exists()


@pytest.mark.parametrize("make", ["file", "file-parent"])
def test_a_runs_dir_that_is_a_file_is_one_line(tmp_path, make):
    (tmp_path / "taken").write_text("a file")
    runs = tmp_path / "taken" if make == "file" else tmp_path / "taken" / "runs"
    result = launch("--backend", "dcp", "--model", "tiny", runs_dir=runs)
    assert_one_line_error(result, "cannot create a run directory there")
    with pytest.raises(ConfigError, match="it is a file"):
        RunDir.create(runs, "x")


def test_an_unwritable_output_is_refused_before_the_run(tmp_path):
    (tmp_path / "taken").write_text("a file")
    result = launch("--backend", "dcp", "--model", "tiny", "--output", str(tmp_path / "taken" / "r.json"),
                    runs_dir=tmp_path / "runs")
    assert_one_line_error(result, "--output")
    assert not (tmp_path / "runs").exists()


def test_write_atomic_keeps_the_old_file_when_the_write_fails(tmp_path):
    path = tmp_path / "report.json"
    write_atomic(path, "old\n")

    class Unprintable:
        def __str__(self):
            raise OSError(28, "No space left on device")

    with pytest.raises(TypeError):
        write_atomic(path, Unprintable())  # fails inside the write: the old file stays whole
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_foreign_hydra_sweep_dir_is_refused_and_left_alone(tmp_path):
    root = tmp_path / "multirun"
    (root / "0" / "important").mkdir(parents=True)
    (root / "0" / "important" / "thesis.txt").write_text("mine")
    (root / "run_results.json").write_text("{}")
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    with pytest.raises(ConfigError, match="already exists and is not a ckpt-bench sweep"):
        _run_peer(tmp_path, root)
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before
    assert (root / "run_results.json").read_text() == "{}"


def _run_peer(tmp_path: Path, root: Path) -> None:
    config = tmp_path / "dcp_ddp_save.yaml"
    config.write_text(json.dumps({**HYDRA_DCP, "+path": str(tmp_path / "ckpt"),
                                  "hydra": {**HYDRA_DCP["hydra"], "sweep": {"dir": str(root)}}}))
    run_sweep(str(config), tmp_path / "runs", None, {}, parse_argv)


def _attempt(job_dir: Path, tmp_path: Path) -> Path:
    """An attempt as a killed job leaves it: job.json, its log, a run directory whose checkpoints (in a
    --save-dir) carry the run's mark, and a file the user put among them."""
    job_dir.mkdir(parents=True)
    (job_dir / JOB_FILE).write_text(json.dumps({"status": "running"}))
    (job_dir / "benchmark.log").write_text("the interrupted attempt's log\n")
    run_dir = job_dir / "20250101-000000-dcp-tiny"
    (run_dir / "logs" / "save").mkdir(parents=True)
    (run_dir / "logs" / "save" / "console.log").write_text("rank output\n")
    storage = storage_for(str(tmp_path / "ckpt"))
    location = Path(storage.create(run_dir))
    (location / "iter_0000001").mkdir()
    (location / "notes-of-mine.txt").write_text("mine")
    (run_dir / "run.json").write_text(json.dumps({"checkpoint_dir": str(location), "storage": storage.describe()}))
    return location


def test_resume_sets_an_attempt_aside_and_removes_only_its_unkept_checkpoints(tmp_path):
    location = _attempt(tmp_path / "sweep" / "0", tmp_path)
    attempt = set_aside(tmp_path / "sweep" / "0", kept=False)
    assert attempt == tmp_path / "sweep" / "0" / "attempts" / "1"
    assert (attempt / "benchmark.log").read_text() == "the interrupted attempt's log\n"
    assert (attempt / "20250101-000000-dcp-tiny" / "logs" / "save" / "console.log").is_file()
    assert not location.exists()  # ours (its mark names that run) and not kept
    assert [p.name for p in (tmp_path / "sweep" / "0").iterdir()] == ["attempts"]


def test_resume_keeps_what_a_job_kept(tmp_path):
    location = _attempt(tmp_path / "sweep" / "0", tmp_path)
    set_aside(tmp_path / "sweep" / "0", kept=True)
    assert (location / "notes-of-mine.txt").read_text() == "mine" and (location / "iter_0000001").is_dir()
    assert (tmp_path / "sweep" / "0" / "attempts" / "1" / "benchmark.log").is_file()
    set_aside(tmp_path / "sweep" / "0", kept=True)  # a second resume: attempt 2, attempt 1 untouched
    assert (tmp_path / "sweep" / "0" / "attempts" / "1" / "benchmark.log").is_file()


def test_a_job_folder_that_is_not_ours_is_left_alone(tmp_path):
    sweep = build_sweep({"backend": "dcp", "model": "tiny", "sweep": {"save_calls": [1]}}, "s.yaml", parse_argv)
    root = tmp_path / "sweep"
    (root / "0").mkdir(parents=True)
    (root / "sweep.yaml").write_text("name: s\nbackend: dcp\nmodel: tiny\nsweep: {save_calls: [1]}\n")
    (root / "0" / "thesis.txt").write_text("mine")
    record = run_job(root, sweep.jobs[0], sweep.outputs)
    assert record.status == "failed" and "left alone" in record.error
    assert [p.name for p in (root / "0").iterdir()] == ["thesis.txt"]


def test_progress_shows_the_values_as_given():
    sweep = build_sweep({"backend": "dcp", "sweep": {"dtype": ["float32"], "save_dir": ["/tmp/a_b"]}}, "s.yaml",
                        parse_argv)
    assert sweep.jobs[0].described == "dtype=float32 save_dir=/tmp/a_b"
    assert sweep.jobs[0].report_name == "results_float32_disk.json"  # file names keep their labels


def test_a_checkpoint_exception_is_one_line():
    from torch.distributed.checkpoint.api import CheckpointException

    def failure() -> BaseException:
        try:
            raise AssertionError("metadata is None;\n global metadata read failed")
        except AssertionError as error:
            return error

    error = CheckpointException("failed", {1: (failure(), traceback.extract_stack()), 0: (failure(), None)})
    text = error_text(error)
    assert "\n" not in text and "Traceback" not in text
    assert text.startswith("CheckpointException on ranks [0, 1]: rank 0: AssertionError: metadata is None;")


def test_a_load_verdict_left_empty_by_a_full_disk_is_named_not_a_traceback(tmp_path):
    run = RunDir(tmp_path)
    run.integrity_dir.mkdir(parents=True)
    (run.integrity_dir / "load-rank-0.json").write_text(json.dumps({"rank": 0, "verified": True}))
    (run.integrity_dir / "load-rank-1.json").write_text("")  # its rank wrote it as the disk filled
    verdicts, unreadable = run.load_verdicts()
    assert verdicts == {0: {"rank": 0, "verified": True}}
    assert len(unreadable) == 1 and unreadable[0].startswith(str(run.integrity_dir / "load-rank-1.json"))
