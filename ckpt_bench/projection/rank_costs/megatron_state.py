"""Every rank's sharded state of a Megatron job, fast enough to go through a thousand ranks: the shards
`layout.megatron_shapes` derives (checked against real megatron-core saves), built once per class of
ranks that hold the same model shards and given each rank's replica ids, as megatron-core's objects
(`ShardedTensor`, `ShardedObject`, without data: what its metadata collectives carry)."""

from __future__ import annotations

import dataclasses
from functools import cached_property

from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor

from ckpt_bench.layout.megatron_fsdp2 import parameter_groups
from ckpt_bench.layout.megatron_fsdp2 import rank_state as fsdp2_rank_state
from ckpt_bench.layout.megatron_shapes import MegatronGPT, Shard
from ckpt_bench.layout.workload import Workload
from ckpt_bench.model.parallel import RankCoordinates
from ckpt_bench.projection.rank_costs.base import RankSample
from ckpt_bench.projection.rank_costs.dcp_steps import DTYPES, Item

__all__ = ["MegatronState"]



def _sharded_tensor(shard: Shard, regular: bool = True) -> ShardedTensor:
    """megatron-core's object for the shard; not `regular`: an FSDP2 chunk (torch.chunk's rows, uneven at the end),
    on no regular grid, whose overlap check megatron-core leaves to DCP."""
    return ShardedTensor(shard.key, None, DTYPES[shard.dtype], shard.local_shape, shard.global_shape,
                         shard.global_offset, shard.axis_fragmentations if regular else None, shard.replica_id,
                         shard.prepend_axis_num)


def _replica_id(class_replica_id: tuple[int, ...], expert: bool, c: RankCoordinates) -> tuple[int, ...]:
    """The replica id of a class's shard on the rank at `c`: its data-parallel rank (an expert's: its expert
    data-parallel rank) in place of data-parallel rank 0's."""
    return (*class_replica_id[:2], c.edp_rank if expert else c.dp_rank)


def _replicated(tensor: ShardedTensor, replica_id: tuple[int, ...]) -> ShardedTensor:
    """`tensor` with another replica id, as megatron-core's constructor makes it (its attributes in its order, pickled
    to the same bytes) without checking again what its class's template was checked for."""
    copy = object.__new__(ShardedTensor)
    copy.__dict__.update(tensor.__dict__)
    copy.replica_id = replica_id
    return copy


def item(shard: Shard) -> Item:
    """The shard as DCP plans it: its chunk of the global tensor (prepended axes of size 1)."""
    sizes = (1,) * shard.prepend_axis_num + shard.local_shape
    return Item(shard.key, shard.global_offset, sizes, shard.global_shape, shard.dtype, shard.nbytes)


class MegatronState:
    """The job's ranks' shards; `classes` of ranks holding the same model shards are built once. A job trained
    under FSDP2 (`Workload.state` "megatron_fsdp2") holds `megatron_fsdp2`'s shards: each rank its chunk of every
    parameter, none of them another rank's replica."""

    def __init__(self, workload: Workload, world_size: int):
        self.gpt = MegatronGPT(workload, world_size)
        self.fsdp2 = workload.state == "megatron_fsdp2"
        self._models: dict[RankCoordinates, list] = {}
        self._model_tensors: dict[RankCoordinates, list[tuple[ShardedTensor, bool]]] = {}
        self._distributions: dict[tuple[int, int], object] = {}
        self._written: dict[int, list[Item]] = {}

    @property
    def world_size(self) -> int:
        return self.gpt.world_size

    def model(self, rank: int, replicas: bool = True) -> list[Shard]:
        """The rank's model shards: its class's, with its data-parallel rank in the replica ids (expert shards:
        its expert data-parallel rank), as megatron-core gives them; without `replicas`, its class's shards as
        they are (data-parallel rank 0's replica ids), for what needs only their names and sizes (a DCP plan's
        items), spared a copy of every shard."""
        c = self.gpt.coordinates(rank)
        probe = self.gpt.class_coordinates(c)
        template = self._models.get(probe)
        if template is None:
            template = self._models[probe] = self.gpt.model_shards(probe)
        if not replicas:
            return template
        return [dataclasses.replace(shard, replica_id=_replica_id(shard.replica_id, shard.expert, c))
                for shard in template]

    def shards(self, rank: int, replicas: bool = True) -> tuple[list[Shard], list[Shard]]:
        """(model, optimizer) shards of the rank (`replicas`: as `model`'s)."""
        c = self.gpt.coordinates(rank)
        if self.fsdp2:
            probe = self.gpt.class_coordinates(c)
            parameters = self._models.get(probe)
            if parameters is None:
                parameters = self._models[probe] = parameter_groups(self.gpt.model_shards(probe))
            held = fsdp2_rank_state(self.gpt, c, parameters)
            optimizer = [shard for shard in held if shard.key.startswith("optimizer.")]
            return [shard for shard in held if not shard.key.startswith("optimizer.")], optimizer
        model = self.model(rank, replicas)
        return model, self.gpt.optimizer_shards(c, model)

    def sharded_metadata(self, rank: int) -> tuple[list[ShardedTensor], list[ShardedObject]]:
        """What megatron-core's metadata collectives carry for the rank, all without data: its `ShardedTensor`s
        (model, then optimizer; what the fully parallel distribution gathers) and its `ShardedObject`s (the
        sharding validation gathers both)."""
        c = self.gpt.coordinates(rank)
        objects = [ShardedObject(obj.key, None, obj.global_shape, obj.global_offset, obj.replica_id)
                   for obj in self.gpt.objects(c)]
        if self.fsdp2 or not self.gpt.job.distributed_optimizer:  # the optimizer's shards mirror the model's
            model, optimizer = self.shards(rank)
            return [_sharded_tensor(shard, not self.fsdp2) for shard in model + optimizer], objects
        # A class's model shards built once as megatron-core's objects, each rank's given its replica ids (what
        # `model` gives its shards): a thousand ranks' metadata in seconds, not tens of them.
        probe = self.gpt.class_coordinates(c)
        templates = self._model_tensors.get(probe)
        if templates is None:
            templates = self._model_tensors[probe] = [(_sharded_tensor(shard), shard.expert)
                                                       for shard in self.model(rank, replicas=False)]
        tensors = [_replicated(tensor, _replica_id(tensor.replica_id, expert, c)) for tensor, expert in templates]
        return tensors + [_sharded_tensor(shard) for shard in self.gpt.optimizer_shards(c)], objects

    def _distribution(self, rank: int):
        c = self.gpt.coordinates(rank)
        key = (c.tp_rank, c.pp_rank)
        if key not in self._distributions:
            self._distributions[key] = self.gpt.save_distribution(*key)
        return self._distributions[key]

    def written_items(self, rank: int) -> list[Item]:
        """The rank's DCP plan under megatron's fully parallel save: the shards its group's distribution gives it
        (`MegatronGPT.save_distribution` replays megatron's), its own distributed-optimizer shards, its
        main-replica objects, keyed as megatron-core keys them. Built once a rank (the save's plan and the fully
        parallel load's read the same)."""
        items = self._written.get(rank)
        if items is None:
            items = self._written[rank] = self._written_items(rank)
        return items

    def _written_items(self, rank: int) -> list[Item]:
        model, optimizer = self.shards(rank, replicas=False)
        if self.fsdp2:  # no data-parallel replicas: each rank writes its own chunks (tensor-parallel rank 0 a norm)
            return [item(shard) for shard in model + optimizer if shard.is_main_replica]
        writer = self._distribution(rank).writer
        own = optimizer if self.gpt.job.distributed_optimizer else []
        written = [shard for shard in model + optimizer if writer.get(shard.name) == rank]
        items = [item(shard) for shard in written + [s for s in own if s.name not in writer]]
        items += [Item(ShardedObject(obj.key, None, obj.global_shape, obj.global_offset, obj.replica_id).unique_key)
                  for obj in self.gpt.objects(self.gpt.coordinates(rank)) if obj.is_main_replica]
        return items

    def held_items(self, rank: int) -> list[Item]:
        """Every shard the rank holds, replicas included, as DCP plans them (a DCP save dedups them globally)."""
        model, optimizer = self.shards(rank, replicas=False)
        return [item(shard) for shard in model + optimizer]

    def held_items_and_objects(self, rank: int) -> list[Item]:
        """`held_items` and the rank's sharded objects: what a torch_dist load without the fully parallel wrapper
        reads (every shard and object the rank holds)."""
        return self.held_items(rank) + [
            Item(ShardedObject(obj.key, None, obj.global_shape, obj.global_offset, obj.replica_id).unique_key)
            for obj in self.gpt.objects(self.gpt.coordinates(rank))]

    def resident_bytes(self, rank: int) -> int:
        """Tensor bytes the rank holds (its model shards and its optimizer's)."""
        if self.fsdp2:
            return sum(shard.nbytes for shards in self.shards(rank) for shard in shards)
        return self._distribution(rank).resident[rank]

    def fully_parallel_read_bytes(self, rank: int) -> int:
        """Tensor bytes the rank reads under the fully parallel load: about what the distribution gives it (the
        rest it receives from its group)."""
        if self.fsdp2:
            return self.resident_bytes(rank)
        return self._distribution(rank).written[rank]

    def rank_sample(self, size: int | None) -> RankSample | None:
        """About `size` ranks, at least two of each class of ranks holding the same model shards
        (`MegatronGPT.class_coordinates`), evenly spread over its data-parallel ranks (its first and last among
        them): what a rank's distributed-optimizer shards (or FSDP2 chunks) add moves with its place. None where
        that would be every rank, or no `size` is asked (`RankSums.ranks`)."""
        if size is None:
            return None
        classes: dict[RankCoordinates, list[int]] = {}
        for rank in range(self.world_size):
            classes.setdefault(self.gpt.class_coordinates(self.gpt.coordinates(rank)), []).append(rank)
        per_class = max(2, -(-size // len(classes)))
        picked = []
        for ranks in classes.values():
            count = min(per_class, len(ranks))
            chosen = sorted({ranks[round(i * (len(ranks) - 1) / (count - 1))] for i in range(count)}) if count > 1 \
                else ranks[:1]
            picked.append((tuple(chosen), len(ranks)))
        sample = RankSample(tuple(picked))
        return sample if len(sample.ranks) < self.world_size else None

    @cached_property
    def groups(self) -> list[list[int]]:
        """The data-parallel x context-parallel groups the fully parallel save distributes over."""
        return [list(self.gpt.parallel.data_parallel_group(tp, pp)) for pp in range(self.gpt.pp)
                for tp in range(self.gpt.tp)]
