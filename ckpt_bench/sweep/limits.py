"""How many jobs a sweep may have, counted before any job is built.

Nine lists of ten values are a billion jobs: building them (each parsed and checked as a command line)
exhausts the memory long before the first runs, and even ten thousand take days. The count is the
product of the lists' lengths, known before anything is built; above `--max-jobs` (DEFAULT_MAX_JOBS
unless given) the sweep is refused with one line saying how long it would take at the very least.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from ckpt_bench.core.errors import ConfigError

DEFAULT_MAX_JOBS = 1000
# Every job starts torchrun and its ranks at least twice (save and load passes): ~5 s each on a small
# host. A lower bound: the sweep takes longer.
MIN_JOB_SECONDS = 10


def check_job_count(lengths: Iterable[int], source: str, max_jobs: int | None) -> int:
    """The number of jobs of lists of `lengths` values; ConfigError above `max_jobs` (None: no limit, a
    sweep resumed from its own folder)."""
    count = math.prod(lengths)
    if max_jobs is not None and count > max_jobs:
        hours = count * MIN_JOB_SECONDS / 3600
        raise ConfigError(f"{source}: {count:,} jobs, more than --max-jobs {max_jobs:,} (at {MIN_JOB_SECONDS} s a job "
                          f"at the very least, over {hours:,.0f} h); shorten the lists, or pass --max-jobs {count} "
                          "to run them all")
    return count
