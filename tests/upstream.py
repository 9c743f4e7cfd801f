"""The real frameworks' sources, for the tests that run or read them: Megatron-LM (core_v0.16.1, or core_v0.19.0
where the installed megatron-core is 0.17 or newer: the checkout its ranks' megatron-core matches) and Primus
(fd1eeabb), from the snapshots in `../shared/upstream/` (tarballs, extracted once per test run into a temp folder
that the run's xdist workers share, never modified afterwards) or from `CKPT_BENCH_UPSTREAM=DIR` (a folder holding
those tarballs, or the checkouts themselves as `DIR/Megatron-LM` and `DIR/Primus`, used as they are).

An extracted Megatron-LM has its C++ dataset helpers built once at extraction, as a user's image has them: else
the first `pretrain_gpt.py` of each worker builds them (`megatron.core.datasets.utils.compile_helpers`, a `make`
of about 9 s of CPU here) inside a timed test.

Under CI (`CI=true`) a missing snapshot fails the test: CI always has `../shared`. In a user's clone without it
the tests skip with one line saying how to point them at checkouts.
"""

from __future__ import annotations

import compileall
import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import ROOT

from ckpt_bench.core import megatron_release

MEGATRON_LM = ("megatron-lm-core_v0.19.0.tar.gz" if megatron_release.installed().has_async_strategy
               else "megatron-lm-core_v0.16.1.tar.gz")
SNAPSHOTS = {"Megatron-LM": MEGATRON_LM, "Primus": "primus-fd1eeabb.tar.gz"}
SHARED_UPSTREAM = ROOT / ".." / "shared" / "upstream"


def checkout(name: str, scratch: Path) -> Path:
    """The checkout `name` ('Megatron-LM' or 'Primus'): an extracted folder, or extracted into `scratch` (a folder
    the test run's workers share: the first extracts it, the others wait for it and use it)."""
    source = Path(os.environ.get("CKPT_BENCH_UPSTREAM") or SHARED_UPSTREAM)
    if (source / name).is_dir():
        return (source / name).resolve()
    tarball = source / SNAPSHOTS[name]
    if not tarball.is_file():
        message = (f"no {name} snapshot: {tarball} is missing (set CKPT_BENCH_UPSTREAM=DIR to a folder holding "
                   f"{SNAPSHOTS[name]} or a {name}/ checkout)")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    folder = scratch / tarball.name.removesuffix(".tar.gz")
    done = folder / ".extracted"
    with _locked(scratch / f".{folder.name}.lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a worker stopped mid-extraction: ours, in the run's temp
            with tarfile.open(tarball) as archive:
                archive.extractall(folder, filter="data")
            # Bytecode once, for the many processes that import the checkout (PYTHONDONTWRITEBYTECODE may be set).
            compileall.compile_dir(folder / name, quiet=2, workers=0)
            if name == "Megatron-LM":
                _build_dataset_helpers(folder / name)
            done.touch()
    return folder / name


def shared_scratch(base: Path) -> Path:
    """Where a run's checkouts go: `base` (the worker's temp root), or above it where xdist workers share it."""
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "upstream"
    folder.mkdir(exist_ok=True)
    return folder


@contextmanager
def _locked(path: Path):
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_dataset_helpers(megatron: Path) -> None:
    """megatron-core's dataset helpers, built as `compile_helpers` builds them (`make` in their folder, with the
    ranks' Python first on PATH: its Makefile asks `python3` for pybind11's includes). Where it fails, the run
    builds them itself and says why."""
    datasets = megatron / "megatron" / "core" / "datasets"
    if not (datasets / "Makefile").is_file() or shutil.which("make") is None:
        return
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(["make", "-C", str(datasets)], env=env, capture_output=True, check=False)
