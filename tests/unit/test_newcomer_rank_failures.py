"""A rank that dies names its exception, type and message, in the report's `failed_ranks` (issue 31, item 1):
from torchelastic's error file where the rank wrote one (`@record`), else from its own stderr log."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from helpers import torchrun_failure_summary

from ckpt_bench.launcher import torchrun

TORCHRUN_SUMMARY = torchrun_failure_summary(1)

MEGATRON_LM_CRASH = """\
def build(hidden, heads):
    return hidden // heads
build(64, 0)
"""


def failed_pass(tmp_path, stderr: str = "", error_file: str | None = None) -> torchrun.RankFailure:
    """A pass whose rank 1 failed as torchrun reports it, with that rank's stderr log (and error file)."""
    rank_dir = tmp_path / "logs" / "run-1" / "attempt_0" / "1"
    rank_dir.mkdir(parents=True)
    (rank_dir / "stderr.log").write_text(stderr)
    if error_file is not None:
        (rank_dir / "error.json").write_text(error_file)
    script = f"import sys; print({TORCHRUN_SUMMARY!r}); sys.exit(1)"
    result = torchrun.run_command("save", [sys.executable, "-c", script], tmp_path / "logs", lambda line: False)
    [failure] = result.failures
    assert result.summary().failed_ranks[0].exception == failure.exception
    return failure


def test_a_python_traceback_names_the_exception(tmp_path):
    crash = subprocess.run([sys.executable, "-c", MEGATRON_LM_CRASH], capture_output=True, text=True)
    stderr = "".join(f"[rank1]: {line}\n" for line in crash.stderr.splitlines())  # torch's prefix, at times
    failure = failed_pass(tmp_path, stderr + "[rank1]:[W1125 destroy_process_group() was not called]\n")
    assert failure.exception == "ZeroDivisionError: integer division or modulo by zero"
    assert failure.describe() == ("rank 1 failed (first failure; exit code 1): ZeroDivisionError: integer division "
                                  "or modulo by zero")


def test_our_workers_line_names_the_exception_after_a_chained_traceback(tmp_path):
    stderr = textwrap.dedent("""\
        Traceback (most recent call last):
          File "x.py", line 1, in <module>
        KeyError: 'hidden'

        During handling of the above exception, another exception occurred:

        Traceback (most recent call last):
          File "x.py", line 3, in <module>
        ValueError: bad shape
        [rank 1] save failed: ValueError: bad shape
        """)
    assert failed_pass(tmp_path, stderr).exception == "ValueError: bad shape"
    assert torchrun.exception_in(stderr.rsplit("[rank 1]", 1)[0]) == "ValueError: bad shape"


def test_torchelastics_error_file_comes_first(tmp_path, monkeypatch):
    errors = pytest.importorskip("torch.distributed.elastic.multiprocessing.errors")
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    try:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    except RuntimeError as error:
        errors.ErrorHandler().record_exception(error)  # what torch's @record does as the entry point raises
    failure = failed_pass(tmp_path, "nothing of use\n", error_file.read_text())
    assert failure.exception == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"


def test_a_rank_that_left_no_exception_says_none(tmp_path):
    assert failed_pass(tmp_path, "killed\n").exception is None


def test_a_rank_ended_by_a_signal_is_not_given_an_older_traceback(tmp_path):
    rank_dir = tmp_path / "logs" / "run-1" / "attempt_0" / "1"
    rank_dir.mkdir(parents=True)
    (rank_dir / "stderr.log").write_text("Traceback (most recent call last):\n  File \"x\"\nOSError: handled\n")
    script = f"import sys; print({torchrun_failure_summary(-9)!r}); sys.exit(1)"
    result = torchrun.run_command("save", [sys.executable, "-c", script], tmp_path / "logs", lambda line: False)
    assert result.failures[0].signal == "SIGKILL" and result.failures[0].exception is None
