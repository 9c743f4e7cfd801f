"""The reports of the log fixtures, byte for byte: a change to a parser that moves a number, a note or
a key of a report that was right shows here. `tests/fixtures/logs/reports/NAME.json` is the report of
`tests/fixtures/logs/NAME.log` (or of the folder NAME), its paths written `{LOGS}` / `{REAL_LOGS}`.

After a deliberate change, write them again and read the diff before committing it:

    PYTHONPATH=tests .venv/bin/python tests/unit/test_log_reports_unchanged.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import LOGS, REAL_LOGS

from ckpt_bench.report.assembly import log_report, to_json
from ckpt_bench.report.parsers.sources import NoEvents

REPORTS = LOGS / "reports"
REAL_PREFIX = "shared__"  # a report of a file of REAL_LOGS


def source(report: Path) -> Path:
    name = report.stem
    if name.startswith(REAL_PREFIX):
        return REAL_LOGS / f"{name.removeprefix(REAL_PREFIX)}.log"
    folder = LOGS / name
    return folder if folder.is_dir() else LOGS / f"{name}.log"


def report_text(path: Path) -> str:
    """The report as the test stores it: its JSON (or the error's line), paths as placeholders."""
    try:
        text = to_json(log_report([path]))
    except NoEvents as error:
        text = json.dumps({"error": str(error)})
    return text.replace(str(LOGS), "{LOGS}").replace(str(REAL_LOGS), "{REAL_LOGS}") + "\n"


@pytest.mark.parametrize("name", sorted(p.name for p in REPORTS.glob("*.json")))
def test_report_is_unchanged(name):
    path = source(REPORTS / name)
    if not path.exists():
        pytest.skip(f"real fixtures not checked out beside the repo: {path}")
    assert report_text(path) == (REPORTS / name).read_text()


if __name__ == "__main__":
    for stored in sorted(REPORTS.glob("*.json")):
        if source(stored).exists():
            stored.write_text(report_text(source(stored)))
