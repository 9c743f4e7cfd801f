"""A real run with the interval advice: the summary on stdout (--format table), the JSON report with
`advice` in --output and in the run directory, and report.html beside it."""

import json
from pathlib import Path

from helpers import launch
from html_page import Page


def test_run_with_advice_summary_and_html(tmp_path):
    output = tmp_path / "report.json"
    result = launch("--backend", "dcp", "--model", "tiny", "--nproc-per-node", "1", "--save-calls", "2",
                    "--mtbf-hours", "10", "--format", "table", "--output", output, runs_dir=tmp_path / "runs",
                    timeout=240, env={"CKPT_BENCH_HTML": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(output.read_text())
    advice = report["advice"]
    assert advice["mtbf_s"] == 36000.0 and advice["checkpoint_cost_s"] > 0
    assert advice["checkpoint_cost_from"].startswith("save total time")
    assert advice["restart_cost_s"] == round(report["load_time"] + 300.0, 3)
    assert 0 < advice["goodput_at_optimum"] < 1 and advice["daly_interval_s"] > 0
    run_dir = Path(report["run"]["dir"])
    assert json.loads((run_dir / "report.json").read_text())["advice"] == advice
    page = Page((run_dir / "report.html").read_text())
    assert page.external == [] and page.sections["timeline"]["svg"] == 2 and "advice" in page.sections
    # The summary, not JSON, on stdout; where the files are.
    assert not result.stdout.lstrip().startswith("{")
    for needle in ("slowest rank", "Daly interval", "goodput", str(run_dir / "report.html")):
        assert needle in result.stdout, needle
