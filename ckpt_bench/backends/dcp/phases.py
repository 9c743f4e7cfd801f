"""The phases of PyTorch DCP's saves and loads, marked on its own steps: the planners DCP makes when given
none, and the storage writer (its stager too) and reader, wrapped in place (ckpt_bench.worker.phases).

    save   state_dict | plan | exchange | write | fsync | collect (with sync_files) | finalize
    async  state_dict | stage | schedule, then in the writer's thread plan | exchange | write | fsync | collect |
           finalize
    load   state_dict | metadata | plan | exchange | read (read, deserialize, copy into the state) | finalize

DCP's file writer threads each fsync a file right after writing it (`os.fsync` in
torch.distributed.checkpoint.filesystem, timed here: ckpt_bench.worker.phases.time_fsyncs): `write` while
any thread writes, `fsync` while they only fsync, `collect` after the last fsync until write_data returns.
A writer that fsyncs elsewhere (an fsspec stream) keeps one phase, write+fsync.

Used by the DCP worker and the workload's dcp engine.
"""

from __future__ import annotations

from torch.distributed.checkpoint import filesystem
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner
from torch.distributed.checkpoint.staging import AsyncStager

from ckpt_bench.core.events import Phase
from ckpt_bench.worker.phases import MarkedWrite, PhaseClock, mark_calls, time_fsyncs

time_fsyncs(filesystem)


def mark_save(writer, sync_files: bool, training: PhaseClock, background: PhaseClock) -> DefaultSavePlanner:
    """Mark the phases of a save on DCP's own steps: the planner (the one DCP makes when given none) and
    `writer` wrapped in place. The writer stages an async save on the training thread (`training`); planning,
    writing and finishing run on `background`, the writer's thread (the same clock for a synchronous save).
    Returns the planner to save with."""
    if isinstance(writer, AsyncStager):  # else DCP stages through a DefaultStager of its own: unmarked
        mark_calls(writer, training, {"stage": (Phase.STAGE, Phase.SCHEDULE)})
    mark_calls(writer, background, {"prepare_local_plan": (Phase.PLAN, Phase.EXCHANGE)})
    # DCP's writers write and fsync inside write_data; what follows is the gather of the results and the
    # coordinator's metadata file.
    writer.write_data = MarkedWrite(writer.write_data, background, Phase.WRITE_FSYNC if sync_files else Phase.WRITE,
                                    Phase.FINALIZE)
    return mark_calls(DefaultSavePlanner(), background, {"set_up_planner": Phase.PLAN})


def mark_load(reader, phases: PhaseClock) -> DefaultLoadPlanner:
    """Mark the phases of a load on DCP's own steps: `reader` wrapped in place and the planner DCP makes
    when given none. DCP's readers read, deserialize and copy each item into the state inside read_data;
    a collective closes the load."""
    mark_calls(reader, phases, {
        "read_metadata": Phase.METADATA,
        "prepare_local_plan": (Phase.PLAN, Phase.EXCHANGE),
        "read_data": (Phase.READ, Phase.FINALIZE),
    })
    return mark_calls(DefaultLoadPlanner(), phases, {"set_up_planner": Phase.PLAN})
