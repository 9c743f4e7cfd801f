"""Log parsers: every format variant of the issue, on real and constructed logs, into one report."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from helpers import LOGS
from helpers import REAL_LOGS as REAL

from ckpt_bench.core.errors import ReportError
from ckpt_bench.core.events import OVERLAPS_PREVIOUS, CheckpointEvent, EventKind, TimeSource
from ckpt_bench.report.assembly import log_report
from ckpt_bench.report.engine import build_report
from ckpt_bench.report.parsers.arguments import ArgumentsDump, typed
from ckpt_bench.report.parsers.lines import candidate_lines, is_indented
from ckpt_bench.report.parsers.megatron import MegatronParser
from ckpt_bench.report.parsers.primus import PrimusParser, find_rank_dirs, level_files
from ckpt_bench.report.parsers.sources import NoEvents, resolve

PRIMUS_RUN = LOGS / "primus_run" / "logs" / "pre_trainer"


def real(name: str) -> Path:
    path = REAL / name
    if not path.exists():
        pytest.skip(f"real fixtures not checked out beside the repo: {path}")
    return path


def saves(report: dict) -> list[tuple]:
    return [(s["iteration"], s["complete"], s["block_time"], s["total_time"]) for s in report["saves"]]


def feed(parser, lines: list[str]) -> list[CheckpointEvent]:
    events = [e for seq, line in enumerate(lines, 1) for e in parser.feed(line, seq)]
    return events + parser.finish()


# -- real logs --------------------------------------------------------------------------------------


def test_real_megatron_legacy_stdout():
    report = log_report([real("01_megatron_stdout_legacy_torch_save_2024.log")])
    # Save 1 is timed by `save-checkpoint ...: (21027.08, 21027.08)`; save 2 starts as the log ends.
    assert saves(report) == [(1, True, 21.027, 21.027), (2, False, None, None)]
    assert report["time_source"] == "megatron-timer" and report["time_resolution_s"] == 1e-05
    assert report["saves"][1]["error"].startswith("the log ends before this save finished")
    # `load-checkpoint` is timed although nothing was loaded (no tracker file): no load is invented.
    assert report["load"] is None
    assert report["world_size"] == 1 and report["data_parallel_size"] == 1
    assert report["save"] == "./checkpoints/gpt-2" and report["save_interval"] == 1
    assert report["use_distributed_optimizer"] is False and report["params_dtype"] == "torch.float16"
    assert report["ckpt_format"] is None and report["async_save"] is None  # not in a 2024 dump
    assert any(n.startswith("not in the log, left null: ckpt_format") for n in report["notes"])
    assert report["save_bandwidth_in_mbps"] is None and report["iter_folder_size"] is None


def test_real_primus_console_lines_hold_no_checkpoint_event():
    path = real("05_primus_console_rank0_lines_2026.log")
    assert resolve(path).parser_class is PrimusParser
    with pytest.raises(NoEvents):
        log_report([path])


def test_real_primus_console_prefix_is_stripped():
    line = real("05_primus_console_rank0_lines_2026.log").read_text().splitlines()[12]
    parser = PrimusParser()
    parser.feed(line, 1)
    assert parser.run_info == {"world_size": 8}


# -- constructed Megatron stdout --------------------------------------------------------------------


def test_current_timestamped_sync_uses_timestamps_over_timers():
    report = log_report([LOGS / "megatron_current_timestamped_sync.log"])
    assert saves(report) == [(200, True, 4.5, 4.5), (300, True, 3.5, 3.5)]
    assert all(s["time_source"] == "megatron-timestamp" for s in report["saves"])
    assert report["load"]["iteration"] == 100 and report["load_time"] == 8.343  # loads: timer only
    assert report["load"]["time_source"] == "megatron-timer"
    assert report["accurate"] is True


def test_current_async_with_overlap_warning():
    report = log_report([LOGS / "megatron_current_timestamped_async_overlap.log"])
    # block: start -> `scheduled` line; total: start -> `successfully saved`, both timestamped.
    assert saves(report) == [(100, True, 1.2, 20.0), (110, True, 0.8, 20.0)]
    assert [s["overlapped"] for s in report["saves"]] == [True, True]
    assert report["accurate"] is False
    assert report["async_save"] is True and report["time_source"] == "megatron-timestamp"


def test_overlap_warning_alone_marks_the_report_inaccurate():
    lines = [
        "saving checkpoint at iteration     100 to /c in torch_dist format",
        "  successfully saved checkpoint from iteration     100 to /c [ t 1/1, p 1/1 ]",
        "WARNING: Starting a checkpoint save before previous has finished. Consider increasing the interval.",
        "saving checkpoint at iteration     200 to /c in torch_dist format",
        "  successfully saved checkpoint from iteration     200 to /c [ t 1/1, p 1/1 ]",
    ]
    events = feed(MegatronParser(), lines)
    assert [e.extra.get(OVERLAPS_PREVIOUS) for e in events if e.kind == EventKind.SAVE_START] == [None, True]
    assert build_report(events)["accurate"] is False


def test_2024_untimestamped_sync_times_from_timers():
    report = log_report([LOGS / "megatron_2024_untimestamped_sync.log"])
    assert saves(report) == [(100, True, 3.0, 3.0), (200, True, 2.0, 2.0)]
    assert report["time_source"] == "megatron-timer"
    assert report["load"]["iteration"] == 50 and report["load_time"] == 5.12  # `max time` style
    assert report["stats"]["first_save"]["iteration"] == 100


def test_2024_untimestamped_async_has_block_time_only():
    report = log_report([LOGS / "megatron_2024_untimestamped_async.log"])
    assert saves(report) == [(100, True, 0.95, None)]
    assert report["save_total_time"] is None
    assert any("no completion time" in n for n in report["notes"])


def test_per_rank_timers_and_non_persistent_timer():
    report = log_report([LOGS / "megatron_2024_per_rank_timers.log"])
    first, second = report["saves"]
    assert first["ranks"] == 4 and first["total_time"] == 2.5
    assert first["total_time_per_rank"] == {"max": 2.5, "max_rank": 1, "min": 2.0, "min_rank": 0}
    assert (second["iteration"], second["total_time"], second["ranks"]) == (150, 1.5, 1)
    assert report["world_size"] == 4


def test_legacy_wording_and_release_load():
    report = log_report([LOGS / "megatron_legacy_release_load.log"])
    assert saves(report) == [(1, True, 21.027, 21.027)]
    assert (report["load"]["iteration"], report["load_time"]) == (0, 0.75)
    assert report["ckpt_format"] is None  # legacy lines name no format and the dump has none


def test_killed_mid_save_is_never_completed_by_the_restart():
    report = log_report([LOGS / "megatron_killed_mid_save_restart.log"])
    assert saves(report) == [(200, False, 1.0, None), (200, True, 1.5, 9.0)]
    assert report["saves"][0]["error"] == "a new process started before this save finished"
    assert report["accurate"] is True  # the dead process's save does not overlap the new one
    assert [load["time"] for load in report["loads"]] == [3.1, 3.0]
    assert report["num_saved"] == 1 and report["save_total_time"] == 9.0
    assert any("2 arguments dumps" in n for n in report["notes"])


def test_ansi_codes_and_interleaved_ranks():
    report = log_report([LOGS / "megatron_ansi_interleaved.log"])
    assert saves(report) == [(100, True, 3.0, 3.0)]


def test_several_logs_are_one_run_in_order(tmp_path):
    report = log_report([
        LOGS / "megatron_2024_untimestamped_sync.log", LOGS / "megatron_current_timestamped_sync.log"
    ])
    assert [s["iteration"] for s in report["saves"]] == [100, 200, 200, 300]
    assert [load["iteration"] for load in report["loads"]] == [50, 100]


def test_gzip_log(tmp_path):
    packed = tmp_path / "stdout.log.gz"
    with gzip.open(packed, "wb") as out:
        out.write((LOGS / "megatron_2024_untimestamped_sync.log").read_bytes())
    assert saves(log_report([packed])) == [(100, True, 3.0, 3.0), (200, True, 2.0, 2.0)]


# -- arguments dump ---------------------------------------------------------------------------------


def test_arguments_dump_long_names_and_empty_values():
    dump = ArgumentsDump()
    lines = (LOGS / "megatron_current_timestamped_sync.log").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if dump.starts(line))
    for line in lines[start + 1:]:
        dump.feed(line)
        if not dump.active:
            break
    values = dump.values
    two_dots = "ckpt_fully_parallel_save_process_group_overrid"
    no_dots = "experimental_attention_variant_checkpoint_overlap_"
    assert (len(two_dots), len(no_dots)) == (46, 50)
    assert values[two_dots] is True and values[no_dots] == 4
    assert values["wandb_project"] == ""
    assert values["non_persistent_ckpt_type"] is None
    assert values["adam_eps"] == 1e-08 and values["lr"] == 0.0003
    info = dump.run_info()
    assert info["async_save"] is False and info["exp_avg_sq_dtype"] == "torch.float32"
    assert "wandb_project" not in info  # only the report's keys (and a few about layout)


@pytest.mark.parametrize(
    ("text", "value"),
    [("True", True), ("False", False), ("None", None), ("8", 8), ("1e-08", 1e-08), ("adam", "adam"), ("", "")],
)
def test_typed_values(text, value):
    assert typed(text) == value and type(typed(text)) is type(value)


# -- Primus ------------------------------------------------------------------------------------------


def test_primus_folder_rotated_files_and_timers_from_last_rank():
    report = log_report([PRIMUS_RUN])
    assert saves(report) == [(200, True, 3.913, 3.913), (300, True, 3.25, 3.25), (400, False, None, None)]
    # 200: Megatron 2024 lines, 1 s prefix times, timer from rank-3's info.log wins; 300: timestamps.
    assert [s["time_source"] for s in report["saves"][:2]] == ["megatron-timer", "megatron-timestamp"]
    assert report["load"]["iteration"] == 100 and report["load_time"] == 8.25
    assert report["world_size"] == 4 and report["data_parallel_size"] == 2  # the dump in debug.log.2
    assert 999 not in [s["iteration"] for s in report["saves"]]  # rank-1 and warning.log not read
    assert "read rank-0/debug.log (3 files); rank-3/info.log (1 file)" in report["notes"][0]


def test_primus_folder_found_from_the_experiment_root():
    assert find_rank_dirs(LOGS / "primus_run").keys() == {0, 1, 2, 3}
    assert saves(log_report([LOGS / "primus_run"])) == saves(log_report([PRIMUS_RUN]))


def test_primus_console_interleaved_async():
    report = log_report([LOGS / "primus_console_interleaved_async.log"])
    # Block from the timer (10 us); total from the 1 s prefixes: the report says both.
    assert saves(report) == [(100, True, 1.234, 8.0)]
    assert report["time_source"] == "megatron-timer+primus-prefix" and report["time_resolution_s"] == 1.0
    assert report["world_size"] == 4 and report["async_save"] is True
    assert "world_size comes from the Primus line prefix, not from an arguments dump" in report["notes"]


@pytest.mark.parametrize(
    "location", ["[checkpointing.py:411]: ", "[---checkpointing.py:411] : "], ids=["old", "current"]
)
def test_primus_location_forms(location):
    line = (f"[20250601 10:00:01][u/t][pre_trainer][ip-1.2.3.4][rank-0/2][DEBUG]    {location}"
            "[2025-06-01 10:00:01.500000] saving checkpoint at iteration     100 to /c in torch_dist format")
    (start,) = PrimusParser().feed(line, 1)
    assert (start.kind, start.iteration, start.path) == (EventKind.SAVE_START, 100, "/c")
    assert start.source == TimeSource.MEGATRON_TIMESTAMP  # Megatron's own time beats the 1 s prefix
    assert start.extra == {"format": "torch_dist"}


def test_rotated_files_oldest_first(tmp_path):
    names = ["debug.log", "debug.log.1", "debug.log.2", "debug.log.10", "info.log.1",
             "debug.2025-06-01_10-00-00_000000.log", "debug.2025-05-31_09-00-00_000000.log"]
    for name in names:
        (tmp_path / name).write_text("")
    assert [p.name for p in level_files(tmp_path, "debug")] == [
        "debug.log.10", "debug.log.2", "debug.log.1",
        "debug.2025-05-31_09-00-00_000000.log", "debug.2025-06-01_10-00-00_000000.log", "debug.log",
    ]


def test_single_rank_primus_folder_reads_rank_0_only(tmp_path):
    shutil.copytree(PRIMUS_RUN / "rank-0", tmp_path / "rank-0")
    (tmp_path / "rank-0" / "debug.log").write_text(
        (tmp_path / "rank-0" / "debug.log").read_text()
        + (PRIMUS_RUN / "rank-3" / "info.log").read_text().replace("rank-3/4", "rank-0/4")
    )
    source = resolve(tmp_path)
    assert [[p.name for p in files] for files in source.streams] == [["debug.log.2", "debug.log.1", "debug.log"]]


# -- streaming filter, errors, --ckpt-dir ------------------------------------------------------------


def test_filter_keeps_only_what_a_report_needs():
    raw = [b"iteration 1 | loss 2\n", b"(min, max) time across ranks (ms):\n",
           b"    save-checkpoint ....: (1.00, 2.00)\n", b"iteration 2\n", b"    not a continuation\n",
           b"\x1b[32msaving checkpoint at iteration 1 to /c\x1b[0m\n"]
    kept = [text for _, text in candidate_lines(raw, is_indented)]
    assert kept == ["(min, max) time across ranks (ms):", "    save-checkpoint ....: (1.00, 2.00)",
                    "saving checkpoint at iteration 1 to /c"]


def test_bad_paths(tmp_path):
    with pytest.raises(ReportError, match="no such file"):
        log_report([tmp_path / "missing.log"])
    with pytest.raises(ReportError, match="holds no log file"):
        log_report([tmp_path])
    empty = tmp_path / "empty.log"
    empty.write_text("")
    with pytest.raises(NoEvents):
        log_report([empty])


def test_ckpt_dir_gives_sizes_and_bandwidth(tmp_path):
    (tmp_path / "iter_0000100").mkdir()
    (tmp_path / "iter_0000100" / "__0_0.distcp").write_bytes(b"\0" * (3 << 20))
    report = log_report([LOGS / "megatron_2024_untimestamped_sync.log"], ckpt_dir=tmp_path)
    first, second = report["saves"]
    assert (first["bytes"], first["bytes_source"], first["bandwidth"]) == (3 << 20, "disk", 1.0)
    assert second["bytes"] is None and second["bandwidth"] is None
    assert any(n.startswith("no iter_0000200 folder") for n in report["notes"])


# -- engine cases the logs need ---------------------------------------------------------------------


def test_timer_merged_into_a_prefix_timed_end_takes_the_timers_source():
    start = CheckpointEvent(EventKind.SAVE_START, rank=0, iteration=1, wall_ns=0, source=TimeSource.PRIMUS_PREFIX)
    end = CheckpointEvent(EventKind.SAVE_END, rank=0, iteration=1, wall_ns=4 * 10**9, source=TimeSource.PRIMUS_PREFIX)
    timer = CheckpointEvent(EventKind.SAVE_END, rank=0, iteration=1, elapsed_ns=3_912_500_000,
                            source=TimeSource.MEGATRON_TIMER)
    report = build_report([start, end, timer])
    assert report["saves"][0]["total_time"] == 3.913
    assert (report["time_source"], report["time_resolution_s"]) == ("megatron-timer", 1e-05)


# -- Megatron-LM 2026: local checkpoints, the gtp_remat view, async saves turned off ------------------------


def test_local_non_persistent_checkpoint_and_release_distributed_load():
    report = log_report([LOGS / "megatron_2026_local_nonpersistent.log"])
    assert saves(report) == [(50, True, 2.4, 2.4), (100, True, 7.5, 7.5)]
    assert report["saves"][0]["time_source"] == "megatron-timestamp"
    assert (report["load"]["iteration"], report["load_time"]) == (0, 3.1)  # `loading release distributed ...`
    assert report["config"]["non_persistent_ckpt_type"] == "local"


def test_local_save_end_names_no_folder_its_start_does():
    lines = ["[2026-05-14 09:00:00.000000] saving checkpoint at iteration      50 to /local in torch format",
             "  [2026-05-14 09:00:02.400000] successfully saved local checkpoint from iteration      50",
             "max time across ranks (ms):",
             "    save-checkpoint-non-persistent .................: 2400.00"]
    events = feed(MegatronParser(), lines)
    end = next(e for e in events if e.kind == EventKind.SAVE_END)
    assert (end.iteration, end.path, end.source) == (50, "/local", TimeSource.MEGATRON_TIMESTAMP)
    assert saves(build_report(events)) == [(50, True, 2.4, 2.4)]


def test_gtp_remat_view_of_2026():
    lines = ["[2026-05-14 10:00:00.000000] saving checkpoint at iteration     100 to /c in torch_dist format",
             "  [2026-05-14 10:00:03.000000] successfully saved checkpoint from iteration     100 to /c "
             "[ t 1/2, gtp_remat 1/2, p 2/2 ]",
             "  successfully loaded checkpoint from /c [ t 1/2, gtp_remat 1/2, p 2/2 ] at iteration 100"]
    events = feed(MegatronParser(), lines)
    assert [(e.kind, e.path) for e in events if e.kind in (EventKind.SAVE_END, EventKind.LOAD_END)] == [
        (EventKind.SAVE_END, "/c"), (EventKind.LOAD_END, "/c")]


def test_async_turned_off_by_megatron_is_in_the_notes():
    report = log_report([LOGS / "megatron_2026_async_disabled_warning.log"])
    assert saves(report) == [(100, True, 6.0, 6.0)]
    assert any(n.startswith("async saves were asked for but Megatron-LM turned them off") for n in report["notes"])
    assert report["config"]["use_persistent_ckpt_worker"] is False
    assert report["config"]["ckpt_assume_constant_structure"] is True


def test_async_asked_in_the_dump_but_turned_off_saves_synchronously():
    """A dump printed before Megatron checks the arguments still says True: the warning wins."""
    lines = ["UserWarning: --async-save is not supported without --use-persistent-ckpt-worker. Disabling --async-save.",
             "------------------------ arguments ------------------------",
             "  async_save ...................................... True",
             "-------------------- end of arguments ---------------------",
             "saving checkpoint at iteration     100 to /c in torch_dist format",
             "  successfully saved checkpoint from iteration     100 to /c [ t 1/1, p 1/1 ]",
             "(min, max) time across ranks (ms):",
             "    save-checkpoint ................................: (5900.00, 6000.00)"]
    parser = MegatronParser()
    report = build_report(feed(parser, lines))
    assert saves(report) == [(100, True, 6.0, 6.0)]  # synchronous: the timer is the whole save
    assert parser.notes[0].startswith("async saves were asked for (the arguments dump says async_save True) but "
                                      "Megatron-LM turned them off")


def test_async_asked_and_never_scheduled_is_in_the_notes():
    report = log_report([LOGS / "megatron_2025_async_asked_not_scheduled.log"])
    assert saves(report) == [(100, True, 6.0, 6.0)]
    assert any(n.startswith("the arguments ask for async saves (async_save True) but no save was scheduled async")
               for n in report["notes"])
    scheduled = log_report([LOGS / "megatron_2024_untimestamped_async.log"])
    assert not any("no save was scheduled async" in n or "turned them off" in n for n in scheduled["notes"])


@pytest.mark.parametrize(("name", "lines", "says"), [
    # 2 lines: the first is start-up, the second's interval holds the save at 200 (issue 31, item 7)
    ("megatron_current_timestamped_sync.log", 2, "the log's 2 iteration-time lines ('elapsed time per iteration') "
                                                 "leave no interval to time"),
    ("nemo2_sync_bionemo.log", None, "the log has no iteration-time line"),
])
def test_a_log_without_an_iteration_time_says_why_with_its_line_count(name, lines, says):
    from ckpt_bench.report.advice import AdviceOptions, advise

    report = log_report([LOGS / name])
    notes = advise(report, AdviceOptions(mtbf_hours=12))["notes"]
    assert [note for note in notes if note.startswith(says)], notes
    training = report.get("training") or {}
    assert training.get("iteration_lines") == lines and training.get("iteration_time_without_saves_median") is None
