"""What every rank of a Megatron-LM job writes in Megatron's legacy `torch` format, computed without torch.

Megatron-LM's `save_checkpoint` with `--ckpt-format torch` (megatron/training/checkpointing.py, core_v0.16.1):

* `iter_<7 digits>/mp_rank_<tp:02d>[_<pp:03d>][_<ep:03d>]/` per rank: the pipeline rank when PP > 1, the
  expert-parallel rank when EP > 1 (`get_checkpoint_name`);
* `model_optim_rng.pt`, written by every rank of expert-data-parallel rank 0 (`get_expert_data_parallel_rank()
  == 0`): `torch.save` of the rank's whole local model (`state_dict_for_save_checkpoint`: every parameter of
  its stage at its TP share, its local experts, the router's expert-bias buffer, a tied output layer's or
  MTP's copy of the embedding) and, without the distributed optimizer, the optimizer's state of the same
  parameters (Adam's two moments, torch's Adam's one-element `step`, and for half-precision weights the fp32
  main copy; a MoE's dense and expert optimizers side by side; Transformer Engine's FusedAdam keeps the step
  in its parameter groups instead, 4 bytes a parameter less); args, RNG and scheduler state besides (small,
  not tensors);
* `distrib_optim.pt`, with the distributed optimizer, written by rank 0 of each optimizer's data-parallel
  group (`save_parameter_state`: the group's state gathered to it): per buffer, fp32 `param`, `exp_avg`,
  `exp_avg_sq` of the buffer's unpadded length (a MoE's expert buffer by expert-data-parallel rank 0; a
  ChainedOptimizer saves the list of both). fp32 with the precision-aware optimizer too:
  `get_parameter_state_dp_zero` copies each state into fp32 buffers (core_v0.16.1 distrib_optimizer.py
  1027-1070), so only the buffer's `(param, grad)` key follows its dtypes (bf16 main gradients).

So every expert-data-parallel replica group writes the dense model once per EP rank, and with the
distributed optimizer the optimizer state lands on the data-parallel rank 0s. The model, its buffers and its
bucketing are `megatron_shapes`'s; each file's tensor bytes were checked against what megatron-core 0.16.1's
`state_dict_for_save_checkpoint`, `state_dict` and `get_parameter_state_dp_zero` return on real CPU models
(MoE with expert-DP 2, ETP 1 with a dense first layer, PP 2 tied without the distributed optimizer, MTP on
PP 2; tests/unit/test_workload_megatron_moe.py). The tensors here are flat, as
DLIO's (the same bytes; `torch.save` keeps shapes in a few bytes of pickle), keyed by Megatron's module
names, lists kept as dicts keyed by index.
"""

from __future__ import annotations

from collections.abc import Sequence

from ckpt_bench.layout.checkpoint_layout import FileShare, Layout, RankShare, TensorSpec, ranks_that_run
from ckpt_bench.layout.megatron_shapes import MegatronGPT
from ckpt_bench.layout.workload import TORCH_DTYPE, Workload, WorkloadError
from ckpt_bench.model.parallel import RankCoordinates

__all__ = ["MODEL_FILE", "OPTIMIZER_FILE", "folder", "layout", "rank_files"]

MODEL_FILE = "model_optim_rng.pt"
OPTIMIZER_FILE = "distrib_optim.pt"

# The sharded state dict's names for the two layer norms (Transformer Engine's) and the module's own.
_MODULE_NAMES = (("self_attention.linear_qkv.layer_norm_", "input_layernorm."),
                 ("mlp.linear_fc1.layer_norm_", "pre_mlp_layernorm."))


def folder(gpt: MegatronGPT, c: RankCoordinates) -> str:
    """`get_checkpoint_name`'s folder of the rank at `c`."""
    name = f"mp_rank_{c.tp_rank:02d}"
    if gpt.pp > 1:
        name += f"_{c.pp_rank:03d}"
    if gpt.parallel.ep > 1:
        name += f"_{c.ep_rank:03d}"
    return name


def _module_name(name: str) -> str:
    """The module's own name of a parameter (an MTP layer's transformer layer's norms included)."""
    for sharded, module in _MODULE_NAMES:
        if sharded in name:
            return name.replace(sharded, module, 1)
    return name


def _model_tensors(gpt: MegatronGPT, c: RankCoordinates) -> list[tuple[TensorSpec, str]]:
    """(the tensor, its group: "dense", "expert", or "" for a buffer) of the rank's local model, module order;
    with virtual pipeline stages each model chunk under `model<vp_stage>`, its layers numbered from 0."""
    par, arch = gpt.parallel, gpt.arch
    tensors = []
    local_experts = range(c.ep_rank * (arch.moe.num_experts // par.ep), (c.ep_rank + 1) * (
        arch.moe.num_experts // par.ep)) if arch.moe else range(0)
    chunks = par.chunks(c.pp_rank)
    for chunk in chunks:
        root = f"model{chunk.vp_stage}" if len(chunks) > 1 else "model"
        for module in gpt._chunk_modules(chunk):
            prefix = module.prefix
            if prefix.startswith("decoder.layers."):
                index = int(prefix.split(".")[2]) if module.layer is None else module.layer
                prefix = f"decoder.layers.{index - chunk.layers.start}."
            for p in module.params:
                dtype = "fp32" if p.fp32 else arch.params_dtype
                group = ("expert" if p.expert else "dense") if p.trained else ""
                name = _module_name(p.name)
                if not p.expert:
                    numel = p.numel // par.tp if p.tp_axis is not None else p.numel
                    tensors.append((TensorSpec(f"{root}/{prefix}{name}", numel, dtype), group))
                    continue
                numel = p.numel // par.expert_tp if p.tp_axis is not None else p.numel
                for j, _ in enumerate(local_experts):
                    expert = name.replace("mlp.experts.experts.", f"mlp.experts.local_experts.{j}.")
                    tensors.append((TensorSpec(f"{root}/{prefix}{expert}", numel, dtype), group))
    return tensors


def rank_files(gpt: MegatronGPT, c: RankCoordinates) -> list[FileShare]:
    """The files the rank at `c` writes per save (empty for an expert-data-parallel replica without a DP rank
    0 of its own)."""
    files, where = [], folder(gpt, c)
    job, dtype = gpt.job, gpt.job.optimizer_dtype
    if c.edp_rank == 0:
        model = _model_tensors(gpt, c)
        tensors = [spec for spec, _ in model]
        if not job.distributed_optimizer:
            chained = len({group for _, group in model if group}) > 1
            for k, kind in enumerate(("dense", "expert")):
                trained = [spec for spec, group in model if group == kind]
                base = f"optimizer/{k}/" if chained else "optimizer/"
                for i, spec in enumerate(trained):
                    tensors += [TensorSpec(f"{base}optimizer/state/{i}/{state}", spec.numel, dtype)
                                for state in ("exp_avg", "exp_avg_sq")]
                    tensors.append(TensorSpec(f"{base}optimizer/state/{i}/step", 1, "fp32"))  # torch's Adam
                    if gpt.arch.params_dtype != "fp32":
                        tensors.append(TensorSpec(f"{base}fp32_from_fp16_params/0/{i}", spec.numel, dtype))
        files.append(FileShare(f"{where}/{MODEL_FILE}", "model", tuple(tensors), separator="/"))
    if job.distributed_optimizer:
        param, grad = gpt.buffer_dtypes
        key = f"(torch.{TORCH_DTYPE[param]}, torch.{TORCH_DTYPE[grad]})"
        chained = len({buffer.optimizer for buffer in gpt._buffers[c.pp_rank]}) > 1
        tensors = []
        for buffer in gpt._buffers[c.pp_rank]:
            if (c.dp_rank if buffer.kind == "dense" else c.edp_rank) != 0:
                continue
            base = f"{buffer.optimizer}/" if chained else ""
            unpadded = sum(bucket.unpadded for bucket in buffer.buckets)
            tensors += [TensorSpec(f"{base}{buffer.index}/{key}/{state}", unpadded, dtype)
                        for state in ("param", "exp_avg", "exp_avg_sq")]
        if tensors:
            files.append(FileShare(f"{where}/{OPTIMIZER_FILE}", "optimizer", tuple(tensors), separator="/"))
    return files


def layout(workload: Workload, world_size: int | None = None, run_ranks: Sequence[int] | None = None) -> Layout:
    """Every rank's files and bytes for one legacy `torch` save of `workload` as a Megatron GPT (of the ranks that
    run: `run_ranks`, default all); raises WorkloadError. A rank holds (and the engine allocates) exactly the
    tensors of its files.

    `RankShare.read_bytes` is what Megatron-LM's load reads on the rank: every rank `torch.load`s its
    model-parallel folder's `model_optim_rng.pt` (written once per folder, read by each of its data-parallel
    replicas), and an optimizer's data-parallel rank 0 its `distrib_optim.pt`, whose state it scatters to its
    group. (The engine's load reads back only what each rank wrote.)"""
    world = workload.world_size if world_size is None else world_size
    if world is None:
        raise WorkloadError(f"workload {workload.name!r} has no world size: pass world_size=")
    running = ranks_that_run(world, run_ranks)
    gpt = MegatronGPT(workload, world)
    files = [rank_files(gpt, gpt.coordinates(rank)) for rank in range(world)]
    written = [sum(f.nbytes for f in rank) for rank in files]
    model_file = {f.name: f.nbytes for rank in files for f in rank if f.kind == "model"}
    ranks = []
    for rank in running:
        c = gpt.coordinates(rank)
        optimizer = sum(f.nbytes for f in files[rank] if f.kind == "optimizer")
        read = model_file[f"{folder(gpt, c)}/{MODEL_FILE}"] + optimizer
        ranks.append(RankShare(rank=rank, files=tuple(files[rank]), bytes=written[rank], resident_bytes=written[rank],
                               tp_rank=c.tp_rank, pp_rank=c.pp_rank, dp_rank=c.dp_rank,
                               mp_rank=gpt.parallel.model_parallel_rank(c.tp_rank, c.pp_rank), ep_rank=c.ep_rank,
                               read_bytes=read))
    return Layout(workload=workload, world_size=world, data_parallelism=gpt.dp, ranks=tuple(ranks),
                  total_bytes=sum(written), parameters=gpt.parameters, job_rank_bytes=tuple(written))
