"""The real frameworks' sources, for the tests that run or read them: Megatron-LM (core_v0.16.1, or core_v0.19.0
where the installed megatron-core is 0.17 or newer: the checkout its ranks' megatron-core matches) and Primus
(fd1eeabb), from the snapshots in `../shared/upstream/` (tarballs, extracted once per test session into a temp
folder, never modified) or from `CKPT_BENCH_UPSTREAM=DIR` (a folder holding those tarballs, or the checkouts
themselves as `DIR/Megatron-LM` and `DIR/Primus`).

Under CI (`CI=true`) a missing snapshot fails the test: CI always has `../shared`. In a user's clone without it
the tests skip with one line saying how to point them at checkouts.
"""

from __future__ import annotations

import compileall
import os
import tarfile
from pathlib import Path

import pytest
from helpers import ROOT

from ckpt_bench.core import megatron_release

MEGATRON_LM = ("megatron-lm-core_v0.19.0.tar.gz" if megatron_release.installed().has_async_strategy
               else "megatron-lm-core_v0.16.1.tar.gz")
SNAPSHOTS = {"Megatron-LM": MEGATRON_LM, "Primus": "primus-fd1eeabb.tar.gz"}
SHARED_UPSTREAM = ROOT / ".." / "shared" / "upstream"


def checkout(name: str, scratch: Path) -> Path:
    """The checkout `name` ('Megatron-LM' or 'Primus'): an extracted folder, or extracted here into `scratch`."""
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
    with tarfile.open(tarball) as archive:
        archive.extractall(scratch, filter="data")
    # Bytecode once, for the many processes that import the checkout (PYTHONDONTWRITEBYTECODE may be set).
    compileall.compile_dir(scratch / name, quiet=2, workers=0)
    return scratch / name
