"""Every rank's sharded metadata built from its class's template (`rank_costs.megatron_state`): the same objects,
pickled to the same bytes, as megatron-core's constructor makes from the rank's own shards."""

from __future__ import annotations

import pickle

import pytest
from test_projection_fit import TINY

from ckpt_bench.layout.sources import resolve_workload
from ckpt_bench.projection.rank_costs.megatron_state import MegatronState, _sharded_tensor


@pytest.mark.parametrize("settings", [
    {"num_experts": 8, "expert_model_parallel_size": 4, "moe_router_topk": 2, "add_bias_linear": False,
     "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2, "use_distributed_optimizer": True},
    {"use_distributed_optimizer": False, "tensor_model_parallel_size": 2},
])
def test_a_ranks_metadata_from_its_class_template_pickles_as_its_own_shards_do(settings):
    state = MegatronState(resolve_workload(TINY, {"num_layers": 4, **settings}), 64)
    for rank in range(64):
        tensors, objects = state.sharded_metadata(rank)
        model, optimizer = state.shards(rank)
        expected = [_sharded_tensor(shard) for shard in model + optimizer]
        assert pickle.dumps(tensors, protocol=5) == pickle.dumps(expected, protocol=5)
        assert [tensor.replica_id for tensor in tensors] == [shard.replica_id for shard in model + optimizer]
        assert {obj.replica_id[2] for obj in objects if obj.key.endswith("_extra_state")} <= {
            state.gpt.coordinates(rank).dp_rank, state.gpt.coordinates(rank).edp_rank}
