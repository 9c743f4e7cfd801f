"""Every parameter of an `Architecture`, as megatron-core 0.16.1 names, shapes and splits it.

The names are the keys of megatron-core's sharded state dict for the local layer spec (checked against real
saves, see tests/unit/test_workload_megatron_moe.py): the norms before attention and the MLP are saved as
`linear_qkv.layer_norm_weight` and `linear_fc1.layer_norm_weight` (Transformer Engine's names; MLA layers
keep `input_layernorm` and `pre_mlp_layernorm`), MLA's down projections are split over TP (Transformer
Engine's spec duplicates them on every TP rank instead: the same bytes written, more optimizer state), an expert
is saved under `mlp.experts.experts.` with the global expert index as an axis (SequentialMLP, TEGroupedMLP
and GroupedMLP save the same keys and shapes). Parameters are listed in module order (`named_parameters`),
which is the order the distributed optimizer's buffers follow, reversed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ckpt_bench.model.architecture import Architecture

__all__ = ["Param", "ParameterCounts", "decoder_layer_params", "embedding_params", "final_params", "mtp_params",
           "parameter_counts"]


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter (or saved buffer) of one layer or expert, unsharded."""

    name: str
    """Its key in the checkpoint, relative to its owner (`decoder.layers.[<i>.]`, `mtp.layers.<i>.`, or the
    model for the embedding and the output layer)."""
    shape: tuple[int, ...]
    """The full tensor of one layer (of one expert for an expert's)."""
    tp_axis: int | None
    """The axis split over tensor parallelism (expert tensor parallelism for an expert's); None: replicated."""
    chunks: int = 1
    """SwiGLU's fc1: the gate and up halves, each split over TP and saved as its own shard."""
    expert: bool = False
    """One per routed expert: in the expert optimizer's buffer, split over EP, replicated over expert-DP."""
    fp32: bool = False
    """Kept in fp32 whatever the model's dtype (the router's expert bias)."""
    trained: bool = True
    """False for a buffer saved with the model (no gradient, no optimizer state)."""

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def _norm(arch: Architecture, key: str, size: int) -> list[Param]:
    """A norm's weight (and LayerNorm's bias) under `key` (`..._weight` / `.weight` naming kept by caller)."""
    if key.endswith("layer_norm_"):
        names = ["layer_norm_weight", "layer_norm_bias"][: arch.norm_tensors]
        return [Param(key.removesuffix("layer_norm_") + name, (size,), None) for name in names]
    return [Param(f"{key}.{name}", (size,), None) for name in ("weight", "bias")[: arch.norm_tensors]]


def _linear(arch: Architecture, key: str, out_features: int, in_features: int, tp_axis: int | None, *,
            chunks: int = 1, bias: bool | None = None, expert: bool = False) -> list[Param]:
    """A linear layer's weight [out, in] and bias [out]: column-parallel (tp_axis 0: the bias split too) or
    row-parallel (tp_axis 1: the bias replicated)."""
    params = [Param(f"{key}.weight", (out_features, in_features), tp_axis, chunks, expert)]
    if arch.add_bias_linear if bias is None else bias:
        params.append(Param(f"{key}.bias", (out_features,), 0 if tp_axis == 0 else None, chunks, expert))
    return params


def _attention(arch: Architecture) -> list[Param]:
    h, heads = arch.hidden_size, arch.num_attention_heads
    if arch.mla is None:
        kv = arch.kv_channels
        params = _linear(arch, "self_attention.linear_proj", h, heads * kv, 1)
        params += _linear(arch, "self_attention.linear_qkv", kv * (heads + 2 * arch.num_query_groups), h, 0,
                          bias=arch.add_bias_linear or arch.add_qkv_bias)
        if arch.qk_layernorm:
            params += _norm(arch, "self_attention.q_layernorm", kv) + _norm(arch, "self_attention.k_layernorm", kv)
        return params
    mla = arch.mla
    qk = mla.qk_head_dim + mla.qk_pos_emb_head_dim
    params = _linear(arch, "self_attention.linear_proj", h, heads * mla.v_head_dim, 1)
    if mla.q_lora_rank is None:
        params += _linear(arch, "self_attention.linear_q_proj", heads * qk, h, 0, bias=False)
    else:
        params += _linear(arch, "self_attention.linear_q_down_proj", mla.q_lora_rank, h, 0, bias=False)
        params += _linear(arch, "self_attention.linear_q_up_proj", heads * qk, mla.q_lora_rank, 0, bias=False)
    params += _linear(arch, "self_attention.linear_kv_down_proj", mla.kv_lora_rank + mla.qk_pos_emb_head_dim, h,
                      0, bias=False)
    params += _linear(arch, "self_attention.linear_kv_up_proj", heads * (mla.qk_head_dim + mla.v_head_dim),
                      mla.kv_lora_rank, 0, bias=False)
    if arch.qk_layernorm:
        if mla.q_lora_rank is not None:
            params += _norm(arch, "self_attention.q_layernorm", mla.q_lora_rank)
        params += _norm(arch, "self_attention.kv_layernorm", mla.kv_lora_rank)
    return params


def _mlp(arch: Architecture, key: str, ffn: int, *, expert: bool = False) -> list[Param]:
    gated = 2 if arch.gated_mlp else 1
    return (_linear(arch, f"{key}.linear_fc1", gated * ffn, arch.hidden_size, 0, chunks=gated, expert=expert)
            + _linear(arch, f"{key}.linear_fc2", arch.hidden_size, ffn, 1, expert=expert))


def decoder_layer_params(arch: Architecture, layer: int) -> list[Param]:
    """The parameters of decoder layer `layer` (0-based), in module order; routed experts' once per expert."""
    h = arch.hidden_size
    # The local spec saves the two norms under Transformer Engine's fused names, except with MLA (its spec
    # maps no keys).
    mapped = arch.mla is None
    params = _norm(arch, "self_attention.linear_qkv.layer_norm_" if mapped else "input_layernorm", h)
    params += _attention(arch)
    params += _norm(arch, "mlp.linear_fc1.layer_norm_" if mapped else "pre_mlp_layernorm", h)
    if not arch.is_moe_layer(layer):
        return params + _mlp(arch, "mlp", arch.ffn_hidden_size)
    moe = arch.moe
    params.append(Param("mlp.router.weight", (moe.num_experts, h), None))
    if arch.add_bias_linear:
        params.append(Param("mlp.router.bias", (moe.num_experts,), None))
    if moe.expert_bias:
        params.append(Param("mlp.router.expert_bias", (moe.num_experts,), None, fp32=True, trained=False))
    params += _mlp(arch, "mlp.experts.experts", moe.ffn_hidden_size, expert=True)
    if moe.shared_expert_size:
        params += _mlp(arch, "mlp.shared_experts", moe.shared_expert_size)
        if moe.shared_expert_gate:
            params.append(Param("mlp.shared_experts.gate_weight", (1, h), None))
    return params


def embedding_params(arch: Architecture, tp: int) -> list[Param]:
    """The first stage's embedding: word embeddings (split over TP on the vocabulary) and learned positions."""
    params = [Param("embedding.word_embeddings.weight", (arch.padded_vocab_size(tp), arch.hidden_size), 0)]
    if arch.learned_positions:
        params.append(Param("embedding.position_embeddings.weight", (arch.learned_positions, arch.hidden_size),
                            None))
    return params


def final_params(arch: Architecture, tp: int) -> list[Param]:
    """The last stage's final norm and output layer (the output layer is the embedding's when tied)."""
    params = _norm(arch, "decoder.final_layernorm", arch.hidden_size)
    return params + [Param("output_layer.weight", (arch.padded_vocab_size(tp), arch.hidden_size), 0)]


def mtp_params(arch: Architecture, depth: int) -> list[Param]:
    """One multi-token-prediction layer (on the last stage): its norms, the projection of the concatenated
    embedding and hidden state, a transformer layer (MoE like the decoder's last layer) and a final norm."""
    h = arch.hidden_size
    params = _norm(arch, "enorm", h) + _norm(arch, "hnorm", h)
    params += _linear(arch, "eh_proj", h, 2 * h, 0, bias=False)
    layer = decoder_layer_params(arch, arch.num_layers - 1)
    params += [Param(f"transformer_layer.{p.name}", p.shape, p.tp_axis, p.chunks, p.expert, p.fp32, p.trained)
               for p in layer]
    return params + _norm(arch, "final_layernorm", h)


@dataclass(frozen=True)
class ParameterCounts:
    """A model's parameters: all of them, and those one token passes through (its top-k routed experts)."""

    total: int
    active: int


def parameter_counts(arch: Architecture, tp: int = 1) -> ParameterCounts:
    """Total and active parameters (each once; the vocabulary padded for `tp`; a tied output layer once)."""
    experts = arch.moe.num_experts if arch.moe else 0
    topk = arch.moe.router_topk if arch.moe else 0
    total = active = 0
    layers = [decoder_layer_params(arch, i) for i in range(arch.num_layers)]
    layers += [mtp_params(arch, depth) for depth in range(arch.mtp_num_layers)]
    for params in layers:
        for p in params:
            if not p.trained:
                continue
            total += p.numel * (experts if p.expert else 1)
            active += p.numel * (topk if p.expert else 1)
    outer = embedding_params(arch, tp) + final_params(arch, tp)
    if arch.tied_embeddings:
        outer = [p for p in outer if p.name != "output_layer.weight"]
    size = sum(p.numel for p in outer)
    return ParameterCounts(total + size, active + size)
