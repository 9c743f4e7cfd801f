"""The report engine on hand-made events: what each number means."""

from ckpt_bench.core.events import CheckpointEvent, EventKind
from ckpt_bench.report.engine import build_report

S = 10**9


def save(iteration: int, start: float, block_end: float, end: float, rank: int = 0) -> list[CheckpointEvent]:
    return [CheckpointEvent(kind, rank=rank, iteration=iteration, mono_ns=int(at * S), wall_ns=int(at * S))
            for kind, at in ((EventKind.SAVE_START, start), (EventKind.SAVE_BLOCK_END, block_end),
                             (EventKind.SAVE_END, end))]


def test_wait_for_previous_is_the_blocking_time_spent_while_the_previous_save_still_wrote():
    # Save 2 starts at 1 s and returns at 3 s; save 1's background write ends at 2.5 s: 1.5 s of
    # save 2's blocking part ran while save 1 still wrote (a persistent writer: waiting for it).
    events = [*save(1, 0.0, 0.1, 2.5), *save(2, 1.0, 3.0, 6.0), *save(3, 7.0, 7.2, 8.0)]
    saves = {s["iteration"]: s for s in build_report(events)["saves"]}
    assert saves[1]["wait_for_previous"] is None  # no previous save
    assert saves[2]["wait_for_previous"] == 1.5
    assert saves[3]["wait_for_previous"] == 0.0  # save 2 had finished writing
