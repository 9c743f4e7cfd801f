"""Checkpoint interval advice: Young's and Daly's formulas, goodput, where C, R and M come from, and the
options' checks (one line, exit code 2, on both command lines)."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from helpers import DATAFLUX_VARIABLES, LOGS, assert_one_line_error, ckpt_report

from ckpt_bench.benchmark import registry
from ckpt_bench.cli.launch import launch, parse_argv
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.report.advice import (
    DEFAULT_RESTART_OVERHEAD_S,
    WHAT_IF_GPUS,
    AdviceOptions,
    add_advice,
    advise,
    daly_interval,
    goodput,
    young_interval,
)


def test_young_and_daly_intervals():
    cost, mtbf = 60.0, 86400.0
    assert young_interval(cost, mtbf) == pytest.approx(math.sqrt(2 * 60 * 86400))
    ratio = cost / (2 * mtbf)
    expected = math.sqrt(2 * cost * mtbf) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - cost
    assert daly_interval(cost, mtbf) == pytest.approx(expected)
    assert daly_interval(cost, mtbf) < young_interval(cost, mtbf)  # Daly subtracts the save itself
    assert daly_interval(500.0, 200.0) == 200.0  # C >= 2M: checkpoint every MTBF


def test_goodput_is_daly_model_and_best_near_daly_interval():
    cost, restart, mtbf = 30.0, 600.0, 4 * 3600.0
    best = daly_interval(cost, mtbf)
    at_best = goodput(best, cost, restart, mtbf)
    # The model: tau / (M e^(R/M) (e^((tau+C)/M) - 1)).
    assert at_best == pytest.approx(best / (mtbf * math.exp(restart / mtbf) * (math.exp((best + cost) / mtbf) - 1)))
    grid = max(goodput(t, cost, restart, mtbf) for t in range(10, 20000, 5))
    assert at_best == pytest.approx(grid, abs=1e-5)
    assert goodput(best / 3, cost, restart, mtbf) < at_best > goodput(best * 3, cost, restart, mtbf)
    # Without failures it is the work fraction; without a checkpoint cost, e^(-R/M).
    assert goodput(100.0, 10.0, restart, 1e12) == pytest.approx(100 / 110, rel=1e-6)
    assert goodput(0.0, 0.0, restart, mtbf) == pytest.approx(math.exp(-restart / mtbf))


def _report(async_save=False, training=None, **extra):
    saves = [{"iteration": i, "complete": True, "block_time": block, "total_time": total}
             for i, (block, total) in enumerate([(5.0, 9.0), (1.0, 4.0), (2.0, 6.0)], start=1)]
    report = {"world_size": 8, "async_save": async_save, "save_interval": 100, "saves": saves, "load_time": 20.0}
    if training:
        report["training"] = training
    report.update(extra)
    return report


def test_sync_cost_is_the_median_total_time_after_the_first_save():
    advice = advise(_report(), AdviceOptions(mtbf_hours=2.0))
    assert advice["checkpoint_cost_s"] == 5.0  # median of 4 and 6; the first save (9 s) pays one-off costs
    assert advice["checkpoint_cost_from"].startswith("save total time")
    assert advice["restart_cost_s"] == 20.0 + DEFAULT_RESTART_OVERHEAD_S
    assert advice["mtbf_s"] == 7200.0
    assert advice["young_interval_s"] == pytest.approx(math.sqrt(2 * 5 * 7200), abs=1e-3)
    assert advice["daly_interval_s"] == pytest.approx(daly_interval(5.0, 7200.0), abs=1e-3)
    assert advice["goodput_at_optimum"] == pytest.approx(goodput(daly_interval(5, 7200), 5, 320, 7200), abs=1e-4)
    assert advice["iteration_time_s"] is None and advice["goodput_at_configured"] is None
    assert "what_if" not in advice


def test_async_cost_is_the_training_visible_cost_when_measured():
    # The loop's total holds the first save's one-off start-up: its block time beyond the later saves'
    # median (5 - 1.5 s) is taken out before dividing by the saves.
    training = {"saves": 3, "save_impact_time": 5.9, "iteration_time_without_saves_median": 0.5}
    advice = advise(_report(async_save=True, training=training), AdviceOptions(mtbf_hours=1.0, restart_overhead=60))
    assert advice["checkpoint_cost_s"] == pytest.approx(0.8)
    assert advice["checkpoint_cost_from"].startswith("(training.save_impact_time - the first save's block time")
    assert advice["restart_cost_s"] == 80.0
    assert advice["iteration_time_s"] == 0.5
    assert advice["daly_interval_iterations"] == round(advice["daly_interval_s"] / 0.5)
    assert advice["configured_interval_iterations"] == 100 and advice["configured_interval_s"] == 50.0
    assert advice["goodput_at_configured"] == pytest.approx(goodput(50.0, 0.8, 80.0, 3600.0), abs=1e-4)
    assert advice["goodput_at_configured"] <= advice["goodput_at_optimum"]


def test_async_cost_excludes_the_first_save_from_the_per_save_iteration_times():
    """Megatron's --training-impact: the one-off first save (8.5 s: megatron-core starting its writer's
    helper process) is left out; each later save costs its iteration and the next beyond a plain one."""
    training = {"saves": 3, "save_impact_time": 9.9, "iteration_time_without_saves_median": 0.2,
                "around_saves": [{"iteration": 1, "iteration_time": 8.7, "next_iteration_time": 0.2},
                                 {"iteration": 2, "iteration_time": 0.6, "next_iteration_time": 0.3},
                                 {"iteration": 3, "iteration_time": 0.8, "next_iteration_time": None}]}
    advice = advise(_report(async_save=True, training=training), AdviceOptions(mtbf_hours=1.0))
    # Iteration 2's next iteration saves itself (3): not counted twice. Costs 0.4 and 0.6 -> median 0.5.
    assert advice["checkpoint_cost_s"] == pytest.approx(0.5)
    assert advice["checkpoint_cost_from"].startswith("training.around_saves (median of the saves after the first)")


def test_async_cost_falls_back_to_the_block_time_and_says_so():
    advice = advise(_report(async_save=True), AdviceOptions(mtbf_hours=1.0))
    assert advice["checkpoint_cost_s"] == 1.5 and advice["checkpoint_cost_from"].startswith("save block time")
    noisy = advise(_report(async_save=True, training={"saves": 3, "save_impact_time": -0.3}),
                   AdviceOptions(mtbf_hours=1.0))
    assert noisy["checkpoint_cost_s"] == 1.5 and any("within noise" in note for note in noisy["notes"])


def test_lightning_training_section_gives_the_iteration_time_and_interval():
    training = {"steps_per_save": 50, "train_steps": 200, "saves": 4, "fit_time_without_saves": 40.0,
                "save_impact_time": 7.5}  # less the first save's 3.5 s beyond a steady save's block time
    advice = advise(_report(async_save=True, training=training, save_interval=None), AdviceOptions(mtbf_hours=3.0))
    assert advice["iteration_time_s"] == 0.2 and advice["configured_interval_iterations"] == 50
    assert advice["configured_interval_s"] == 10.0 and advice["checkpoint_cost_s"] == 1.0


def test_gpu_mttf_gives_the_job_mtbf_and_a_what_if_table():
    advice = advise(_report(), AdviceOptions(gpu_mttf_hours=50000.0, gpus=2048))
    assert advice["mtbf_s"] == pytest.approx(50000 * 3600 / 2048, abs=0.1)
    rows = {row["gpus"]: row for row in advice["what_if"]}
    assert set(rows) == {*WHAT_IF_GPUS, 2048}
    assert rows[32768]["mtbf_s"] == pytest.approx(50000 * 3600 / 32768, abs=0.1)
    goodputs = [rows[n]["goodput_at_optimum"] for n in sorted(rows)]
    assert goodputs == sorted(goodputs, reverse=True)  # larger jobs fail more often
    # Without --gpus the run's own world size is the job.
    assert advise(_report(), AdviceOptions(gpu_mttf_hours=80.0))["mtbf_s"] == 36000.0


def test_no_complete_save_and_reports_without_checkpoints():
    advice = advise({"saves": [], "load_time": None}, AdviceOptions(mtbf_hours=1.0))
    assert advice["checkpoint_cost_s"] is None and advice["daly_interval_s"] is None and advice["notes"]
    assert "advice" not in add_advice({"comms": {}}, AdviceOptions(mtbf_hours=1.0))
    assert "advice" not in add_advice(_report(), AdviceOptions())
    with pytest.raises(ConfigError, match="give --gpus N"):
        add_advice({"saves": []}, AdviceOptions(gpu_mttf_hours=10.0))
    assert "--gpus" in add_advice({"saves": []}, AdviceOptions(gpu_mttf_hours=10.0), strict=False)["advice"]["error"]


@pytest.mark.parametrize("values,needle", [
    ({"mtbf_hours": 0.0}, "--mtbf-hours 0: must be a positive number of hours"),
    ({"mtbf_hours": -5.0}, "--mtbf-hours -5"),
    ({"mtbf_hours": math.nan}, "--mtbf-hours nan"),
    ({"gpu_mttf_hours": -1.0}, "--gpu-mttf-hours -1"),
    ({"gpus": 8}, "--gpus N needs --gpu-mttf-hours H"),
    ({"mtbf_hours": 1.0, "gpu_mttf_hours": 1.0}, "give one of them"),
    ({"mtbf_hours": 1.0, "restart_overhead": -1.0}, "--restart-overhead -1"),
    ({"restart_overhead": 30.0}, "--restart-overhead S needs --mtbf-hours"),
])
def test_advice_options_are_checked(values, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        AdviceOptions(**values)


def test_the_launcher_reads_the_advice_options():
    values, given = parse_argv(["--backend", "dcp", "--model", "tiny", "--gpu-mttf-hours", "1000", "--gpus", "64",
                                "--restart-overhead", "120", "--format", "table"])
    config, _emit = registry.build_launch(values, given, {})
    assert (config.gpu_mttf_hours, config.gpus, config.restart_overhead_s, config.format) == (1000.0, 64, 120.0,
                                                                                              "table")
    assert config.asked


@pytest.mark.parametrize("args,needle", [
    (["--mtbf-hours", "0"], "--mtbf-hours 0: must be a positive number of hours"),
    (["--mtbf-hours", "-2"], "--mtbf-hours -2"),
    (["--gpus", "8"], "--gpus N needs --gpu-mttf-hours H"),
    (["--backend", "comms", "--mtbf-hours", "5"], "--mtbf-hours advises a checkpoint interval: the comms backend"),
])
def test_launcher_refuses_bad_advice_input_with_one_line(args, needle):
    result = CliRunner().invoke(launch, ["--runs-dir", "/nonexistent/runs", *args],
                                env={name: None for name in DATAFLUX_VARIABLES})
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.output


@pytest.mark.parametrize("args,needle", [
    (["--mtbf-hours", "0"], "--mtbf-hours 0"),
    (["--mtbf-hours", "-1"], "--mtbf-hours -1"),
    (["--gpus", "4"], "--gpus N needs --gpu-mttf-hours H"),
])
def test_ckpt_report_refuses_bad_advice_input_with_one_line(args, needle):
    assert_one_line_error(ckpt_report(LOGS / "megatron_2024_untimestamped_sync.log", *args), needle)


def test_a_log_with_iteration_lines_gives_the_iteration_time_and_the_interval_in_iterations():
    """A Megatron-DeepSpeed log prints 'elapsed time per iteration (s)' every 10 iterations from 610 around its
    save at 700: the intervals holding the save (or the iteration after it) and the first one are left out."""
    result = ckpt_report(str(LOGS / "constructed_megatron_deepspeed_orphan_end.log"), "--mtbf-hours", "24",
                         "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["training"]["iteration_time_without_saves_median"] == 6.93
    advice = report["advice"]
    assert advice["iteration_time_s"] == 6.93 and advice["iteration_time_from"].startswith("training.")
    assert advice["daly_interval_iterations"] == round(advice["daly_interval_s"] / 6.93)


def _line(iteration: int, milliseconds: float) -> str:
    """A Primus/Megatron training line as 05_primus_console_rank0_lines_2026.log prints it."""
    return (f" [2026-05-14 10:25:04.903677] iteration {iteration:8d}/    1000 | consumed samples: {iteration * 8:12d}"
            f" | elapsed time per iteration (ms): {milliseconds}/{milliseconds} | throughput per GPU: 365.5 |")


@pytest.mark.parametrize(("feed", "median", "iterations"), [
    ([(10, 9000.0), (20, 1000.0), "save", (30, 5000.0), (40, 1200.0)], 1.1, 20),  # (20, 30] pays the save at 20
    ([(10, 9000.0), (20, 1000.0), (5, 7000.0), (15, 2000.0)], 1.5, 20),  # a restart at 5: its start-up left out
    ([(100, 3000.0)], None, 0),  # one line: only a start-up interval
])
def test_the_logged_iteration_time_leaves_out_start_up_and_saves(feed, median, iterations):
    from ckpt_bench.report.parsers.iterations import IterationTimes

    times = IterationTimes()
    for item in feed:
        times.save_started() if item == "save" else times.line(_line(*item))
    assert times.median() == median and times.iterations == iterations
    assert (times.training() or {}).get("iteration_time_without_saves_median") == median


def test_logged_iteration_times_are_counted_not_listed():
    from ckpt_bench.report.parsers.iterations import IterationTimes

    times = IterationTimes()
    for iteration in range(1, 100_001):
        times.line(_line(iteration, 2031.4 if iteration % 2 else 2031.5))
    assert len(times.seconds) == 2 and times.iterations == 99_999
    assert times.median() == 2.0315  # the lines 2 to 100,000: 50,000 intervals at 2.0315 s, 49,999 at 2.0314


@pytest.mark.parametrize(("cost_from", "restart_from", "basis"), [
    ("save total time projected for the whole job", "load projected for the whole job 1 s + restart overhead 300 s",
     "C and R projected at the job's size, held"),
    ("save total time projected for the whole job", "load time 1 s + restart overhead 300 s",
     "C projected at the job's size and this run's R, held"),
    ("save total time (median of steady saves)", "load projected for the whole job 1 s + restart overhead 300 s",
     "R projected at the job's size and this run's C, held"),
    ("save total time (median of steady saves)", "load time 1 s + restart overhead 300 s", "this run's C and R, held"),
])
def test_the_what_if_table_says_which_of_c_and_r_were_projected(cost_from, restart_from, basis):
    from ckpt_bench.present.rows import what_if_basis
    from ckpt_bench.report.schema import Advice

    assert what_if_basis(Advice(checkpoint_cost_from=cost_from, restart_cost_from=restart_from)) == basis
