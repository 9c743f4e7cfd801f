"""Phases end to end (issue 29): 2 real torchrun ranks, DCP async on disk. Every save and load carries every
rank's phases, in DCP's order, and they sum to that rank's times; the summary shows them."""

from helpers import launch_ok

from ckpt_bench.core.events import event_files, read_event_files
from ckpt_bench.present.rows import as_report, headline_rows, phase_table
from ckpt_bench.report.engine import pair


def test_dcp_async_phases_sum_to_every_ranks_times(tmp_path):
    report = launch_ok("--backend", "dcp", "--model", "tiny", "--nproc-per-node", "2", "--dist-backend", "gloo",
                       "--save-calls", "2", "--async-save", "--save-dir", tmp_path / "ckpts", "--format", "json",
                       runs_dir=tmp_path / "runs")
    run_dir = report["run"]["dir"]
    for op in pair(read_event_files(event_files(f"{run_dir}/events"))):
        phases = op.phases()
        assert phases, f"{op.kind} {op.iteration} of rank {op.rank} has no phases"
        if op.kind == "save":
            assert [p["phase"] for p in phases if p["blocking"]] == ["state_dict", "stage", "schedule"]
            assert [p["phase"] for p in phases if not p["blocking"]][-4:] == ["plan", "exchange", "write+fsync",
                                                                               "finalize"]
            assert abs(sum(p["seconds"] for p in phases if p["blocking"]) - op.block_s()) < 1e-6
        else:
            assert [p["phase"] for p in phases] == ["state_dict", "metadata", "plan", "exchange", "read", "finalize"]
        assert abs(sum(p["seconds"] for p in phases) - op.total_s()) < 1e-6
    for record in [*report["saves"], report["load"]]:
        assert len(record["phases_per_rank"]) == 2 and record["phases_rank"] in (0, 1)
    typed = as_report(report)
    assert dict(headline_rows(typed))["where the time goes"].startswith("last save: ")
    columns, _rows = phase_table(typed)
    assert columns[:3] == ["phase", "first save 1 s", "share"]
