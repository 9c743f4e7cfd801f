"""Names that do not mislead and tables that fit (issue 38, item 5): a run shows its experiment's file beside its
exp_name and says when they disagree; sizes are in one unit family, said; report.html's title is a sentence;
--compare tells sources apart by backend, framework and engine; at 80 columns no figure is split."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pytest
from rich.console import Console
from test_newcomer_report import FIRST_SLOW, _report

from ckpt_bench.benchmark import registry
from ckpt_bench.benchmark.registry import FRAMEWORKS
from ckpt_bench.cli.launch import parse_argv
from ckpt_bench.core.experiment import experiment_label, name_mismatch
from ckpt_bench.launcher import resources
from ckpt_bench.present import html, rows, summary
from ckpt_bench.present.compare import Source, compare
from ckpt_bench.report.engine import stats_by_tier

MIXTRAL_8X7B = "examples/megatron/configs/MI300X/mixtral_8x7B_v0.1-BF16-pretrain.yaml"


def test_exp_name_beside_the_file_and_a_note_where_they_disagree():
    mixtral = Path(MIXTRAL_8X7B)
    assert experiment_label("mixtral_8x22B_v0.1-pretrain", mixtral) == \
        "mixtral_8x22B_v0.1-pretrain (mixtral_8x7B_v0.1-BF16-pretrain.yaml)"
    assert "8x22b not in the file's name" in name_mismatch("mixtral_8x22B_v0.1-pretrain", mixtral)
    # Llama 3.1 70B's file names the run llama3_70B-pretrain: llama3 is not llama3.1.
    assert "llama3 not in" in name_mismatch("llama3_70B-pretrain", Path("llama3.1_70B-BF16-pretrain.yaml"))
    assert name_mismatch("llama2_7B-pretrain", Path("llama2_7B-BF16-pretrain.yaml")) is None
    assert name_mismatch("tiny_gpt", Path("tiny_gpt.yaml")) is None


@pytest.mark.parametrize("path", [("--workload",), ("--config",), ("--framework", "primus", "--config")])
def test_every_path_shows_the_file_and_the_disagreement(upstream_primus, monkeypatch, path):
    monkeypatch.chdir(upstream_primus)
    monkeypatch.setattr(resources, "available_memory", lambda: 2**50)  # planned as on a large host
    values, given = parse_argv([*path, MIXTRAL_8X7B, "--nproc-per-node", "8", "--primus-path", str(upstream_primus),
                                "--plan"])
    launch, _ = registry.build_launch(values, given, os.environ)
    runner = registry.runner_for(launch)
    preview = runner.preview(launch)
    assert "8x22b not in the file's name" in preview["exp_name_differs"]
    if path[0] == "--workload":
        assert preview["experiment"] == "mixtral_8x22B_v0.1-pretrain (mixtral_8x7B_v0.1-BF16-pretrain.yaml)"
        plan = runner.plan(launch)
        assert plan.run_info.experiment == preview["experiment"]
        assert any("8x22b not in the file's name" in note for note in plan.notes)


def test_the_summary_names_the_experiment_and_report_html_its_title_as_a_sentence():
    report = _report(FIRST_SLOW, backend="workload")
    report["config"] |= {"workload": "mixtral_8x22B_v0.1-pretrain", "engine": "torch_dist", "subset": 2,
                         "job_world_size": 8, "experiment": "mixtral_8x22B_v0.1-pretrain (mixtral_8x7B.yaml)",
                         "model": "MoE", "parameters": 46_702_792_704, "active_parameters": 12_879_925_248,
                         "rank_bytes_min": 854_961_024, "rank_bytes_median": 854_961_024,
                         "rank_bytes_max": 1_259_232_256, "largest_rank": 0}
    text = " ".join(_text(report, 120).split())
    assert "experiment mixtral_8x22B_v0.1-pretrain (mixtral_8x7B.yaml)" in text
    assert "world size 2 of the job's 8 ranks" in text
    title = rows.run_title(rows.as_report(report))
    assert title == ("mixtral_8x22B_v0.1-pretrain (mixtral_8x7B.yaml) through torch_dist on 2 of its 8 ranks: a MoE "
                     "model of 46.7 B parameters (12.9 B active), each rank of the job writing 815.35 MiB to 1.17 GiB "
                     "a save (median 815.35 MiB, rank 0 the most)")
    assert f"<h1>Checkpoint benchmark: {title}</h1>" in html.render_report(report)


def _text(report: dict, width: int) -> str:
    out = io.StringIO()
    summary.console = _console(width, out)
    try:
        summary.print_report(report)
    finally:
        summary.console = CONSOLE
    return out.getvalue()


CONSOLE = summary.console


def _console(width: int, out: io.StringIO):
    return lambda file=None: Console(file=out, width=width, highlight=False, soft_wrap=False)


def test_at_80_columns_figures_stay_whole_and_remarks_become_notes():
    saves = [dict(save, bandwidth=1648.5, bytes=14_336 * 2**20) for save in FIRST_SLOW]
    report = _report(saves)
    wide, narrow = _text(report, 120), _text(report, 80)
    assert max(map(len, narrow.splitlines())) <= 80
    table = narrow[:narrow.index("Summary")]
    assert "1,648.5" in table and "14,336.0" in table and "8.600" in table  # whole, on one line each
    assert "[1]" in table and re.search(r"^\[1\] first save", table, re.MULTILINE)  # the remark once, below
    assert "[2]" in table and "[2] cold (evicted from the page cache first)" in table
    assert "why unusual" in wide and "[1]" not in wide  # where it fits, the remark stays in its row


def test_compare_tells_sources_apart_and_fits_80_columns():
    first = _report(FIRST_SLOW, backend="megatron")
    other = _report(FIRST_SLOW, backend="primus")
    names = ["20261128-101010-workload-mixtral_8x22B_v0.1-pretrain-torch_dist",
             "20261128-111111-workload-mixtral_8x22B_v0.1-pretrain-torch_dist"]
    table = compare([Source(names[0], "a", first), Source(names[1], "b", other)], FRAMEWORKS)
    assert [table.sources[1].metrics[name] for name in ("backend", "framework")] == ["primus", "primus"]
    assert table.sources[0].metrics["framework"] is None and table.metrics[:2] == ["backend", "framework"]
    out = io.StringIO()
    summary.console = _console(80, out)
    try:
        summary.print_comparison(table)
    finally:
        summary.console = CONSOLE
    text = out.getvalue()
    assert max(map(len, text.splitlines())) <= 80
    assert f"A: {names[0]}" in text and f"B: {names[1]}" in text  # too long for 80 columns: lettered
    assert json.loads(json.dumps(table.to_json()))["metrics"][0] == "backend"


def test_report_html_says_which_operations_its_timeline_cannot_place():
    """Issue 38: a Megatron-LM run's report.html timeline had no bar for the load, without a word (its load
    lines carry no timestamp; the load-checkpoint timer gives its duration alone)."""
    report = _report(FIRST_SLOW)
    placed = [html.TimedOperation(0, "save", save["iteration"], 10.0 * index, save["block_time"], save["total_time"],
                                  True) for index, save in enumerate(FIRST_SLOW)]
    page = html.render_report(report, placed)
    assert "Not on the time axis, the source giving no start time for it: load 8 (0.500 s)" in page
    assert "Not on the time axis" not in html.render_report(report)  # no clock at all: every bar by its duration


def test_a_small_models_title_counts_millions_and_says_one_size_once():
    from ckpt_bench.report.schema import ModelSize

    tiny = ModelSize("dense", 5_289_472, 5_289_472, 15_867_904, 15_867_904, 15_868_928, 0)
    assert rows.model_words(tiny) == "a dense model of 5.3 M parameters, each rank of the job writing 15.13 MiB a save"


def test_a_wide_phase_table_wraps_its_headers_at_80_columns_and_splits_before_it_cuts_a_figure():
    columns = ["phase", "first save 1 s", "share", "last save 10 s", "share", "load 10 s", "share",
               "steady median s"]
    figures = [["validate+common", "0.012", "0 %", "0.026", "1 %", "0.003", "0 %", "0.011"],
               ["plan+exchange", "1.204", "12 %", "0.020", "1 %", "-", "-", "0.021"],
               ["read", "-", "-", "-", "-", "1.765", "100 %", "-"]]
    for width in (80, 50):
        out = io.StringIO()
        Console(file=out, width=width, force_terminal=False).print(summary._grid("phases", columns, figures))
        text = out.getvalue()
        assert max(map(len, text.splitlines())) <= width
        for row in figures:  # every label and figure whole, on one line
            for cell in row:
                assert re.search(rf"(^|\s){re.escape(cell)}(\s|$)", text, re.MULTILINE), (width, cell)
        words = " ".join(text.split())
        for word in ("first", "save", "steady", "median", "share"):
            assert word in words


def test_tiers_told_apart_at_80_columns():
    """Non-persistent saves beside the persistent one: a tier column (its words wrap, figures stay whole), each
    tier's own figures in the summary, and why the load read its tier."""
    tiers = ["non_persistent_global"] * 3 + ["persistent"]
    saves = [dict(save, tier=tier) for save, tier in zip(FIRST_SLOW, tiers, strict=True)]
    reason = "Megatron-LM restarts from the non-persistent checkpoint when it is not older than the persistent one"
    report = _report(saves, stats_by_tier=stats_by_tier(saves))
    report["load"].update(tier="persistent", tier_reason=reason)
    text = _text(report, 80)
    assert max(map(len, text.splitlines())) <= 80
    table = text[:text.index("Where the time went") if "Where the time went" in text else text.index("Summary")]
    assert re.search(r"^ 2 +non-persistent(?: global)? +8\.500 +8\.600", table, re.MULTILINE) and "global" in table
    assert re.search(r"^ load 8 +persistent +- +0\.500", table, re.MULTILINE) and "the persistent one" in table
    assert "non-persistent global saves (steady, n=2)" in text and "persistent saves (all, n=1)" in text
    assert "tier" not in _text(_report(FIRST_SLOW), 120).split("Summary")[0]  # one tier: no column
