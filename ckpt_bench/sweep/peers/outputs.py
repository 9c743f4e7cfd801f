"""What a sweep calls after each job and after writing its results: another benchmark's result
files in that benchmark's layout (`ckpt_bench.sweep.peers.s3torchbenchmarking.Translation`); ours write none."""

from __future__ import annotations

from pathlib import Path

from ckpt_bench.core.rundir import SWEEP_RESULTS_FILES
from ckpt_bench.report.sweep_results import JobRecord


class Outputs:
    """Result files in another benchmark's layout, written beside ours; this base writes none."""

    results_file = SWEEP_RESULTS_FILES[-1]  # the name of our sweep results (another tool's may take it)

    def job_done(self, job_dir: Path, record: JobRecord) -> None:
        """After a job ran in `job_dir`, with its `record` (its report, if it left one)."""

    def sweep_done(self, root: Path) -> None:
        """After our sweep's results were written in `root` (ckpt_bench.sweep.run.ResultsWriter.write)."""
