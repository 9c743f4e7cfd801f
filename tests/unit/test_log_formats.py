"""The log formats beside Megatron's stdout and Primus: Megatron under `srun --label`, NeMo 2 /
BioNeMo, torchtitan (each version's wording, and behind Primus's prefix). Each is detected by its
content; the fixtures are constructed (tests/fixtures/logs/README.md)."""

from __future__ import annotations

import pytest
from helpers import LOGS

from ckpt_bench.core.events import OVERLAPS_PREVIOUS, EventKind, TimeSource
from ckpt_bench.report.assembly import log_report
from ckpt_bench.report.engine import build_report
from ckpt_bench.report.parsers.megatron import MegatronParser
from ckpt_bench.report.parsers.nemo import NemoParser
from ckpt_bench.report.parsers.primus import PrimusParser
from ckpt_bench.report.parsers.sources import resolve
from ckpt_bench.report.parsers.srun import SrunMegatronParser
from ckpt_bench.report.parsers.torchtitan import TorchtitanParser


def saves(report: dict) -> list[tuple]:
    return [(s["iteration"], s["complete"], s["block_time"], s["total_time"]) for s in report["saves"]]


def feed(parser, lines: list[str]) -> list:
    return [e for seq, line in enumerate(lines, 1) for e in parser.feed(line, seq)] + parser.finish()


def log_report_of(parser, lines: list[str]) -> dict:
    return build_report(feed(parser, lines))


@pytest.mark.parametrize(("name", "parser_class"), [
    ("megatron_2026_srun_label.log", SrunMegatronParser),
    ("nemo2_async_topk_last.log", NemoParser),
    ("nemo2_sync_bionemo.log", NemoParser),
    ("torchtitan_2024_04_sync.log", TorchtitanParser),
    ("torchtitan_2025_01_async_background.log", TorchtitanParser),
    ("torchtitan_2025_10_sync.log", TorchtitanParser),
    ("torchtitan_2026_async_two_ranks.log", TorchtitanParser),
    ("primus_torchtitan_console.log", PrimusParser),
    ("megatron_2026_local_nonpersistent.log", MegatronParser),
    ("megatron_current_timestamped_sync.log", MegatronParser),
    ("primus_console_interleaved_async.log", PrimusParser),
])
def test_each_format_is_detected_by_content(name, parser_class):
    assert resolve(LOGS / name).parser_class is parser_class


# -- Megatron-LM under srun --label -------------------------------------------------------------------------


def test_srun_labels_with_timers_on_the_last_rank():
    report = log_report([LOGS / "megatron_2026_srun_label.log"])
    # 100: both ends timestamped (the task-15 timer is not needed); 200: per-rank timer of task 15.
    assert saves(report) == [(100, True, 1.25, 20.5), (200, True, 1.4, 15.0)]
    second = report["saves"][1]
    assert second["ranks"] == 16 and second["block_time_per_rank"]["max_rank"] == 7
    assert second["time_source"] == "megatron-timer+megatron-timestamp"
    assert report["async_save"] is True and report["world_size"] == 16 and report["accurate"] is True
    assert report["config"]["use_persistent_ckpt_worker"] is True
    assert report["config"]["ckpt_assume_constant_structure"] is True


def test_srun_label_is_stripped_before_the_megatron_grammar():
    lines = [" 0: [2026-05-14 10:00:00.000000] saving checkpoint at iteration     100 to /c in torch_dist format",
             "13: (min, max) time across ranks (ms):",
             "13:     save-checkpoint ................................: (1000.00, 2000.00)",
             " 0:   successfully saved checkpoint from iteration     100 to /c [ t 1/1, gtp_remat 1/1, p 1/1 ]"]
    events = feed(SrunMegatronParser(), lines)
    timer = next(e for e in events if e.source == TimeSource.MEGATRON_TIMER)
    assert (timer.kind, timer.elapsed_ns, timer.iteration) == (EventKind.SAVE_BLOCK_END, 2 * 10**9, 100)


# -- NeMo 2 -------------------------------------------------------------------------------------------------


def test_nemo_async_top_k_and_last_copies_are_two_saves_each_counted_once():
    report = log_report([LOGS / "nemo2_async_topk_last.log"])
    # Block: `Save duration` (1 ms); total: prefix of `Successfully saved` - (prefix of the save - duration).
    assert saves(report) == [(24, True, 2.537, 20.537), (24, True, 2.48, 20.48), (49, True, 2.6, 21.6)]
    assert report["num_saved"] == 3  # not 6: `iteration 24` and `step 25` lines end the same save
    assert [s["overlapped"] for s in report["saves"]] == [False, True, False]  # -last began while top-k wrote
    assert report["accurate"] is False
    assert report["time_source"] == "nemo-clock+nemo-prefix" and report["time_resolution_s"] == 1.0
    assert report["async_save"] is True and report["save"] == "/results/llama3_8b/checkpoints"
    notes = report["notes"]
    assert any(n.startswith("NeMo numbers each async save twice: iteration N") for n in notes)
    assert any(n.startswith("iteration 24 was saved 2 times, to ") and n.endswith("each is a save of its own")
               for n in notes)


def test_nemo_restore_line():
    report = log_report([LOGS / "nemo2_async_topk_last.log"])
    assert (report["load_time"], report["load"]["time_source"], report["load"]["complete"]) == (11.88, "nemo-clock",
                                                                                                True)


def test_nemo_async_finalization_times():
    notes = log_report([LOGS / "nemo2_async_topk_last.log"])["notes"]
    assert ("NeMo's async finalization ('Async finalization time took', training waits for each poll): 2 polls "
            "finalized saves, 0.011-0.013 s each, 0.024 s in all; 3 found nothing finished, 0.000 s each, "
            "0.000 s in all") in notes
    assert ("1 async save was still being written at the end of training and finalized synchronously: "
            "that took 18.204 s") in notes


def test_nemo_sync_saves_of_two_ranks():
    report = log_report([LOGS / "nemo2_sync_bionemo.log"])
    assert saves(report) == [(100, True, 5.4, 5.4), (200, True, 4.987, 4.987)]
    assert report["saves"][0]["block_time_per_rank"] == {"max": 5.4, "max_rank": 1, "min": 5.321, "min_rank": 0}
    assert report["time_source"] == "nemo-clock" and report["time_resolution_s"] == 0.001
    assert report["async_save"] is False


def test_nemo_two_numberings_pair_by_path_not_by_number():
    """The `step 25` line of copy A must not end copy B (also at iteration 24, step 25)."""
    p = "[NeMo I 2026-02-17 10:00:{:02d} nemo_logging:393] "
    save = "Global Checkpoint Save : Rank: 0 : Iteration: 24 : Start time: {}.000s : Save duration: 1.000s"
    lines = [p.format(0) + save.format(1),
             p.format(0) + "Scheduled async checkpoint save for /c/a.ckpt",
             p.format(1) + save.format(2),
             p.format(1) + "Scheduled async checkpoint save for /c/a-last.ckpt",
             p.format(9) + "Async checkpoint save for step 25 (/c/a.ckpt) finalized successfully.",
             p.format(30) + "Successfully saved checkpoint from iteration      24 to /c/a-last.ckpt",
             p.format(30) + "Async checkpoint save for step 25 (/c/a-last.ckpt) finalized successfully."]
    events = feed(NemoParser(), lines)
    ends = [(e.path, e.wall_ns % 60_000_000_000 // 10**9) for e in events if e.kind == EventKind.SAVE_END]
    assert ends == [("/c/a.ckpt", 9), ("/c/a-last.ckpt", 30)]
    starts = [e for e in events if e.kind == EventKind.SAVE_START]
    assert [bool(e.extra.get(OVERLAPS_PREVIOUS)) for e in starts] == [False, True]


def test_nemo_async_save_cut_by_the_end_of_the_log_is_incomplete():
    p = "[NeMo I 2026-02-17 10:00:00 nemo_logging:393] "
    report = log_report_of(NemoParser(), [
        p + "Global Checkpoint Save : Rank: 0 : Iteration: 9 : Start time: 1.000s : Save duration: 0.500s",
        p + "Scheduled async checkpoint save for /c/s9.ckpt",
        p + "Async finalization time took 0.000 s"])
    assert saves(report) == [(9, False, 0.5, None)]
    assert report["saves"][0]["error"].startswith("the log ends before this async save finished")


def test_nemo_lines_beside_megatron_wording_are_read_whole():
    """Megatron-Bridge prints Megatron-LM's wording; NeMo's own lines may sit beside it."""
    lines = ["[NeMo W 2026-02-17 10:00:00 nemo_logging:405] some NeMo warning",
             "saving checkpoint at iteration     100 to /c in torch_dist format",
             "  successfully saved checkpoint from iteration     100 to /c [ t 1/1, p 1/1 ]",
             "(min, max) time across ranks (ms):",
             "    save-checkpoint ................................: (1000.00, 2500.00)"]
    assert saves(log_report_of(NemoParser(), lines)) == [(100, True, 2.5, 2.5)]



# -- torchtitan ---------------------------------------------------------------------------------------------


def test_torchtitan_2024_wording_with_step_in_the_save_line():
    report = log_report([LOGS / "torchtitan_2024_04_sync.log"])
    assert saves(report) == [(20, True, 3.21, 3.21), (30, True, 2.0, 2.0)]
    assert (report["load"]["iteration"], report["load_time"]) == (10, 1.5)
    assert report["time_source"] == "torchtitan-timestamp" and report["time_resolution_s"] == 0.001


def test_torchtitan_2025_async_background_process():
    report = log_report([LOGS / "torchtitan_2025_01_async_background.log"])
    # No start line: the step is the `step: N` line's; block: `in X seconds` (10 ms); total: to the
    # background process's line (1 ms timestamps). The last step's save is synchronous.
    assert saves(report) == [(10, True, 0.85, 5.1), (20, True, 0.8, 5.6), (30, True, 5.0, 5.0)]
    assert report["time_resolution_s"] == 0.01


def test_torchtitan_2025_last_step_save_has_no_end():
    report = log_report([LOGS / "torchtitan_2025_10_sync.log"])
    assert saves(report) == [(20, True, 2.5, 2.5), (30, False, None, None)]
    assert report["saves"][1]["error"].startswith("torchtitan (2025-02 to 2026-06) logs no end for the last step")
    assert (report["load"]["iteration"], report["load_time"]) == (10, 2.25)  # the step of `.../step-10`
    assert any(n.startswith("torchtitan logs one duration for 'saving the checkpoint (or staging") for n in
               report["notes"])


def test_torchtitan_2026_async_staging_on_two_ranks():
    report = log_report([LOGS / "torchtitan_2026_async_two_ranks.log"])
    # Staging is the blocking part; the write's end is not logged: complete (the next save waited for
    # it), total time unknown. Steps from each rank's own `step:` (or `validate step:`) line.
    assert saves(report) == [(10, True, 0.43, None), (20, True, 0.465, None), (30, True, 6.2, 6.2)]
    assert [s["ranks"] for s in report["saves"]] == [2, 2, 2]
    assert report["saves"][1]["block_time_per_rank"]["max_rank"] == 1
    assert any(n.startswith("torchtitan logs no end of an async save's write") for n in report["notes"])


def test_torchtitan_async_save_cut_by_the_end_of_the_log_is_incomplete():
    stamp = "[rank0]:[titan] 2026-07-01 10:00:0{} - root - INFO - "
    lines = [stamp.format("0,000") + "step: 10  loss: 1.0", stamp.format("0,100") + "Staging the checkpoint.",
             stamp.format("0,600") + "Finished staging the checkpoint in 0.50 seconds."]
    report = log_report_of(TorchtitanParser(), lines)
    assert saves(report) == [(10, False, 0.5, None)]
    assert "torchtitan logs no end of an async save's write" in report["saves"][0]["error"]


def test_torchtitan_behind_the_primus_prefix():
    report = log_report([LOGS / "primus_torchtitan_console.log"])
    # Primus's prefix has 1 s: torchtitan's own `in X seconds` (10 ms) times the saves.
    assert saves(report) == [(10, True, 3.42, 3.42), (20, True, 3.18, 3.18)]
    assert report["time_source"] == "torchtitan-timer" and report["world_size"] == 8
