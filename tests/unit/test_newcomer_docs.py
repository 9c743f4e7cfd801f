"""The README leads and the docs follow the code (issue 20, item 13)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckpt_bench.cli import options_doc
from ckpt_bench.cli.launch import launch

ROOT = Path(__file__).resolve().parents[2]


def test_options_page_is_the_registry():
    """docs/options.md is generated: regenerate it with `python -m ckpt_bench.cli.options_doc > docs/options.md`."""
    assert (ROOT / "docs" / "options.md").read_text() == options_doc.render(), (
        "docs/options.md drifted from the option registry: run python -m ckpt_bench.cli.options_doc > docs/options.md")


def test_readme_leads():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for goal in ("--backend dcp", "s3://", "create_bucket", "--backend lightning", "ckpt_report.py", "--sweep",
                 "docs/workloads.md", "configs/gpt_1GB.yaml"):
        assert goal in readme, goal
    assert "issue 14" not in readme
    # `make run` on a terminal prints the summary table: a sentence that says it prints JSON says that too.
    for text in (readme, (ROOT / "Makefile").read_text().replace("#", "")):
        for sentence in re.split(r"[.:]\s", " ".join(text.split())):
            if "make run" in sentence and "JSON" in sentence:
                assert "summary" in sentence and "terminal" in sentence, sentence


def test_readme_indexes_every_docs_page():
    """Every page in docs/ is in the README's index, and every local link of the README and the docs
    pages points at a file that exists."""
    readme = (ROOT / "README.md").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in readme, page.name
    for document in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#:]+\.md)\)", document.read_text()):
            assert (document.parent / target).exists(), f"{document.name} links to {target}"


def test_help_explains_hydra_overrides():
    """--help's usage line names [HYDRA_OVERRIDES]...: the help says what they are."""
    output = CliRunner().invoke(launch, ["--help"]).output
    assert "HYDRA_OVERRIDES: only after --sweep FILE with an s3torchbenchmarking" in " ".join(output.split())


def test_make_run_redirected_is_the_json_report_alone():
    """`make run > r.json`, as the README says: make echoes no command on stdout (a --plan stands for the run)."""
    make = shutil.which("make")
    if make is None or not (ROOT / ".venv" / ".installed").exists():
        pytest.skip("make, or the project's .venv, is not here")
    shell = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}  # a user's
    done = subprocess.run([make, "run", "ARGS=--plan"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=shell)
    assert done.returncode == 0, done.stderr
    assert isinstance(json.loads(done.stdout), dict)
