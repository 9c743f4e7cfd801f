"""Phases of a save and a load (ckpt_bench.worker.phases), taken from the engines' own steps, on one rank in
this process (a gloo group of one): they cover the operation from its start event to its end event, in the
engine's order, and sum to its time."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from ckpt_bench.backends.dcp.phases import mark_load
from ckpt_bench.backends.dcp.worker import timed_save
from ckpt_bench.core.events import EventKind, EventRecorder, Phase, read_event_files
from ckpt_bench.worker.entry import load_returned, timed
from ckpt_bench.worker.phases import PhaseClock


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    store = dist.FileStore(str(tmp_path_factory.mktemp("store") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def events_of(recorder: EventRecorder) -> dict[EventKind, object]:
    recorder.close()
    return {event.kind: event for event in read_event_files([recorder.path])}


def names(spans) -> list[str]:
    return [span.phase for span in spans]


def assert_contiguous(spans, start_ns: int, end_ns: int) -> None:
    assert spans[0].start_ns == start_ns and spans[-1].end_ns == end_ns
    assert all(a.end_ns == b.start_ns for a, b in zip(spans, spans[1:], strict=False))
    assert all(span.end_ns >= span.start_ns for span in spans)


def test_clock_phases_are_consecutive_and_repeats_merge():
    clock = PhaseClock()
    clock.open(Phase.STATE_DICT, 100)
    clock.begin(Phase.PLAN)
    clock.begin(Phase.PLAN)
    spans = clock.close(clock._marks[-1][1] + 5)
    assert names(spans) == ["state_dict", "plan"]
    assert_contiguous(spans, 100, spans[-1].end_ns)
    assert clock.close(7) == ()  # closed: a clean clock


def test_a_write_splits_at_its_writers_fsyncs():
    """One writer, two files: its own write | fsync | write | fsync, then `collect` until the call returned. Two
    writers overlapping: `write` while either writes, `fsync` once both only fsync, each with the writers'
    summed seconds on its first span."""
    ms = 1_000_000

    def spans_of(fsyncs):
        clock = PhaseClock()
        clock.open(Phase.WRITE_FSYNC, 0)
        clock.wrote([(writer, a * ms, b * ms) for writer, a, b in fsyncs])
        clock.begin(Phase.FINALIZE)
        clock._marks[-1] = (Phase.FINALIZE.value, 100 * ms)  # the write returned at 100 ms
        return [(span.phase, span.start_ns // ms, span.end_ns // ms, span.writers, span.writer_seconds)
                for span in clock.close(120 * ms)]

    assert spans_of([(1, 30, 40), (1, 70, 95)]) == [
        ("write", 0, 30, None, None), ("fsync", 30, 40, None, None), ("write", 40, 70, None, None),
        ("fsync", 70, 95, None, None), ("collect", 95, 100, None, None), ("finalize", 100, 120, None, None)]
    # writer 1 writes 0-30, fsyncs 30-50; writer 2 writes 0-60, fsyncs 60-90
    assert spans_of([(1, 30, 50), (2, 60, 90)]) == [
        ("write", 0, 60, 2, 0.09), ("fsync", 60, 90, 2, 0.05), ("collect", 90, 100, None, None),
        ("finalize", 100, 120, None, None)]
    assert spans_of([]) == [("write+fsync", 0, 100, None, None), ("finalize", 100, 120, None, None)]


@pytest.mark.parametrize("sync_files", [False, True])
def test_dcp_sync_save_phases_sum_to_its_time(group, tmp_path, sync_files):
    from torch.distributed.checkpoint import FileSystemWriter

    recorder = EventRecorder(tmp_path / "events", 0)
    state = {"w": torch.randn(64, 64), "b": torch.zeros(8)}
    writer = FileSystemWriter(str(tmp_path / "ckpt"), sync_files=sync_files)
    timed_save(state, writer, recorder, 1, str(tmp_path / "ckpt"), async_save=False, sync_files=sync_files)
    events = events_of(recorder)
    spans = events[EventKind.SAVE_BLOCK_END].phases
    write = ["write", "fsync", "collect"] if sync_files else ["write"]
    assert names(spans) == ["state_dict", "plan", "exchange", *write, "finalize"]
    assert_contiguous(spans, events[EventKind.SAVE_START].mono_ns, events[EventKind.SAVE_BLOCK_END].mono_ns)
    assert all(span.writers is None for span in spans)  # one writer thread: its phases are its own


def test_dcp_writer_threads_split_write_from_fsync(group, tmp_path):
    """Two writer threads, each fsyncing its file: `write` while one writes, then `fsync`, each with the two
    threads' own seconds summed beside it (every thread's write and fsync inside the rank's span, so the sums
    are at most twice the span). On a busy machine one thread may take both files: its own write | fsync twice."""
    from torch.distributed.checkpoint import FileSystemWriter

    recorder = EventRecorder(tmp_path / "events", 0)
    state = {"w": torch.randn(256, 256), "v": torch.randn(256, 256)}
    writer = FileSystemWriter(str(tmp_path / "ckpt"), sync_files=True, thread_count=2)
    timed_save(state, writer, recorder, 1, str(tmp_path / "ckpt"), async_save=False, sync_files=True)
    spans = events_of(recorder)[EventKind.SAVE_BLOCK_END].phases
    assert names(spans)[:3] == ["state_dict", "plan", "exchange"] and names(spans)[-1] == "finalize"
    writing, collect = spans[3:-2], spans[-2]
    assert collect.phase == "collect"
    if len(writing) == 4:  # one thread wrote both files
        assert names(writing) == ["write", "fsync", "write", "fsync"]
        assert all(span.writers is None for span in writing)
        return
    write, fsync = writing
    assert (write.phase, fsync.phase) == ("write", "fsync") and write.writers == fsync.writers == 2
    whole = (fsync.end_ns - write.start_ns) / 1e9
    assert 0 < write.writer_seconds and 0 < fsync.writer_seconds
    assert write.writer_seconds + fsync.writer_seconds <= 2 * whole + 1e-6


def test_dcp_async_save_phases_block_then_background(group, tmp_path):
    from torch.distributed.checkpoint import FileSystemWriter

    recorder = EventRecorder(tmp_path / "events", 0)
    state = {"w": torch.randn(64, 64)}
    timed_save(state, FileSystemWriter(str(tmp_path / "ckpt")), recorder, 1, str(tmp_path / "ckpt"), async_save=True)
    events = events_of(recorder)
    block = events[EventKind.SAVE_BLOCK_END].phases
    assert names(block) == ["state_dict", "stage", "schedule"]
    assert_contiguous(block, events[EventKind.SAVE_START].mono_ns, events[EventKind.SAVE_BLOCK_END].mono_ns)
    background = events[EventKind.SAVE_END].phases
    assert names(background) == ["plan", "exchange", "write", "fsync", "collect", "finalize"]  # fsync: the default
    assert background[-1].end_ns == events[EventKind.SAVE_END].mono_ns


def test_dcp_load_phases(group, tmp_path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter

    saved = {"w": torch.randn(32, 32)}
    dcp.save(saved, storage_writer=FileSystemWriter(str(tmp_path / "ckpt")))
    recorder = EventRecorder(tmp_path / "events", 0)
    state = {"w": torch.zeros(32, 32)}
    clock = PhaseClock()
    reader = FileSystemReader(str(tmp_path / "ckpt"))
    planner = mark_load(reader, clock)
    with timed(recorder, EventKind.LOAD_START, EventKind.LOAD_END, 1, phases=clock):
        dcp.load(state, storage_reader=reader, planner=planner)
    load_returned(recorder, 1, None, clock)
    events = events_of(recorder)
    spans = events[EventKind.LOAD_END].phases
    assert names(spans) == ["state_dict", "metadata", "plan", "exchange", "read", "finalize"]
    assert_contiguous(spans, events[EventKind.LOAD_START].mono_ns, events[EventKind.LOAD_END].mono_ns)
    assert torch.equal(state["w"], saved["w"])


def test_report_puts_background_after_blocking_and_names_the_queue():
    """An async save whose writer started 2 s after the call returned: `queued` in between; a background
    phase that began before the return is counted from it (0 s if it also ended before). The phases sum to
    the save's times."""
    from ckpt_bench.core.events import CheckpointEvent, PhaseSpan
    from ckpt_bench.report.engine import build_report

    s = 1_000_000_000

    def event(kind, at, *spans):
        return CheckpointEvent(kind, rank=0, iteration=1, mono_ns=at * s, wall_ns=at * s,
                               phases=tuple(PhaseSpan(name, a * s, b * s) for name, a, b in spans))

    events = [event(EventKind.SAVE_START, 10),
              event(EventKind.SAVE_BLOCK_END, 13, ("state_dict", 10, 11), ("schedule", 11, 13)),
              event(EventKind.SAVE_END, 20, ("plan", 11, 12), ("stage", 12, 15), ("write+fsync", 15, 19),
                    ("finalize", 19, 20))]
    save = build_report(events)["saves"][0]
    assert [(p["phase"], p["seconds"], p["blocking"]) for p in save["phases"]] == [
        ("state_dict", 1, True), ("schedule", 2, True), ("plan", 0, False), ("stage", 2, False),
        ("write+fsync", 4, False), ("finalize", 1, False)]
    assert sum(p["seconds"] for p in save["phases"] if p["blocking"]) == save["block_time"] == 3
    assert sum(p["seconds"] for p in save["phases"]) == save["total_time"] == 10
    events[2] = event(EventKind.SAVE_END, 20, ("write+fsync", 15, 19), ("finalize", 19, 20))
    save = build_report(events)["saves"][0]
    assert [(p["phase"], p["seconds"]) for p in save["phases"][2:]] == [
        ("queued", 2), ("write+fsync", 4), ("finalize", 1)]
    assert save["phases_per_rank"][0]["phases"][2]["start"] == 3


@pytest.mark.parametrize("async_save", [False, True])
def test_dcp_phases_sum_to_the_reported_times(group, tmp_path, async_save):
    from torch.distributed.checkpoint import FileSystemWriter

    from ckpt_bench.report.engine import build_report

    recorder = EventRecorder(tmp_path / "events", 0)
    state = {"w": torch.randn(256, 256)}
    for call in (1, 2):
        path = str(tmp_path / f"ckpt{call}")
        timed_save(state, FileSystemWriter(path), recorder, call, path, async_save=async_save)
    recorder.close()
    report = build_report(read_event_files([recorder.path]))
    for save in report["saves"]:
        assert save["phases_rank"] == 0
        blocking = sum(p["seconds"] for p in save["phases"] if p["blocking"])
        assert abs(blocking - save["block_time"]) <= 1e-3
        assert abs(sum(p["seconds"] for p in save["phases"]) - save["total_time"]) <= 1e-3


def test_phases_are_the_rank_the_others_waited_for():
    """Both ranks leave the closing collective together; rank 1 (nothing to write) started a little earlier,
    so its total is longer, but rank 0's write is what they waited for: its phases are the save's."""
    from ckpt_bench.core.events import CheckpointEvent, PhaseSpan
    from ckpt_bench.report.engine import build_report

    s = 1_000_000_000

    def rank(r, start, *spans):
        end = spans[-1][2]
        phases = tuple(PhaseSpan(name, a * s, b * s) for name, a, b in spans)
        return [CheckpointEvent(EventKind.SAVE_START, rank=r, iteration=1, mono_ns=start * s),
                CheckpointEvent(EventKind.SAVE_BLOCK_END, rank=r, iteration=1, mono_ns=end * s, phases=phases),
                CheckpointEvent(EventKind.SAVE_END, rank=r, iteration=1, mono_ns=end * s)]

    events = [*rank(0, 2, ("write+fsync", 2, 7), ("finalize", 7, 8)),
              *rank(1, 1, ("write+fsync", 1, 2), ("finalize", 2, 8))]
    save = build_report(events)["saves"][0]
    assert save["phases_rank"] == 0 and save["total_time"] == 7  # rank 1's total, 7 s; rank 0's is 6 s
    assert [(p["phase"], p["seconds"]) for p in save["phases"]] == [("write+fsync", 5), ("finalize", 1)]


def test_async_save_finalized_later_waits_for_it_in_its_phases():
    """megatron-core's async save: the writer records its phases with SAVE_WRITTEN, the training process its
    finalize with SAVE_END at the next check. The time between is `awaiting_finalize`; the save is complete at
    the finalize's end, its background phases summing to its total; the bytes are the writer's. Of two ranks
    that finalize together, the one whose writer ended last is the save's."""
    from ckpt_bench.core.events import CheckpointEvent, PhaseSpan
    from ckpt_bench.report.engine import build_report

    s = 1_000_000_000

    def rank(r, written, *writer):
        def event(kind, at, *spans, **fields):
            return CheckpointEvent(kind, rank=r, iteration=2, mono_ns=at * s,
                                   phases=tuple(PhaseSpan(name, a * s, b * s) for name, a, b in spans), **fields)

        return [event(EventKind.SAVE_START, 10),
                event(EventKind.SAVE_BLOCK_END, 12, ("state_dict", 10, 11), ("schedule", 11, 12)),
                event(EventKind.SAVE_WRITTEN, written, *writer, bytes=100 + r),
                event(EventKind.SAVE_END, 21, ("finalize", 20, 21))]

    events = [*rank(0, 17, ("write", 12, 15), ("fsync", 15, 17)), *rank(1, 14, ("write", 12, 13), ("fsync", 13, 14))]
    save = build_report(events)["saves"][0]
    assert save["phases_rank"] == 0 and save["total_time"] == 11 and save["bytes"] == 201
    assert [(p["phase"], p["seconds"], p["blocking"]) for p in save["phases"]] == [
        ("state_dict", 1, True), ("schedule", 1, True), ("write", 3, False), ("fsync", 2, False),
        ("awaiting_finalize", 3, False), ("finalize", 1, False)]
    assert sum(p["seconds"] for p in save["phases"]) == save["total_time"]
    assert save["phases_per_rank"][1]["phases"][4] == {"phase": "awaiting_finalize", "seconds": 6,
                                                        "blocking": False, "start": 4}
    # A rank with nothing to write is written when it schedules (before the call returns): it awaits the
    # finalize from the return.
    events = [*rank(0, 17, ("write", 12, 15), ("fsync", 15, 17)), *rank(1, 11)]
    nothing = build_report(events)["saves"][0]["phases_per_rank"][1]["phases"]
    assert [(p["phase"], p["start"], p["seconds"]) for p in nothing[2:]] == [
        ("awaiting_finalize", 2, 8), ("finalize", 10, 1)]


def test_fsyncs_of_threads_and_forked_writers_are_timed(tmp_path):
    """A writer module's `os.fsync`, timed: on a thread of this process, and in a forked process (megatron-core
    forks one writer per file), which reports through the pipe; outside a write nothing is collected."""
    import os
    import threading
    import types

    from ckpt_bench.worker.phases import FsyncTimes, time_fsyncs

    writer = types.ModuleType("writer")
    writer.os = os
    time_fsyncs(writer)
    time_fsyncs(writer)  # once: the second call changes nothing
    fd = os.open(tmp_path / "file", os.O_CREAT | os.O_WRONLY)
    writer.os.fsync(fd)  # no write watched
    with FsyncTimes() as fsyncs:
        thread = threading.Thread(target=writer.os.fsync, args=(fd,))
        thread.start()
        thread.join()
        child = os.fork()
        if child == 0:
            writer.os.fsync(fd)
            os._exit(0)
        os.waitpid(child, 0)
    os.close(fd)
    assert [writer_id for writer_id, _, _ in fsyncs.calls] == [thread.ident, child]
    assert all(0 < start <= end for _, start, end in fsyncs.calls)
    assert writer.os.path is os.path
