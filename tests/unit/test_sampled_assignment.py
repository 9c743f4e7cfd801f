"""megatron-core's greedy assignment of shards to ranks timed over a sample of its shards (`rank_costs.
sampled_assignment`): each coverage sampled apart and scaled by its own count, megatron-core's function run on the
sample, a short call run whole, and the distribution steps say so."""

from __future__ import annotations

from megatron.core.dist_checkpointing import exchange_utils
from test_projection_fit import _job

from ckpt_bench.projection.inputs import Figure
from ckpt_bench.projection.model import _step_term
from ckpt_bench.projection.rank_costs import sampled_assignment
from ckpt_bench.projection.rank_costs.base import Budget
from ckpt_bench.projection.rank_costs.torch_dist import TorchDistCosts


def _shards(ranks: int = 64) -> tuple[dict, dict]:
    """A group's shards as a distributed-optimizer MoE job's: many held by one rank, expert weights by a few,
    a few dense weights by every rank."""
    to_ranks, sizes = {}, {}
    for index in range(3_000):
        to_ranks[("fragment", index)] = [index % ranks]
    for index in range(400):
        to_ranks[("expert", index)] = list(range(index % 8, ranks, 8))
    for index in range(20):
        to_ranks[("dense", index)] = list(range(ranks))
    for index in range(5):  # fewer than FEWEST_A_COVERAGE of a coverage: all of them
        to_ranks[("norm", index)] = list(range(0, ranks, 2))
    for shard in to_ranks:
        sizes[shard] = 1_000 + hash(shard) % 1_000
    return to_ranks, sizes


def test_a_long_call_runs_megatrons_function_on_each_coverage_apart_and_counts_the_rest(monkeypatch):
    to_ranks, sizes = _shards()
    calls, clock, real = [], [0.0], exchange_utils.distribute_shards_to_ranks

    def megatron(shard_to_ranks, shard_to_size, num_ranks, cross):  # one CPU second a shard, on a clock of its own
        calls.append(dict(shard_to_ranks))
        clock[0] += len(shard_to_ranks)
        return real(shard_to_ranks, shard_to_size, num_ranks, cross)

    monkeypatch.setattr(sampled_assignment, "_ORIGINAL", megatron)
    monkeypatch.setattr(sampled_assignment.time, "thread_time", lambda: clock[0])
    monkeypatch.setattr(sampled_assignment, "SAMPLED_FROM", 1_000)
    monkeypatch.setattr(sampled_assignment, "SAMPLE", 20_000)
    sampled = sampled_assignment.SampledAssignment()
    with sampled.standing_in():
        assigned = exchange_utils.distribute_shards_to_ranks(to_ranks, sizes, 64, set())
    assert exchange_utils.distribute_shards_to_ranks is sampled_assignment._ORIGINAL
    # one call a coverage, each of its own shards alone, at least FEWEST_A_COVERAGE of each (the 20 dense ones all)
    assert [len({len(to_ranks[shard]) for shard in call}) for call in calls] == [1, 1, 1, 1]
    norms, dense, experts, fragments = sorted(len(call) for call in calls)  # a stride of 6 (3,425 x 64 / 20,000)
    assert (norms, dense, fragments) == (5, 20, 500) and experts in (66, 67)
    # every sampled shard given to one of its holders, by megatron-core's own function
    assert set(assigned) == {shard for call in calls for shard in call}
    assert all(assigned[shard] in to_ranks[shard] for shard in assigned)
    # a shard's CPU alike within a coverage: the CPU run and the CPU counted stand for every shard
    assert clock[0] + sampled.counted_s() == len(to_ranks)
    assert sampled.counted_s() == 0.0  # read once: a timing's
    assert sampled.assignment.as_dict() == {"shards": 3_425, "timed": norms + dense + experts + fragments}


def test_a_short_call_runs_whole(monkeypatch):
    to_ranks, sizes = _shards(ranks=8)
    monkeypatch.setattr(sampled_assignment, "SAMPLED_FROM", len(to_ranks) * 8 + 1)
    sampled = sampled_assignment.SampledAssignment()
    with sampled.standing_in():
        assigned = exchange_utils.distribute_shards_to_ranks(to_ranks, sizes, 8, set())
    assert assigned == exchange_utils.distribute_shards_to_ranks(to_ranks, sizes, 8, set())
    assert sampled.assignment is None and sampled.counted_s() == 0.0


def test_the_distribution_steps_say_their_assignment_was_sampled(monkeypatch):
    monkeypatch.setattr(sampled_assignment, "SAMPLED_FROM", 1)
    for name in ("SAMPLE", "FEWEST_SHARDS", "FEWEST_A_COVERAGE"):  # a small job's few shards sampled
        monkeypatch.setattr(sampled_assignment, name, 1)
    save, load = TorchDistCosts(_job(world=64, num_layers=2), Budget(60)).distributions()
    for step in (save, load):
        assert step.complete and step.cpu_s > 0
        assert step.assignment["timed"] < step.assignment["shards"]
    text = _step_term("fully parallel distribution", save, Figure(None, "not given")).what
    assert f"greedy assignment timed over {save.assignment['timed']:,} of its {save.assignment['shards']:,}" in text
