"""`--use-precision-aware-optimizer` in megatron_shapes and megatron_torch, as megatron-core 0.16.1 saves it.

Not saved for real here: it needs Transformer Engine's FusedAdam (CUDA). The expected dtypes follow
megatron-core's `_get_main_param_and_optimizer_states` and FusedAdam's `get_unscaled_state` (see
`TrainingJob.distributed_states`).
"""

from __future__ import annotations

import pytest
import torch

from ckpt_bench.backends.workload.engines.base import allocate_shards
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.layout import megatron_torch
from ckpt_bench.layout.megatron_shapes import MegatronGPT, layout, rank_shards
from ckpt_bench.layout.sources import from_megatron_args
from ckpt_bench.model.architecture import ArchitectureError
from ckpt_bench.model.job import TrainingJob
from tests.unit.test_workload_megatron_moe import REAL_SAVES, TINY, workload

# Primus's MI355X MoE configs: bf16 moments and main gradients, fp32 main parameters (the default)
PRIMUS = dict(use_precision_aware_optimizer=True, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16",
              main_grads_dtype="bf16")
ARGS, WORLD, _ = REAL_SAVES["ep2_expert_dp2_gaps"]  # dense and expert optimizers, alignment gaps, expert DP 2


def _param_elements(gpt: MegatronGPT, rank: int) -> int:
    """Elements of the distributed optimizer's `param` shards the rank owns."""
    return sum(s.local_shape[0] for s in rank_shards(gpt, rank).optimizer if s.key.endswith(".param"))


def test_bf16_weights_save_their_main_parameters_as_int16_remainders_and_the_moments_in_fp32():
    plain = layout(workload(WORLD, **ARGS), WORLD)
    precise_workload = workload(WORLD, **ARGS, **PRIMUS)
    precise = layout(precise_workload, WORLD)
    gpt = MegatronGPT(precise_workload, WORLD)
    elements = [_param_elements(gpt, rank) for rank in range(WORLD)]
    assert all(elements)
    # fp32 param (4 bytes) -> int16 remainder (2 bytes); the moments stay fp32 on storage
    assert [a.bytes - b.bytes for a, b in zip(plain.ranks, precise.ranks, strict=True)] == [2 * n for n in elements]
    optimizer = rank_shards(gpt, 0).optimizer
    assert {s.key.rsplit(".", 1)[1]: s.dtype for s in optimizer} == {"exp_avg": "fp32", "exp_avg_sq": "fp32",
                                                                     "param": "int16"}
    # bf16 main gradients: the buffers are (bf16, bf16), which names the optimizer's keys
    assert all(".dtype_(torch.bfloat16, torch.bfloat16).bucket_idx_0." in s.key for s in optimizer)


def test_the_legacy_distrib_optim_file_gathers_every_state_in_fp32():
    plain = megatron_torch.layout(workload(WORLD, **ARGS), WORLD)
    precise = megatron_torch.layout(workload(WORLD, **ARGS, **PRIMUS), WORLD)
    assert [r.bytes for r in precise.ranks] == [r.bytes for r in plain.ranks]
    names = [t.name for r in precise.ranks for f in r.files if f.name.endswith("distrib_optim.pt")
             for t in f.tensors]
    assert names and all("(torch.bfloat16, torch.bfloat16)" in n for n in names)
    assert {t.dtype for r in precise.ranks for f in r.files for t in f.tensors if "exp_avg" in t.name} == {"fp32"}


@pytest.mark.parametrize(("extra", "states", "bytes_per_element"), [
    # fp16 main parameters: FusedAdam keeps them, get_unscaled_state returns them in fp32, no remainders
    (dict(main_params_dtype="fp16"), {"exp_avg": "fp32", "exp_avg_sq": "fp32", "param": "fp32"}, 12),
    # an fp8 recipe other than delayed scaling: megatron-core keeps fp32 main parameters, FusedAdam's bf16
    # moments are saved as kept
    (dict(fp8_recipe="tensorwise"), {"param": "fp32", "exp_avg": "bf16", "exp_avg_sq": "bf16"}, 8),
])
def test_what_is_saved_follows_who_holds_the_main_parameters(extra, states, bytes_per_element):
    plain = layout(workload(WORLD, **ARGS), WORLD)
    precise_workload = workload(WORLD, **ARGS, **PRIMUS, **extra)
    gpt = MegatronGPT(precise_workload, WORLD)
    assert dict(gpt.job.distributed_states) == states
    assert [s.key.rsplit(".", 1)[1] for s in rank_shards(gpt, 0).optimizer][:3] == list(states)
    precise = layout(precise_workload, WORLD)
    assert [a.bytes - b.bytes for a, b in zip(plain.ranks, precise.ranks, strict=True)] == [
        (12 - bytes_per_element) * _param_elements(gpt, rank) for rank in range(WORLD)]


def test_the_job_keeps_the_precision_aware_optimizer_through_its_dict():
    job = TrainingJob.from_megatron_args({**TINY, **PRIMUS})
    assert TrainingJob.from_dict(job.as_dict()) == job
    assert job.grad_dtype == "bf16" and TrainingJob.from_megatron_args(TINY).grad_dtype == "fp32"


@pytest.mark.parametrize(("args", "grad_dtype"), [
    (dict(grad_reduce_in_bf16=True), "bf16"),  # validate_args turns fp32 accumulation off
    (dict(bf16=False, fp16=True), "fp16"),
    (dict(bf16=False, fp16=True, accumulate_allreduce_grads_in_fp32=True), "fp32"),  # DDP's grad_reduce_in_fp32
])
def test_the_gradient_buffers_dtype_is_megatron_lms(args, grad_dtype):
    assert TrainingJob.from_megatron_args({**TINY, **args}).grad_dtype == grad_dtype


def test_int16_remainders_are_allocated_as_integers():
    gpt = MegatronGPT(workload(WORLD, **ARGS, **PRIMUS), WORLD)
    shards = [s for s in rank_shards(gpt, 0).optimizer if s.dtype == "int16"][:2]
    tensors = allocate_shards(shards, seed=0, randomize=True, device=torch.device("cpu"))
    assert {t.dtype for t in tensors.values()} == {torch.int16}


@pytest.mark.parametrize(("args", "needle"), [
    (dict(use_distributed_optimizer=False), "megatron-core takes it only with use_distributed_optimizer"),
    (dict(optimizer="sgd"), "with optimizer 'sgd': megatron-core takes it only with adam"),
    (dict(optimizer_cpu_offload=True), "optimizer_cpu_offload: the offloaded optimizer's checkpoint state is not"),
    (dict(fp8_recipe="mxfp8", exp_avg_dtype="fp8"), "exp_avg_dtype fp8 with fp8_recipe 'mxfp8'"),
    (dict(main_params_dtype="bf16"), "main_params_dtype 'bf16': Megatron-LM takes fp32, fp16"),
    (dict(accumulate_allreduce_grads_in_fp32=True), "main_grads_dtype bf16 with accumulate_allreduce_grads_in_fp32"),
    (dict(use_precision_aware_optimizer=False), "main_grads_dtype bf16: megatron-core takes a dtype other than fp32 "
                                                   "only with use_precision_aware_optimizer"),
])
def test_combinations_megatron_core_refuses_are_one_line(args, needle):
    with pytest.raises(ArchitectureError, match=needle):
        TrainingJob.from_megatron_args({**TINY, **PRIMUS, **args})
    with pytest.raises(ConfigError, match=f"^--workload x.yaml: .*{needle}"):
        from_megatron_args("x", {**TINY, **PRIMUS, **args}, "--workload x.yaml")


def test_the_plan_says_which_dtypes_it_assumed_and_why():
    """The int16 remainders rest on Transformer Engine's version, which the plan cannot see: it says so beside the
    bytes; the legacy format (all fp32) has nothing to assume."""
    import json

    from helpers import ROOT, launch

    pao = ["--set", "use_distributed_optimizer=true", "--set", "bf16=true",
           "--set", "use_precision_aware_optimizer=true",
           "--set", "exp_avg_dtype=bf16", "--set", "exp_avg_sq_dtype=bf16"]
    tiny = str(ROOT / "ckpt_bench" / "configs" / "tiny_gpt.yaml")
    plans = {engine: json.loads(launch("--workload", tiny, *pao, "--engine", engine, "--nproc-per-node", "2",
                                       "--plan", "--format", "json").stdout) for engine in ("torch_dist", "torch")}
    assert plans["torch_dist"]["optimizer_states_saved"] == {"exp_avg": "fp32", "exp_avg_sq": "fp32", "param": "int16"}
    assert "Transformer Engine 2.1 or later" in plans["torch_dist"]["optimizer_states_assumed"]
    assert "optimizer_states_saved" not in plans["torch"] and "optimizer_states_assumed" not in plans["torch"]
