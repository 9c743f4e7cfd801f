"""The phases in what a person reads (issue 29): the summary's phase table and headline, --compare's per-phase
metrics, a sweep's phase table; from reports built by the engine out of events (no launch)."""

from __future__ import annotations

from ckpt_bench.benchmark.registry import FRAMEWORKS
from ckpt_bench.core.events import CheckpointEvent, EventKind, PhaseSpan
from ckpt_bench.present.compare import Source, compare
from ckpt_bench.present.rows import headline_rows, phase_table
from ckpt_bench.report.engine import build_report
from ckpt_bench.report.schema import Report

S = 1_000_000_000


def save(iteration: int, start: int, *phases: tuple[str, int]) -> list[CheckpointEvent]:
    """A synchronous save on rank 0 whose phases run back to back from `start` (seconds)."""
    spans, at = [], start
    for name, seconds in phases:
        spans.append(PhaseSpan(name, at * S, (at + seconds) * S))
        at += seconds
    stamp = {"rank": 0, "iteration": iteration}
    return [CheckpointEvent(EventKind.SAVE_START, mono_ns=start * S, wall_ns=start * S, **stamp),
            CheckpointEvent(EventKind.SAVE_BLOCK_END, mono_ns=at * S, wall_ns=at * S, phases=tuple(spans), **stamp),
            CheckpointEvent(EventKind.SAVE_END, mono_ns=at * S, wall_ns=at * S, **stamp)]


def report(write: int) -> dict:
    events = [*save(1, 0, ("plan", 5), ("write", 1)), *save(2, 10, ("plan", 1), ("write", write), ("fsync", 1)),
              *save(3, 20, ("plan", 1), ("write", write), ("fsync", 1))]
    return build_report(events)


def test_summary_names_the_longest_phase_and_tables_first_and_last_save():
    typed = Report.from_json(report(write=3))
    assert typed.steady_phases() == {"plan": 1, "write": 3, "fsync": 1}
    assert dict(headline_rows(typed))["where the time goes"] == "last save: write 60 %"
    columns, rows = phase_table(typed)
    assert columns == ["phase", "first save 1 s", "share", "last save 3 s", "share", "steady median s"]
    assert rows[0] == ["plan", "5.000", "83 %", "1.000", "20 %", "1.000"]
    assert rows[2][:2] == ["fsync", "-"]  # the first save ran no fsync
    assert rows[-1][0] == "total (block)" and rows[-1][3] == "5.000" and rows[-1][5] == "5.000"


def test_compare_puts_phases_side_by_side():
    comparison = compare([Source("fast", "a", report(write=2)), Source("slow", "b", report(write=6))], FRAMEWORKS)
    slow = comparison.sources[1]
    assert slow.metrics["steady_phase:write"] == 6 and slow.ratio_to_first["steady_phase:write"] == 3
    assert slow.ratio_to_first["steady_phase:plan"] == 1
    assert "median over the steady saves" in comparison.meanings["steady_phase:write"]


def test_sweep_table_gives_each_job_its_steady_phases():
    from ckpt_bench.present.rows import sweep_phase_table
    from ckpt_bench.report.sweep_results import JobRecord, SweepResults

    jobs = [JobRecord(index, {"engine": engine}, status="ok", report_json=report(write))
            for index, (engine, write) in enumerate((("a", 2), ("b", 6)))]
    results = SweepResults(name="s", dir="d", started="t", updated="t", sweep={"sweep": {"engine": ["a", "b"]}},
                           environment={}, summary={"ok": 2}, jobs=jobs)
    columns, rows = sweep_phase_table(results)
    assert columns == ["job", "engine", "plan", "write", "fsync"]
    assert rows == [["0", "a", "1.000", "2.000", "1.000"], ["1", "b", "1.000", "6.000", "1.000"]]
