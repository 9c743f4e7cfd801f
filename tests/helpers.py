"""What the tests share: the repository's paths and running our CLIs as a user would (a subprocess,
its stdout, stderr and exit code)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "fixtures" / "logs"  # constructed fixtures (marked as such)
REAL_LOGS = ROOT / ".." / "shared" / "fixtures" / "logs"  # real public logs
# Lightning reads dataflux's variables: a test sets the ones it means, never inherits them.
DATAFLUX_VARIABLES = ("CKPT_DIR_PATH", "CKPT_RESTORE_PATH", "NUM_LAYERS", "ACCELERATOR", "NUM_SAVE_CALLS",
                      "NUM_LOAD_CALLS", "NUM_NODES", "NUM_DEVICES", "STEPS_PER_SAVE", "PROJECT", "USE_ASYNC",
                      "MAX_STEPS", "MIN_EPOCHS", "MAX_EPOCHS", "SAVE_ONLY_LATEST")


def run_cli(script: str, *args, cwd: Path = ROOT, timeout: float = 300, env: dict | None = None,
            ) -> subprocess.CompletedProcess:
    """`python <script> ARGS` from the repository root (or `cwd`); `env` adds to a clean environment."""
    clean = {k: v for k, v in os.environ.items() if k not in DATAFLUX_VARIABLES}
    return subprocess.run([sys.executable, str(ROOT / script), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**clean, **(env or {})})


def launch(*args, runs_dir: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
    """`ckpt_launch.py [--runs-dir RUNS] ARGS`."""
    prefix = ["--runs-dir", str(runs_dir)] if runs_dir is not None else []
    return run_cli("ckpt_launch.py", *prefix, *args, **kwargs)


def launch_ok(*args, **kwargs) -> dict:
    """A launch that must succeed: its JSON report, which must have the declared shape (report.schema)."""
    result = launch(*args, **kwargs)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert_valid_report(report)
    return report


def assert_valid_report(report: dict) -> None:
    """`report` validates against the report's JSON Schema (ckpt_bench.report.schema)."""
    _report_validator().validate(report)


@functools.cache
def _report_validator():
    """The schema's validator, its schema checked once per process (`jsonschema.validate` checks it against the
    meta-schema at every call: 0.65 s of CPU a report here, 0.003 s for the validation itself)."""
    import jsonschema

    from ckpt_bench.report.schema import json_schema

    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def saved_tensor_bytes(path: Path) -> int:
    """Tensor bytes of a `torch.save`d file of nested dicts, or of every .pt below a folder (torch.save's
    own framing left out): what DLIO's checkpointing writes, counted the same way for DLIO and for us."""
    import torch

    total = 0
    for file in path.rglob("*.pt") if path.is_dir() else [path]:
        stack = [torch.load(file, weights_only=True)]
        while stack:
            node = stack.pop()
            for value in node.values():
                if isinstance(value, dict):
                    stack.append(value)
                else:
                    total += value.numel() * value.element_size()
    return total


def ckpt_report(*args, **kwargs) -> subprocess.CompletedProcess:
    return run_cli("ckpt_report.py", *args, **kwargs)


def assert_one_line_error(result: subprocess.CompletedProcess, needle: str, code: int = 2) -> str:
    """A user mistake: exit `code`, exactly one line on stderr, naming `needle`."""
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    return lines[0]


def torchrun_failure_summary(exitcode: int) -> str:
    """What torchrun prints when rank 1 of a pass fails with `exitcode` (its 'Root Cause' block)."""
    return ("\nRoot Cause (first observed failure):\n[0]:\n  time      : 2026-01-01_00:00:00\n  host      : vm\n"
            f"  rank      : 1 (local_rank: 1)\n  exitcode  : {exitcode} (pid: 4242)\n")
