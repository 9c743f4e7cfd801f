"""What a sweep calls after each job and after writing its results: another benchmark's result
files in that benchmark's layout (`ckpt_bench.sweep.peers.s3torchbenchmarking.Translation`); ours write none."""

from __future__ import annotations

from pathlib import Path

from ckpt_bench.core.rundir import SWEEP_RESULTS_FILES


class Outputs:
    """Result files in another benchmark's layout, written beside ours; this base writes none."""

    results_file = SWEEP_RESULTS_FILES[-1]  # the name of our sweep results (another tool's may take it)

    def job_done(self, job_dir: Path, index: int) -> None:
        """After job `index` ran in `job_dir`."""

    def sweep_done(self, root: Path, results: dict) -> None:
        """After our sweep `results` were written in `root` (at every job's end)."""
