"""megatron-core's `torch_dist` save and load at the job's size (megatron-core as installed: 0.16.1 and 0.19.x,
whose steps are the same functions, reached differently where ckpt_bench.core.megatron_release says), with the
fully parallel save and load the torch_dist engine runs (Megatron-LM's
`--ckpt-fully-parallel-save`, its default, and `--ckpt-fully-parallel-load`):

save   1. sharding validation (`dist_checkpointing.save` -> `save_preprocess`): every rank's `ShardedTensor`s and
          `ShardedObject`s, without data, all-gathered over the job (`determine_global_metadata`:
          all_gather_object, so every rank unpickles every rank's list), then `validate_sharding_integrity` on
          rank 0;
       2. fully parallel distribution (`FullyParallelSaveStrategyWrapper`): per data-parallel group, its ranks'
          `ShardedTensor`s all-gathered and `determine_main_replica_uniform_distribution` on every rank of it
          (`distribute_shards_to_ranks`);
       3. the global plan (`save_state_dict_async_plan`, decentralized): local plans gathered to rank 0,
          `MCoreSavePlanner.create_global_plan` there, the plans kept in the metadata (`all_local_plans`);
       4. finalize: write results gathered, `.metadata` written.
       With `--ckpt-assume-constant-structure` Megatron-LM skips 1 after the first save and caches 2 and 3.
load   the sharding validation again, every rank reading `.metadata`, the fully parallel load's distribution
       (`ignore_groups=True`), the load plan (of what the distribution gives each rank; without the fully
       parallel load, of every shard a rank holds), and the exchange of what each rank needs and another read
       (`exchange_by_distribution`: network bytes, priced by the projection).

Steps 1 and 2 run megatron-core's own functions on the job's objects; their all_gather_object is simulated by
handing each rank's pickled list to megatron's code in place of the collective, unpickled as the collective does.
The save's and the load's distributions gather the same lists: their unpickling is timed once and is in both.
"""

from __future__ import annotations

import contextlib
import functools
import pickle
from collections.abc import Iterator

import torch
from megatron.core.dist_checkpointing import exchange_utils, validation
from megatron.core.dist_checkpointing.strategies.torch import MCoreSavePlanner

from ckpt_bench.core import megatron_release
from ckpt_bench.layout.workload import Workload
from ckpt_bench.projection.job import JobCheckpoint
from ckpt_bench.projection.rank_costs.base import (
    EVERY_RANK,
    Budget,
    OutOfBudget,
    RankCosts,
    RankSums,
    Step,
    all_gather_bytes,
    built_or_floor,
    run_step,
    timed_again,
    unpickled,
)
from ckpt_bench.projection.rank_costs.dcp_steps import DcpSteps
from ckpt_bench.projection.rank_costs.megatron_state import MegatronState
from ckpt_bench.projection.rank_costs.sampled_assignment import SampledAssignment
from ckpt_bench.projection.schedule import HELD_LOAD_PLAN


@contextlib.contextmanager
def simulated_all_gather(gathered: list, group_size: int) -> Iterator[None]:
    """megatron-core's `all_gather_object` and group size answered from `gathered` (each member's object, already
    unpickled as the collective unpickles them) for the duration."""
    readers = megatron_release.group_size_readers()
    real_gather, real_sizes = torch.distributed.all_gather_object, [module.get_pg_size for module in readers]

    def all_gather_object(output, obj, group=None):
        output[:] = gathered

    torch.distributed.all_gather_object = all_gather_object
    for module in readers:
        module.get_pg_size = lambda group=None: group_size
    try:
        yield
    finally:
        torch.distributed.all_gather_object = real_gather
        for module, real in zip(readers, real_sizes, strict=True):
            module.get_pg_size = real


def _unpickle_into(gathered: list, payloads: list[bytes], budget: Budget) -> None:
    gathered[:] = unpickled(payloads, budget)


def _distribute(gathered: list, ignore_groups: bool, assignment: SampledAssignment) -> None:
    """megatron-core's distribution on a member of the group whose `ShardedTensor`s `gathered` holds, its greedy
    assignment timed over a sample of the shards where long (`assignment`)."""
    with simulated_all_gather(gathered, len(gathered)), assignment.standing_in():
        exchange_utils.determine_main_replica_uniform_distribution(
            {"local": gathered[0]}, parallelization_group=object(), ignore_groups=ignore_groups)


def _least(rounds: list[dict[str, float]], operation: str) -> float:
    """A distribution's CPU from its timing rounds: the least unpickling and the least of its own function."""
    return min(done["unpickling"] for done in rounds) + min(done[operation] for done in rounds) if rounds else 0.0


class TorchDistCosts:
    def __init__(self, job: JobCheckpoint, budget: Budget):
        self.job, self.budget = job, budget
        self.state = MegatronState(Workload(**job.workload), job.world_size)
        self.per_node = job.ranks_per_node
        self._tensor_payloads: dict[int, bytes] = {}  # the distribution's, for the save and the load alike

    def _tensor_payload(self, rank: int, tensors: list | None = None) -> bytes:
        """The rank's pickled `ShardedTensor`s (`tensors`, where the caller built them), kept."""
        payload = self._tensor_payloads.get(rank)
        if payload is None:
            tensors = self.state.sharded_metadata(rank)[0] if tensors is None else tensors
            payload = self._tensor_payloads[rank] = pickle.dumps(tensors, protocol=pickle.HIGHEST_PROTOCOL)
        return payload

    def _payloads(self, payloads: list[bytes]) -> None:
        """Every rank's pickled metadata list (its sharded objects without data), appended to `payloads`; its
        tensors' alone kept for the distribution, pickled from the same objects: each rank's `ShardedTensor`s are
        built once, not again by the distribution (no measurable time saved here: DeepSeek-V3's 2-layer copy at
        1,024 ranks, four rounds against building them twice, medians 23.6 and 24.0 s)."""
        for rank in range(self.job.world_size):
            self.budget.check()
            tensors, objects = self.state.sharded_metadata(rank)
            self._tensor_payload(rank, tensors)
            payloads.append(pickle.dumps(tensors + objects, protocol=pickle.HIGHEST_PROTOCOL))

    def validation(self, operation: str) -> Step:
        self.budget.restart()
        world = self.job.world_size
        step = Step("sharding validation", operation,
                    "every rank's ShardedTensors and ShardedObjects without data all-gathered over the job "
                    "(determine_global_metadata: all_gather_object, unpickled on every rank), "
                    "validate_sharding_integrity on rank 0", cached_away=operation == "save",
                    collective=f"all_gather_object over {world} ranks")
        payloads = built_or_floor(step, self.budget, self._payloads, unpickled)
        if payloads is None:
            return step
        largest = max(map(len, payloads))
        step.host_bytes = all_gather_bytes(world, largest, self.per_node)
        step.rank_memory_bytes = world * largest

        def work() -> None:
            gathered = unpickled(payloads, self.budget)
            step.units = sum(map(len, gathered))
            validation.validate_sharding_integrity(gathered)

        return run_step(step, self.budget, work)

    def distributions(self) -> tuple[Step, Step]:
        """The fully parallel save's and load's distributions, per data-parallel group; each the busiest group's.
        Both gather the same `ShardedTensor`s: each group's payloads are unpickled once, timed, and that time is
        in both steps, beside each one's own `determine_main_replica_uniform_distribution` (the load's with
        `ignore_groups=True`) over the same unpickled lists (it reads them, never changes them)."""
        groups = self.state.groups
        steps = {operation: Step("fully parallel distribution", operation,
                                 f"per data-parallel group ({len(groups)} group(s) of {len(groups[0])} ranks), its "
                                 "ranks' ShardedTensors all-gathered (all_gather_object) and "
                                 "determine_main_replica_uniform_distribution"
                                 f"{'(ignore_groups=True)' if operation == 'load' else ''} on each of its ranks",
                                 cached_away=operation == "save",
                                 collective=f"all_gather_object over {len(groups[0])} ranks")
                 for operation in ("save", "load")}
        slowest = dict.fromkeys(steps, 0.0)
        largest, payloads = 0, []
        self.budget.restart()
        assignment = SampledAssignment()
        try:
            for group in groups:
                payloads = []
                for rank in group:
                    self.budget.check()
                    payloads.append(self._tensor_payload(rank))
                largest = max(largest, *map(len, payloads))
                gathered: list = []
                pieces = {"unpickling": functools.partial(_unpickle_into, gathered, payloads, self.budget),
                          **{operation: functools.partial(_distribute, gathered, operation == "load", assignment)
                             for operation in steps}}
                rounds: list[dict[str, float]] = []  # each timing round's CPU seconds, piece by piece
                while not rounds or timed_again([done["unpickling"] + max(done[operation] for operation in steps)
                                                 for done in rounds]):
                    timed: dict[str, float] = {}
                    for piece, work in pieces.items():  # the unpickling first: the others read what it made
                        spent = timed.get("unpickling", 0.0)
                        one = run_step(Step(piece, "save", ""), self.budget.restart(spent=spent), work, once=True,
                                       counted=None if piece == "unpickling" else assignment.counted_s)
                        timed[piece] = one.cpu_s
                        if not one.complete:  # at least what this round spent, or what a whole round took
                            for operation in steps:
                                slowest[operation] = max(slowest[operation], timed["unpickling"]
                                                         + timed.get(operation, 0.0), _least(rounds, operation))
                            raise OutOfBudget
                    rounds.append(timed)
                for operation in steps:
                    slowest[operation] = max(slowest[operation], _least(rounds, operation))
                del gathered[:]
        except OutOfBudget:
            for step in steps.values():
                step.complete = False
                step.why = "the budget ran out before every group's distribution was computed: a lower bound"
            if not any(slowest.values()) and payloads:  # not one group done: at least its members' payloads unpickled
                floor, fresh = Step("unpickling", "save", ""), Budget(self.budget.seconds)
                run_step(floor, fresh, lambda: unpickled(payloads, fresh))
                slowest = dict.fromkeys(steps, floor.cpu_s or 0.0)
        for operation, step in steps.items():
            step.cpu_s = round(slowest[operation], 4)
            if assignment.assignment:
                step.assignment = assignment.assignment.as_dict()
            step.host_bytes = all_gather_bytes(len(groups[0]), largest, self.per_node)
            step.rank_memory_bytes = len(groups[0]) * largest
        return steps["save"], steps["load"]

    def exchange(self) -> Step:
        """The fully parallel load's exchange: each rank gets the shards it needs that another rank read."""
        received = [max(0, self.state.resident_bytes(rank) - self.state.fully_parallel_read_bytes(rank))
                    for rank in range(self.job.world_size)]
        per = self.per_node
        busiest = max(sum(received[start:start + per]) for start in range(0, len(received), per))
        return Step("exchange of loaded shards", "load",
                    "the fully parallel load's exchange_by_distribution: each rank receives the shards it holds that "
                    "another rank of its group read (broadcast over the group)",
                    collective="broadcasts within each data-parallel group", host_bytes=busiest,
                    why="data movement, not CPU: priced with the network figure")

    def compute(self, sums: RankSums) -> RankCosts:
        world, threads = self.job.world_size, self.job.thread_count
        dcp = DcpSteps(world, threads, self.budget, self.state.written_items,
                       self.state.written_items)  # a fully parallel load reads about what the rank wrote

        def held_load_plan() -> Step:
            """A sum over the ranks whose ranks of a class hold about as many items: `sums` says over which. (The
            fully parallel load's plan is one too, but what the distribution gives a rank to read varies from rank
            to rank: it is computed over every rank.)"""
            return dcp.load_plan(HELD_LOAD_PLAN, self.state.held_items_and_objects, sums,
                                 self.state.rank_sample(sums.ranks))

        if sums.steps == "sums":
            return RankCosts("torch_dist", world, [held_load_plan()])
        save_validation = self.validation("save")
        save_distribution, load_distribution = self.distributions()
        steps = [save_validation, save_distribution,
                 dcp.global_plan(MCoreSavePlanner(dedup_replicated_tensors=False, flatten_state_dict=False),
                                 decentralized=True, keep_local_plans=True, cached_away=True),
                 dcp.finalize()]
        load_validation = Step(**{**save_validation.as_dict(), "operation": "load", "cached_away": False})
        steps += [load_validation, dcp.metadata_read(), load_distribution, dcp.load_plan(),
                  held_load_plan(), self.exchange()]
        return RankCosts("torch_dist", world, steps, metadata_file_bytes=dcp.metadata_bytes,
                         every_rank_reads_metadata=True)


def compute(job: JobCheckpoint, budget: Budget, sums: RankSums = EVERY_RANK) -> RankCosts:
    return TorchDistCosts(job, budget).compute(sums)
