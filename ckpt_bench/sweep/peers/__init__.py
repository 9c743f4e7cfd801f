"""Other benchmarks' own files, run as they are: a sweep file of theirs is translated into our jobs,
and their result files are written beside ours (`ckpt_bench.sweep.run` calls `translation_for` once).

    s3torchbenchmarking   Hydra configs (conf/dcp*.yaml, lightning_checkpointing.yaml,
                          pytorch_checkpointing.yaml) and their job_results.json / run_results.json

dataflux-pytorch's environment variables are read by the Lightning backend itself
(`ckpt_bench.backends.lightning.launcher.options_from_env`): they need no translation.
"""

from __future__ import annotations

from collections.abc import Sequence

from ckpt_bench.sweep.limits import DEFAULT_MAX_JOBS
from ckpt_bench.sweep.peers import s3torchbenchmarking
from ckpt_bench.sweep.peers.s3torchbenchmarking import Translation


def translation_for(definition, source: str, overrides: Sequence[str], options: dict,
                    max_jobs: int | None = DEFAULT_MAX_JOBS) -> Translation | None:
    """The translation of a peer's file (at most `max_jobs` jobs), or None when `definition` is a ckpt-bench
    sweep file."""
    if s3torchbenchmarking.recognises(definition):
        return s3torchbenchmarking.translate(definition, source, overrides, options, max_jobs)
    return None
