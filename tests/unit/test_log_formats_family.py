"""The whole Megatron family (issue 21): Megatron-DeepSpeed and DeepSpeed, NeMo 2 under nemo-run and
ft_launcher, snippets without a header, what each source's figure measures (`source_semantics`), and
ends without their start. Every expected number is the one tests/fixtures/logs/FORMATS.md gives for its
fixture (`real_*`: public logs copied unchanged; `constructed_*`: built from the sources' format strings);
a time of 1 s resolution (a NeMo line prefix) is held to that resolution."""

from __future__ import annotations

import pytest
from helpers import LOGS

from ckpt_bench.benchmark.registry import FRAMEWORKS
from ckpt_bench.core.events import EventKind, TimeSource
from ckpt_bench.present.compare import Source, compare
from ckpt_bench.present.rows import headline_rows, save_rows
from ckpt_bench.report.assembly import log_report
from ckpt_bench.report.engine import build_report
from ckpt_bench.report.parsers.deepspeed import DeepSpeedParser
from ckpt_bench.report.parsers.launchers import split
from ckpt_bench.report.parsers.lines import megatron_time_ns
from ckpt_bench.report.parsers.megatron import MegatronParser
from ckpt_bench.report.parsers.nemo import NemoParser
from ckpt_bench.report.parsers.session import LogSession
from ckpt_bench.report.parsers.sources import NoEvents, log_sources, resolve
from ckpt_bench.report.parsers.torchtitan import TorchtitanParser
from ckpt_bench.report.schema import Report

DURABLE = {"block_time": "durable", "total_time": "durable"}
ASYNC_CALL = {"block_time": "call", "total_time": "durable"}


def saves(report: dict) -> list[tuple]:
    return [(s["iteration"], s["complete"], s["block_time"], s["total_time"]) for s in report["saves"]]


def feed(parser, lines: list[str]) -> list:
    return [e for seq, line in enumerate(lines, 1) for e in parser.feed(line, seq)] + parser.finish()


def near(values: list[float | None], expected: list[float], within: float) -> bool:
    return len(values) == len(expected) and all(v is not None and abs(v - e) <= within
                                                for v, e in zip(values, expected, strict=True))


@pytest.mark.parametrize(("name", "parser_class"), [
    ("real_megatron_deepspeed_bigscience_tr1_13b_save.log", DeepSpeedParser),
    ("real_megatron_deepspeed_no_checkpoint_load_timer.log", DeepSpeedParser),
    ("real_megatron_deepspeed_torch_engine_final_save.log", DeepSpeedParser),
    ("constructed_megatron_deepspeed_pipeline_sync_saves_load.log", DeepSpeedParser),
    ("constructed_megatron_deepspeed_orphan_end.log", DeepSpeedParser),
    ("constructed_megatron_lm_no_checkpoint_load_timer.log", MegatronParser),
    ("real_nemo2_evo2_async_saves_finalized_together.log", NemoParser),
    ("real_nemo2_bionemo_esm2_orphan_finalize_ends.log", NemoParser),
    ("constructed_nemo2_nemorun_ft_crash_restart_restore.log", NemoParser),
    ("constructed_nemo2_nemorun_ft_preemption_save.log", NemoParser),
    ("real_torchtitan_last_step_snippet_no_titan_tag.log", TorchtitanParser),
])
def test_each_shape_is_detected_by_content(name, parser_class):
    assert resolve(LOGS / name).parser_class is parser_class


@pytest.mark.parametrize(("line", "rank", "rest"), [
    (" 0: saving checkpoint", None, "saving checkpoint"),
    ("13:     save-checkpoint ...: (1.00, 2.00)", None, "    save-checkpoint ...: (1.00, 2.00)"),
    ("retrain_ft/0 [default3]:[rank3]: Traceback (most recent call last):", 3, "Traceback (most recent call last):"),
    ("retrain_ft/0 [default0]:[NeMo I 2025-08-12 09:01:50 nemo_logging:393] x", 0, "[NeMo I 2025-08-12 09:01:50 "
                                                                                "nemo_logging:393] x"),
    ("retrain_ft/0 [2025-08-12 09:03:36,590] [INFO] [ft_launcher2841@n] x", None,
     "[2025-08-12 09:03:36,590] [INFO] [ft_launcher2841@n] x"),
    ("[rank1]:2025-04-01 00:25:54,090 - root - INFO - x", 1, "2025-04-01 00:25:54,090 - root - INFO - x"),
    ("[rank0]:    save-checkpoint ...: (1.00, 2.00)", 0, "   save-checkpoint ...: (1.00, 2.00)"),  # a space is its
    ("50/100 done", None, "50/100 done"),
    ("[2023-06-12 10:14:05,997] [INFO] [logging.py:96:log_dist] x", None,
     "[2023-06-12 10:14:05,997] [INFO] [logging.py:96:log_dist] x"),
])
def test_launcher_prefixes_are_stripped_in_one_place(line, rank, rest):
    assert split(line) == (rank, rest)


# -- Megatron-DeepSpeed / DeepSpeed -------------------------------------------------------------------------


def test_deepspeed_pipeline_saves_from_about_to_be_saved_to_the_last_ready():
    report = log_report([LOGS / "constructed_megatron_deepspeed_pipeline_sync_saves_load.log"])
    # The timer (barrier to barrier) is a timed save's duration; the untimed save at the end of training is
    # its DeepSpeed span: `about to be saved!` 10:37:29.715 -> the 4th `is ready now!` 10:37:35.386, not the
    # first one 7 ms after the start.
    assert saves(report) == [(300, True, 5.769, 5.769), (400, True, 6.113, 6.113), (500, True, 5.888, 5.888),
                             (500, True, 5.671, 5.671)]
    assert [s["time_source"] for s in report["saves"]] == ["megatron-timer"] * 3 + ["deepspeed-timestamp"]
    assert all(s["source_semantics"] == DURABLE for s in report["saves"])
    assert report["world_size"] == 4 and report["num_saved"] == 4
    # The resume: DeepSpeed's first `Loading` to the last `Loaded`, timed by its load-checkpoint timer.
    assert (report["load"]["iteration"], report["load"]["time"], report["load"]["time_source"]) == (
        200, 2.764, "megatron-timer")


def test_deepspeed_save_is_placed_by_deepspeeds_lines_not_by_saving_model_checkpoint():
    events = feed(DeepSpeedParser(), (LOGS / "constructed_megatron_deepspeed_pipeline_sync_saves_load.log")
                  .read_text().splitlines())
    start = next(e for e in events if e.kind == EventKind.SAVE_START and e.iteration == 300)
    end = next(e for e in events if e.kind == EventKind.SAVE_END and e.iteration == 300 and e.wall_ns)
    assert start.wall_ns == megatron_time_ns("2023-06-12 10:14:05.997")  # not `Saving model checkpoint` (07.823)
    assert end.wall_ns == megatron_time_ns("2023-06-12 10:14:11.727")  # the last ready, not 10:14:06.004


def test_real_megatron_deepspeed_final_save_of_the_torch_engine():
    report = log_report([LOGS / "real_megatron_deepspeed_torch_engine_final_save.log"])
    # 07:22:31.767 `about to be saved!` -> 07:22:37.720, the last of the `is ready now!` lines (the first two
    # came 7 ms after the start); no timer: the save at the end of training is untimed.
    assert saves(report) == [(2500, True, 5.953, 5.953)]
    assert report["saves"][0]["time_source"] == "deepspeed-timestamp"
    assert report["load"] is None  # `load-checkpoint (1.04, 1.37)` with an empty --load: no load
    assert report["world_size"] == 8 and report["data_parallel_size"] == 2


def test_real_bigscience_save_is_its_old_style_timer():
    report = log_report([LOGS / "real_megatron_deepspeed_bigscience_tr1_13b_save.log"])
    # `time (ms) | save-checkpoint: 57514.53`; the `Saving model checkpoint` stamp inside the save is no start.
    assert saves(report) == [(33241, True, 57.515, 57.515)]
    assert report["saves"][0]["time_source"] == "megatron-timer"
    assert report["saves"][0]["source_semantics"] == DURABLE
    assert report["load"] is None and report["world_size"] is None


def test_real_load_timer_without_a_checkpoint_is_no_load():
    path = LOGS / "real_megatron_deepspeed_no_checkpoint_load_timer.log"
    with pytest.raises(NoEvents):  # `could not find the metadata file`, then `time (ms) | load-checkpoint: 11.96`
        log_report([path])
    session = LogSession()
    assert list(session.events(log_sources([path]))) == []
    assert session.run_info["world_size"] == 64


def test_megatron_lm_load_timer_without_a_checkpoint_is_no_load():
    report = log_report([LOGS / "constructed_megatron_lm_no_checkpoint_load_timer.log"])
    assert saves(report) == [(50, True, 18.767, 18.767), (100, True, 17.892, 17.892)]
    assert report["load"] is None and report["world_size"] == 8


def test_an_end_without_its_start_is_unmatched_not_a_save():
    report = log_report([LOGS / "constructed_megatron_deepspeed_orphan_end.log"])
    # The log begins in iteration 600's save: its end line and its timer (5912.40 ms) are no save, and the
    # timer does not go to 700.
    assert saves(report) == [(700, True, 5.739, 5.739)]
    assert report["unmatched_ends"] == [{"kind": "save_end", "rank": 0, "iteration": 600, "path": "/data/ckpt/gpt-1b3",
                                         "time": "2023-06-12T11:24:04.264", "time_source": "deepspeed-timestamp"}]
    assert report["num_saved"] == 1 and report["stats"]["total_time"]["n"] == 1


def test_deepspeed_alone_reads_a_save_from_its_own_lines():
    ds = "[2024-01-02 10:00:0{}] [INFO] [{}] "
    report = build_report(feed(DeepSpeedParser(), [
        ds.format("0,000", "logging.py:96:log_dist") + "[Rank 0] [Torch] Checkpoint global_step7 is about to be saved!",
        ds.format("0,010", "torch_checkpoint_engine.py:33:commit") + "[Torch] Checkpoint global_step7 is ready now!",
        ds.format("2,500", "torch_checkpoint_engine.py:33:commit") + "[Torch] Checkpoint global_step7 is ready now!",
    ]))
    assert saves(report) == [(7, True, 2.5, 2.5)]


# -- NeMo 2 under nemo-run and ft_launcher ------------------------------------------------------------------


def test_nemo_crash_worker_group_restart_and_restore():
    report = log_report([LOGS / "constructed_nemo2_nemorun_ft_crash_restart_restore.log"])
    assert [s["iteration"] for s in report["saves"]] == [19, 19, 39, 39, 59, 59]
    assert [s["block_time"] for s in report["saves"]] == [2.514, 2.471, 2.377, 2.402, 2.448, 2.436]
    assert near([s["total_time"] for s in report["saves"]], [12.0, 12.3, 12.3, 14.7, 30.6, 28.0], within=1.0)
    assert all(s["source_semantics"] == ASYNC_CALL for s in report["saves"])
    # The restore after the restart: `Restoring states ... step=39-...-last`, NeMo's load call 13.874 s.
    assert (report["load"]["iteration"], report["load"]["time"], report["loads"]) == (39, 13.874, None)
    assert report["world_size"] == 8
    notes = report["notes"]
    assert any(n.startswith("the launcher restarted the worker group 1 time (worker group FAILED, 3 of 3")
               for n in notes)
    assert ("2 async saves were still being written at the end of training and finalized synchronously: that "
            "took 18.442 s") in notes


def test_nemo_restore_lines_alone_are_an_untimed_load():
    report = build_report(feed(NemoParser(), [
        "job/0 [default0]:Restoring states from the checkpoint path at /c/model--step=39-last",
        "job/0 [default0]:Restored all states from the checkpoint at /c/model--step=39-last"]))
    assert (report["load"]["iteration"], report["load"]["complete"], report["load"]["time"]) == (39, True, None)


def test_nemo_worker_group_restart_ends_the_async_saves_in_flight():
    p = "job/0 [default0]:[NeMo I 2026-02-17 10:00:00 nemo_logging:393] "
    report = build_report(feed(NemoParser(), [
        p + "Global Checkpoint Save : Rank: 0 : Iteration: 9 : Start time: 1.000s : Save duration: 0.500s",
        p + "Scheduled async checkpoint save for /c/s9.ckpt",
        "job/0 [2026-02-17 10:00:05,000] [INFO] [ft_launcher1@n] [default] Worker group FAILED. 2/3 attempts left; "
        "will restart worker group"]))
    assert saves(report) == [(9, False, 0.5, None)]
    assert report["saves"][0]["error"] == "the launcher restarted the worker group before this async save finished"


def test_nemo_preemption_save_blocks_until_durable():
    report = log_report([LOGS / "constructed_nemo2_nemorun_ft_preemption_save.log"])
    assert [s["iteration"] for s in report["saves"]] == [99, 99, 137]
    assert [s["block_time"] for s in report["saves"]][:2] == [6.12, 5.98]
    preemption = report["saves"][2]
    # call 5.833 s + scheduling + the blocking wait of 31.904 s: 38.4 s, at the prefix's 1 s.
    assert near([preemption["block_time"], preemption["total_time"]], [38.4, 38.4], within=1.0)
    assert preemption["block_time"] == preemption["total_time"] and preemption["source_semantics"] == DURABLE
    assert near([s["total_time"] for s in report["saves"][:2]], [44.7, 42.3], within=1.0)
    assert report["world_size"] == 8 and report["load"] is None
    notes = report["notes"]
    assert any("saved on preemption" in n and "NeMo waited 31.904 s" in n for n in notes)
    assert any(n.startswith("NeMo's async finalization") and "2 polls finalized saves, 0.012-0.016 s" in n
               for n in notes)  # 31.904 s is the preemption's wait, not a poll
    assert "the launcher passed signal 15 on to the workers (a preemption or a cancelled job)" in notes


def test_real_evo2_async_saves_finalized_together_at_the_end():
    report = log_report([LOGS / "real_nemo2_evo2_async_saves_finalized_together.log"])
    assert [s["iteration"] for s in report["saves"]] == [4, 9, 9]
    assert [s["block_time"] for s in report["saves"]] == [0.217, 0.476, 2.746]  # the call: `Save duration`
    assert near([s["total_time"] for s in report["saves"]], [360.0, 368.3, 394.2], within=1.0)
    assert all(s["source_semantics"] == ASYNC_CALL for s in report["saves"])
    # One blocking wait for the three, counted once; the 0.00x s lines before are polls.
    assert ("3 async saves were still being written at the end of training and finalized synchronously: that "
            "took 344.980 s") in report["notes"]
    assert any(n.endswith("7 found nothing finished, 0.000-0.002 s each, 0.003 s in all") for n in report["notes"])
    assert (report["load"]["time"], report["load"]["time_source"]) == (22.456, "nemo-clock")
    assert any(n.startswith("the load of nemo2_evo2_1b_8k (model weights only) was a selective restore")
               for n in report["notes"])
    assert report["world_size"] == 1
    assert any(n.startswith("block_time of the saves at iterations 4, 9, 9 is the source's 'call' figure")
               for n in report["notes"])


def test_real_esm2_ends_without_their_saves_are_unmatched():
    report = log_report([LOGS / "real_nemo2_bionemo_esm2_orphan_finalize_ends.log"])
    assert report["saves"] == [] and report["num_saved"] == 0 and report["load"] is None
    assert [(e["iteration"], e["time"][11:19]) for e in report["unmatched_ends"]] == [
        (49, "23:42:54"), (49, "23:43:04"), (74, "23:43:22"), (74, "23:43:22"), (99, "23:43:23"), (99, "23:43:25")]
    assert report["world_size"] == 2
    assert ("6 async saves were still being written at the end of training (6 of them unmatched ends) and "
            "finalized synchronously") in report["notes"]


# -- snippets and what a figure measures --------------------------------------------------------------------


def test_real_torchtitan_snippet_without_its_tag():
    report = log_report([LOGS / "real_torchtitan_last_step_snippet_no_titan_tag.log"])
    # `Saving a full checkpoint at last step, step 644.` 00:25:54.090 -> `Finished saving ... )in 5.53 seconds.`
    # 00:25:59.616: the last step's save is synchronous, the crash after it at teardown is no failed save.
    assert saves(report) == [(644, True, 5.526, 5.526)]
    assert report["saves"][0]["source_semantics"] == DURABLE and report["load"] is None


@pytest.mark.parametrize("lines", [
    ["[NeMo I 2026-02-17 10:00:03 nemo_logging:393] Global Checkpoint Save : Rank: 0 : Iteration: 5 : Start time: "
     "1.000s : Save duration: 3.000s"],
    ["Global Checkpoint Save : Rank: 0 : Iteration: 5 : Start time: 1.000s : Save duration: 3.000s"],
], ids=["nemo prefix", "nemo wording alone"])
def test_a_nemo_snippet_is_read_by_its_wording(tmp_path, lines):
    path = tmp_path / "pasted.txt"
    path.write_text("\n".join(lines) + "\n")
    assert resolve(path).parser_class is NemoParser


def test_megatron_async_timer_is_a_schedule_time_never_a_save_time():
    report = build_report(feed(MegatronParser(), [
        "saving checkpoint at iteration     100 to /c in torch_dist format",
        "  scheduled an async checkpoint save at iteration     100 to /c",
        "(min, max) time across ranks (ms):",
        "    save-checkpoint ................................: (900.00, 1000.00)",
        "  successfully saved checkpoint from iteration     100 to /c [ t 1/1, p 1/1 ]"]))
    # NVIDIA/Megatron-LM#1763: under --async-save the timer stops once the save is scheduled.
    assert saves(report) == [(100, True, 1.0, None)]
    assert report["saves"][0]["source_semantics"] == {"block_time": "schedule", "total_time": "durable"}


def test_megatron_async_request_timer_names_say_schedule():
    report = build_report(feed(MegatronParser(), [
        "saving checkpoint at iteration     100 to /c in torch_dist format",
        "(min, max) time across ranks (ms):",
        "    save-checkpoint-async-request ..................: (900.00, 1000.00)",
        "  successfully saved checkpoint from iteration     100 to /c [ t 1/1, p 1/1 ]"]))
    assert saves(report) == [(100, True, 1.0, None)]
    assert report["saves"][0]["source_semantics"]["block_time"] == "schedule"


def test_torchtitan_async_staging_is_said_so():
    report = log_report([LOGS / "torchtitan_2026_async_two_ranks.log"])
    assert [s["source_semantics"] for s in report["saves"]] == [
        {"block_time": "staging", "total_time": "durable"}] * 2 + [DURABLE]


def test_event_sources_name_deepspeeds_clock():
    events = feed(DeepSpeedParser(), (LOGS / "real_megatron_deepspeed_torch_engine_final_save.log")
                  .read_text().splitlines())
    assert {e.source for e in events} == {TimeSource.DEEPSPEED_TIMESTAMP}


def test_nemo_async_saves_without_their_duration_line_are_paired_by_path():
    """NeMo printing no 'Global Checkpoint Save' (issue 30, item 4): each 'Scheduled async checkpoint save for
    PATH' is a save, ended by the 'finalized' line naming its path; a worker-group restart ends the two in flight;
    the preemption save runs from 'Preemption detected' to its end. Starts not in the log leave times null."""
    report = log_report([LOGS / "constructed_nemo2_nemorun_ft_async_without_save_duration.log"])
    assert saves(report) == [(49, True, None, None), (49, True, None, None), (99, False, None, None),
                             (99, False, None, None), (99, True, None, None), (117, True, 12.0, 12.0)]
    assert report["saves"][5]["source_semantics"] == DURABLE and "unmatched_ends" not in report
    assert report["saves"][2]["error"] == "the launcher restarted the worker group before this async save finished"
    assert report["async_save"] is True and report["world_size"] == 4 and report["num_saved"] == 4
    notes = report["notes"]
    assert any(n.startswith("iteration 49 was saved 2 times") for n in notes)  # top-k and -last: two saves
    assert any(n.startswith("3 async saves had no 'Global Checkpoint Save' line") and "9.000-12.000 s after" in n
               for n in notes)
    assert any("saved on preemption" in n and "NeMo waited 9.104 s" in n for n in notes)
    # What is known of the saves without a start: their part after the call returned, a lower bound (issue 39)
    assert [s.get("total_time_at_least") for s in report["saves"]] == [12.0, 12.0, None, None, 9.0, None]
    assert report["stats"]["excluding_first"]["total_time_at_least"]["median"] == 10.5


def test_nemo_async_saves_without_a_start_carry_their_known_part_as_a_lower_bound():
    """Issue 39, item 3: NeMo 2 under nemo-run and ft_launcher, 'Scheduled' then 'finalized' 8 s later, a second
    save finalized synchronously at the end ~1 s after its call returned: both saves' total times stay unknown,
    and the part after the call is a field (its resolution, what it leaves out) the summary, --compare and sweeps
    read."""

    p = "retrain_ft/0 [default0]:[NeMo I 2025-10-07 07:{} nemo_logging:393] "
    path = "/lustre/ckpt/model_name=0--step={}-consumed_samples={}.0-last.ckpt"
    report = build_report(feed(NemoParser(), [
        "retrain_ft/0 [2025-10-07 07:00:02,118] [INFO] [ft_launcher3310@node] Starting elastic_operator",
        p.format("02:31") + "Scheduled async checkpoint save for " + path.format(49, 12800),
        p.format("02:39") + f"Async checkpoint save for step 50 ({path.format(49, 12800)}) finalized successfully.",
        p.format("04:33") + "Scheduled async checkpoint save for " + path.format(99, 25600),
        p.format("04:33") + "Pending async checkpoint saves. Finalizing them synchronously now",
        p.format("04:34") + f"Async checkpoint save for step 100 ({path.format(99, 25600)}) finalized successfully.",
        p.format("04:34") + "Async finalization time took 0.912 s",
    ]))
    first, second = report["saves"]
    assert (first["total_time"], first["total_time_at_least"], second["total_time_at_least"]) == (None, 8.0, 1.0)
    assert first["time_resolution_s"] == 1.0 and first["time_source"] == "nemo-prefix"
    assert "its start is not in the source" in first["total_time_at_least_span"]
    assert report["save_total_time"] is None and report["save_total_time_at_least"] == 1.0
    assert report["stats"]["excluding_first"]["total_time_at_least"]["median"] == 1.0
    rows = dict(headline_rows(Report.from_json(report)))
    assert "total at least 1.000 s" in rows["last save"] and "total at least 1.000 s" in rows["steady save (n=1)"]
    assert [row[2] for row in save_rows(Report.from_json(report))] == [">= 8.000", ">= 1.000"]
    compared = compare([Source("a", "a", report), Source("b", "b", report)], FRAMEWORKS)
    assert "steady_total_time_at_least" in compared.metrics
    assert [column.metrics["steady_total_time_at_least"] for column in compared.sources] == [1.0, 1.0]


def test_nemo_finalized_line_without_a_path_ends_the_save_of_its_step():
    """NeMo before 2025: 'Async checkpoint save for step N finalized successfully.' names no path: it ends the
    save scheduled for the file of step=N-1."""
    p = "[NeMo I 2025-05-22 20:{} model_checkpoint:{}] "
    report = build_report(feed(NemoParser(), [
        p.format("08:53", 497) + "Scheduled async checkpoint save for /ckpt/model_name=0--step=18-last.ckpt",
        p.format("09:41", 522) + "Async checkpoint save for step 19 finalized successfully."]))
    assert saves(report) == [(18, True, None, None)] and not report.get("unmatched_ends")
