"""`--engine dcp` of a Megatron job: which state each engine saves of which workload, and who writes what --
DCP's own deduplication (torch's `dedup_save_plans`, run here on the plans the ranks would send) against our
replay of it in the plan (`megatron_dcp.dcp_writers`). No rank is started."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import ROOT, assert_one_line_error, launch
from torch.distributed.checkpoint._dedup_save_plans import dedup_save_plans
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
from torch.distributed.checkpoint.planner import SavePlan, TensorWriteData, WriteItem, WriteItemType

from ckpt_bench.backends.workload.engines import ENGINES, saved_state, state_layout
from ckpt_bench.backends.workload.engines.dcp import uncovered
from ckpt_bench.layout import dlio_layout, megatron_dcp, megatron_shapes
from ckpt_bench.layout.catalog import CATALOG
from ckpt_bench.layout.megatron_shapes import MegatronGPT
from ckpt_bench.layout.sources import resolve_workload
from ckpt_bench.layout.workload import TORCH_DTYPE

TINY_GPT = str(ROOT / "ckpt_bench" / "configs" / "tiny_gpt.yaml")
MOE = dict(num_experts=4, moe_router_topk=2, use_distributed_optimizer=True, bf16=True)


def experiment(**overrides):
    return resolve_workload(TINY_GPT, overrides)


def test_dcp_saves_the_workloads_own_state_and_the_other_engines_theirs():
    moe, dlio = experiment(**MOE, expert_model_parallel_size=2), CATALOG["llama3-8b"]
    assert [saved_state(ENGINES["dcp"], w) for w in (moe, dlio)] == ["megatron", "dlio"]
    assert {saved_state(ENGINES["torch_dist"], w) for w in (moe, dlio)} == {"megatron"}
    assert {saved_state(ENGINES["torch"], w) for w in (moe, dlio)} == {"megatron"}
    assert {saved_state(ENGINES["torch-save"], w) for w in (moe, dlio)} == {"dlio"}
    # the same Megatron state as torch_dist's, each shard written once (ShardedObjects aside in both)
    through_dcp = state_layout(ENGINES["dcp"], moe, 4, None)
    assert through_dcp.total_bytes == megatron_shapes.layout(moe, 4).total_bytes
    assert through_dcp.job_rank_bytes == megatron_dcp.layout(moe, 4).job_rank_bytes
    # a DLIO workload through dcp keeps DLIO's tensors, rank by rank
    assert state_layout(ENGINES["dcp"], dlio, 8, None).job_rank_bytes == dlio_layout.layout(dlio).job_rank_bytes


def test_torch_save_refuses_a_moe_and_names_the_engines_that_save_it():
    result = launch("--workload", TINY_GPT, "--set", "num_experts=4", "--set", "moe_router_topk=2",
                    "--engine", "torch-save", "--plan")
    line = assert_one_line_error(result, "cannot express its experts")
    assert "--engine dcp" in line and "torch_dist" in line and "torch (" in line


def _plans(gpt: MegatronGPT) -> list[SavePlan]:
    """The plan each rank's DefaultSavePlanner makes of our state dict: one WriteItem per shard, its index
    (key, global offset), its chunk, and the size of its whole global tensor, as planner_helpers builds it."""
    plans = []
    for shards in megatron_dcp.plan_items(gpt):
        items = [WriteItem(MetadataIndex(s.key, torch.Size(s.global_offset)), WriteItemType.SHARD, tensor_data=(
            TensorWriteData(ChunkStorageMetadata(torch.Size(s.global_offset),
                                                 torch.Size((1,) * s.prepend_axis_num + s.local_shape)),
                            TensorProperties(dtype=getattr(torch, TORCH_DTYPE[s.dtype])), torch.Size(s.global_shape))))
            for s in shards]
        plans.append(SavePlan(items))
    return plans


@pytest.mark.parametrize(("world", "overrides"), [
    (4, dict(MOE, expert_model_parallel_size=2)),  # replicas over DP and expert DP
    (4, dict(MOE, expert_model_parallel_size=2, tensor_model_parallel_size=2, expert_tensor_parallel_size=1)),
    (4, dict(pipeline_model_parallel_size=2, use_distributed_optimizer=False, bf16=True)),  # Adam per shard
    (8, dict(MOE, expert_model_parallel_size=4, moe_shared_expert_intermediate_size=256)),
])
def test_the_plans_writers_are_dcps_own_deduplication(world, overrides):
    gpt = MegatronGPT(experiment(**overrides), world)
    written = [0] * world
    for rank, plan in enumerate(dedup_save_plans(_plans(gpt))):
        written[rank] = sum(math.prod(item.tensor_data.chunk.sizes) * item.tensor_data.properties.dtype.itemsize
                            for item in plan.items)
    expected = megatron_dcp.dcp_writers(gpt)
    assert list(expected.written) == written
    assert sum(written) == megatron_shapes.layout(gpt.workload, world).total_bytes


def test_the_rest_of_a_tensor_is_covered_once():
    size = (4, 6, 8)
    boxes = [((1, 0, 0), (1, 3, 8)), ((2, 3, 4), (2, 3, 4)), ((0, 0, 0), (1, 6, 8))]
    rest = uncovered(size, boxes)
    cells = [(i, j, k) for offsets, sizes in boxes + rest
             for i in range(offsets[0], offsets[0] + sizes[0]) for j in range(offsets[1], offsets[1] + sizes[1])
             for k in range(offsets[2], offsets[2] + sizes[2])]
    assert len(cells) == len(set(cells)) == math.prod(size)
    assert len(rest) <= 4 and uncovered((10,), [((0,), (10,))]) == []
