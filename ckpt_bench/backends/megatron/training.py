"""The training side of the worker: a real megatron-core GPT, its optimizer, mock data, train steps.

Built the way Megatron-LM's `pretrain` builds them (`get_model`, `setup_model_and_optimizer`,
`train_step`), with megatron-core only: the local layer spec (no Transformer Engine), the
megatron-core DistributedDataParallel wrapper, `get_megatron_optimizer`, and the schedules of
`get_forward_backward_func` (which also run the pipeline-parallel case). The data are random
tokens: a checkpoint benchmark needs the state to change every step, not to learn anything.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.distributed import (
    DistributedDataParallel,
    DistributedDataParallelConfig,
    finalize_model_grads,
)
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.optimizer import MegatronOptimizer, OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.module import Float16Module


def transformer_config(args: argparse.Namespace) -> TransformerConfig:
    return TransformerConfig(
        num_layers=args.num_layers,
        hidden_size=args.hidden_size,
        ffn_hidden_size=args.ffn_hidden_size,
        num_attention_heads=args.num_attention_heads,
        num_query_groups=args.num_query_groups if args.group_query_attention else None,
        tensor_model_parallel_size=args.tensor_model_parallel_size,
        pipeline_model_parallel_size=args.pipeline_model_parallel_size,
        expert_model_parallel_size=args.expert_model_parallel_size,
        context_parallel_size=args.context_parallel_size,
        sequence_parallel=args.sequence_parallel,
        num_moe_experts=args.num_experts,
        moe_router_topk=args.moe_router_topk,
        moe_grouped_gemm=args.moe_grouped_gemm,
        normalization=args.normalization,
        layernorm_epsilon=args.norm_epsilon,
        gated_linear_unit=args.swiglu,
        activation_func=F.silu if args.swiglu else F.gelu,
        add_bias_linear=args.add_bias_linear,
        hidden_dropout=args.hidden_dropout,
        attention_dropout=args.attention_dropout,
        init_method_std=args.init_method_std,
        bf16=args.bf16,
        fp16=args.fp16,
        params_dtype=args.params_dtype,
        pipeline_dtype=args.params_dtype,
        # The fused kernels need CUDA (and Apex / TE); the unfused paths are what the local spec uses.
        bias_activation_fusion=False,
        masked_softmax_fusion=False,
        persist_layer_norm=False,
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
    )


def _define_missing_te_gemm() -> None:
    """megatron-core 0.16's MoE router tests `te_general_gemm is not None`, a name its
    `moe_utils` binds only when Transformer Engine imports: without TE every MoE forward raises
    NameError. Binding it to None selects the plain-torch path the code means to fall back to."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def build_model(args: argparse.Namespace, config: TransformerConfig, device: torch.device) -> DistributedDataParallel:
    """One GPT model chunk for this pipeline stage, wrapped in megatron-core's DDP."""
    if args.num_experts is not None:
        _define_missing_te_gemm()
    model = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(
            num_experts=args.num_experts,
            moe_grouped_gemm=args.moe_grouped_gemm,
            normalization=args.normalization,
        ),
        vocab_size=args.padded_vocab_size,
        max_sequence_length=args.max_position_embeddings,
        pre_process=parallel_state.is_pipeline_first_stage(),
        post_process=parallel_state.is_pipeline_last_stage(),
        share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
        position_embedding_type=args.position_embedding_type,
        rotary_percent=args.rotary_percent,
        rotary_base=args.rotary_base,
    )
    model.to(device)
    if args.bf16 or args.fp16:
        model = Float16Module(config, model)  # as Megatron-LM's `get_model`: half params, fp32 in/out
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=args.accumulate_allreduce_grads_in_fp32,
        use_distributed_optimizer=args.use_distributed_optimizer,
    )
    ddp_model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
    ddp_model.broadcast_params()
    return ddp_model


def build_optimizer(args: argparse.Namespace, model: DistributedDataParallel) -> MegatronOptimizer:
    config = OptimizerConfig(
        optimizer=args.optimizer,
        lr=args.lr,
        weight_decay=args.weight_decay,
        adam_beta1=args.adam_beta1,
        adam_beta2=args.adam_beta2,
        adam_eps=args.adam_eps,
        sgd_momentum=args.sgd_momentum,
        clip_grad=args.clip_grad,
        bf16=args.bf16,
        fp16=args.fp16,
        params_dtype=args.params_dtype,
        use_distributed_optimizer=args.use_distributed_optimizer,
    )
    return get_megatron_optimizer(config, [model])


@dataclass
class Batch:
    tokens: torch.Tensor
    labels: torch.Tensor
    loss_mask: torch.Tensor
    position_ids: torch.Tensor


def mock_batches(args: argparse.Namespace, device: torch.device) -> Iterator[Batch]:
    """Endless random-token micro-batches, identical across the ranks of a model-parallel group
    (seeded by the data-parallel rank, as a real data loader would shard the data)."""
    generator = torch.Generator().manual_seed(args.seed + parallel_state.get_data_parallel_rank())
    position_ids = torch.arange(args.seq_length, device=device).expand(args.micro_batch_size, -1)
    while True:
        text = torch.randint(args.vocab_size, (args.micro_batch_size, args.seq_length + 1), generator=generator)
        text = text.to(device)
        yield Batch(
            tokens=text[:, :-1].contiguous(),
            labels=text[:, 1:].contiguous(),
            loss_mask=torch.ones(args.micro_batch_size, args.seq_length, device=device),
            position_ids=position_ids,
        )


def _loss(loss_mask: torch.Tensor, output_tensor: torch.Tensor):
    loss = torch.sum(output_tensor.float().view(-1) * loss_mask.view(-1)) / loss_mask.sum()
    # A copy: the schedule divides the returned loss in place by the number of micro-batches.
    return loss, {"lm loss": loss.detach().clone()}


def _forward_step(data_iterator: Iterator[Batch], model: DistributedDataParallel):
    batch = next(data_iterator)
    output = model(batch.tokens, batch.position_ids, attention_mask=None, labels=batch.labels)
    return output, partial(_loss, batch.loss_mask)


class Trainer:
    """Megatron-LM's `train_step`, reduced to what a checkpoint benchmark needs."""

    def __init__(self, args: argparse.Namespace, device: torch.device):
        self.args = args
        self.config = transformer_config(args)
        self.model = build_model(args, self.config, device)
        self.optimizer = build_optimizer(args, self.model)
        # The hooks Megatron-LM's `setup_model_and_optimizer` installs for the schedules.
        self.config.no_sync_func = self.model.no_sync
        self.config.finalize_model_grads_func = finalize_model_grads
        self.config.grad_scale_func = self.optimizer.scale_loss
        self.num_microbatches = args.global_batch_size // (args.micro_batch_size * args.data_parallel_size)
        self._data = mock_batches(args, device)
        self._forward_backward = get_forward_backward_func()

    def train_step(self) -> float | None:
        """One iteration; returns this rank's mean `lm loss` (None off the last pipeline stage)."""
        self.model.train()
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        losses = self._forward_backward(
            forward_step_func=_forward_step,
            data_iterator=self._data,
            model=[self.model],
            num_microbatches=self.num_microbatches,
            seq_length=self.args.seq_length,
            micro_batch_size=self.args.micro_batch_size,
            forward_only=False,
        )
        self.optimizer.step()
        if not losses:
            return None
        return torch.stack([entry["lm loss"] for entry in losses]).mean().item()

    def global_loss(self, local_loss: float | None) -> float:
        """The loss Megatron-LM prints: the mean over the last stage's data-parallel ranks.

        One all-reduce over the world so that rank 0 can print it whatever the pipeline layout."""
        holders = self.args.world_size // self.args.pipeline_model_parallel_size
        value = torch.tensor([0.0 if local_loss is None else local_loss / holders], device=self._device())
        torch.distributed.all_reduce(value)
        return value.item()

    def _device(self) -> torch.device:
        return next(self.model.parameters()).device
