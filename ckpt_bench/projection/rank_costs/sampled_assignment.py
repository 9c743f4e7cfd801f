"""megatron-core's greedy assignment of a fully parallel save's shards to ranks, timed over a sample of its shards
where it would take minutes, and scaled.

`distribute_shards_to_ranks` (megatron/core/dist_checkpointing/exchange_utils.py, 118-169 in core 0.16.1, the same
in 0.19.0), which `determine_main_replica_uniform_distribution` calls on every rank of each data-parallel group at
a fully parallel save and load, sorts the group's shards (by coverage, then size) and gives each in turn to the
least loaded of the ranks holding it: `min((size, rank) for size, rank in rank_sizes if rank in shard_ranks)`, a
pass over every rank of the group a shard, each asking a tuple of the shard's holders. Its CPU is a sum over the
shards, each about the group's size times its holders' (which ranks already got what moves the loads compared, not
the work): DeepSeek-V3 at 1,024 ranks and 8 of its layers, 20 s a call here, two calls (the save's and the load's)
in each copy of the job `sampled` computes, and the copies' largest step.

Where a call would go through at least `SAMPLED_FROM` (shard, rank) pairs, `SampledAssignment` stands in for it
(`exchange_utils.distribute_shards_to_ranks`, looked up when `determine_main_replica_uniform_distribution` calls
it) and runs megatron-core's own function on the shards of each coverage apart (the holders' count and whether the
main replica is in another group: megatron-core's first two sort keys, within which shards cost alike), every
`stride`-th of them (at least `FEWEST_A_COVERAGE`; the multiples offset at random), about `SAMPLE` pairs in all:
each coverage's CPU times its shards over those timed is its part of the call's, and the step counts the difference
(`run_step(counted=...)`). No collection runs inside the window that is scaled: one that fell there (its cost the
heap's) would count tens of times, where the whole call pays it once. Measured against the whole call, alternately
in one process (megatron-core's function alone, on the inputs a copy of the job gives it): Llama 3.1 70B at
8 layers x 1,024 ranks (208,856 shards, 12,294 timed) 0.79-1.24 of its time over six calls, the whole call itself
moving 8.9-12.4 s; DeepSeek-V3 at 4 layers (31,494 shards) 0.81-1.27 with a third of this sample (3,955
shards). The samples' sorts stand for the whole's (a few tenths of a second of 20). The assignment it returns
holds the sampled shards alone: nothing here uses it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from megatron.core.dist_checkpointing import exchange_utils

from ckpt_bench.core.collector import collector_paused

__all__ = ["FEWEST_A_COVERAGE", "FEWEST_SHARDS", "SAMPLE", "SAMPLED_FROM", "Assignment", "SampledAssignment"]

#: A call going through fewer (shard, holder-rank tuple asked) pairs than this runs whole (a few seconds here).
SAMPLED_FROM = 24_000_000
#: About how many pairs a sampled call goes through, and the fewest shards it times: a second or more here (a
#: window of a tenth of a second, scaled a hundred times, moved 0.7-1.7x the whole call's time from call to call on
#: this shared machine, where the whole call moves 15 %).
SAMPLE = 12_000_000
FEWEST_SHARDS = 500
#: The fewest shards of one coverage timed (all of them where it has no more).
FEWEST_A_COVERAGE = 16


@dataclass(frozen=True)
class Assignment:
    """A sampled call: `shards` the group's, `timed` of them run through megatron-core's function."""

    shards: int
    timed: int

    def as_dict(self) -> dict:
        return {"shards": self.shards, "timed": self.timed}


_ORIGINAL = exchange_utils.distribute_shards_to_ranks


class SampledAssignment:
    """Stands in for megatron-core's `distribute_shards_to_ranks` while `standing_in`: a long call timed over a
    sample of its shards, the rest of its CPU counted (`counted_s`); the last sampled call's `assignment`."""

    def __init__(self) -> None:
        self.assignment: Assignment | None = None
        self._extra_s = 0.0  # the shards not run, at the sampled ones' CPU a shard

    @contextmanager
    def standing_in(self) -> Iterator[None]:
        exchange_utils.distribute_shards_to_ranks = self._distribute
        try:
            yield
        finally:
            exchange_utils.distribute_shards_to_ranks = _ORIGINAL

    def _distribute(self, shard_to_ranks: dict, shard_to_size: dict, num_ranks: int,
                    cross_parallelization_group_loads: set) -> dict:
        shards = len(shard_to_ranks)
        if shards * num_ranks < SAMPLED_FROM:
            return _ORIGINAL(shard_to_ranks, shard_to_size, num_ranks, cross_parallelization_group_loads)
        # Each coverage (megatron-core's first two sort keys) apart: its shards cost alike, a few of them may cost
        # most of the call (a dense layer's weights held by every rank of the group), and a stride through them all
        # would take one more or one fewer of those by chance.
        strata: dict[tuple[bool, int], list] = {}
        for shard, ranks in shard_to_ranks.items():
            strata.setdefault((shard in cross_parallelization_group_loads, len(ranks)), []).append(shard)
        stride = max(1, min(shards * num_ranks // SAMPLE, shards // FEWEST_SHARDS))
        phase = random.Random(shards)
        assigned, timed = {}, 0
        for stratum in strata.values():
            count = len(stratum)
            sample = stratum
            if count > FEWEST_A_COVERAGE:
                sample = stratum[phase.randrange(stride)::stride]
                if len(sample) < FEWEST_A_COVERAGE:
                    sample = stratum[::count // FEWEST_A_COVERAGE]
            chosen = {shard: shard_to_ranks[shard] for shard in sample}
            # No collection inside the window that is scaled: one that falls there (its cost the heap's, what came
            # before the call) would count a hundred times; the whole call would pay it once, as it does after.
            with collector_paused():
                started = time.thread_time()
                assigned.update(_ORIGINAL(chosen, shard_to_size, num_ranks, cross_parallelization_group_loads))
                self._extra_s += (time.thread_time() - started) * (count / len(sample) - 1)
            timed += len(sample)
        self.assignment = Assignment(shards, timed)
        return assigned

    def counted_s(self) -> float:
        """The seconds the calls since the last reading stand for beyond their CPU (a timing's, for `run_step`)."""
        extra, self._extra_s = self._extra_s, 0.0
        return extra
