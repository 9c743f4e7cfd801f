"""Named checkpoint shapes, built from each model's published architecture (no weights are fetched).

A checkpoint benchmark needs the *shape* of a model's state -- how many tensors, of which sizes --
not its trained values: the bytes written and the tensor layout decide the save and load times.
So each named model lists its parameters with the names and shapes of its Hugging Face state dict,
computed from the architecture's configuration (hidden size, layers, vocabulary, ...), and the
values are seeded random numbers (random, so that no storage layer can compress them away).

    estimate_bytes("llama2-7b", "bfloat16")   # torch-free: the launcher refuses what cannot fit
    build_state("vit-base", "float32", seed=0)  # {name: tensor} with the real parameter shapes

Parameter counts match the published models: vit-base 86.6M, gpt2 124.4M, T0_3B 2.85B,
llama2-7b 6.74B, llama2-13b 13.0B; `tiny` (0.15M) and `small` (7.3M) are for tests and smoke runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

Shape = tuple[int, ...]

# dtype name -> (torch attribute, bytes per element). Aliases map to the canonical names.
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32"}


def canonical_dtype(name: str) -> str:
    """'bf16' -> 'bfloat16'; raises KeyError for an unknown dtype."""
    name = DTYPE_ALIASES.get(name, name)
    if name not in DTYPES:
        raise KeyError(name)
    return name


@dataclass(frozen=True)
class Llama:
    """LLaMA-2 (decoder only, SwiGLU MLP, RMSNorm, untied output layer)."""

    vocab: int
    hidden: int
    intermediate: int
    layers: int
    kv_heads_ratio: int = 1  # heads / kv heads (1: no grouped-query attention)

    def tensors(self) -> Iterator[tuple[str, Shape]]:
        h, kv = self.hidden, self.hidden // self.kv_heads_ratio
        yield "model.embed_tokens.weight", (self.vocab, h)
        for i in range(self.layers):
            p = f"model.layers.{i}"
            yield f"{p}.self_attn.q_proj.weight", (h, h)
            yield f"{p}.self_attn.k_proj.weight", (kv, h)
            yield f"{p}.self_attn.v_proj.weight", (kv, h)
            yield f"{p}.self_attn.o_proj.weight", (h, h)
            yield f"{p}.mlp.gate_proj.weight", (self.intermediate, h)
            yield f"{p}.mlp.up_proj.weight", (self.intermediate, h)
            yield f"{p}.mlp.down_proj.weight", (h, self.intermediate)
            yield f"{p}.input_layernorm.weight", (h,)
            yield f"{p}.post_attention_layernorm.weight", (h,)
        yield "model.norm.weight", (h,)
        yield "lm_head.weight", (self.vocab, h)


@dataclass(frozen=True)
class Gpt2:
    """GPT-2 (learned positions, fused QKV `Conv1D`s, output layer tied to the embedding)."""

    vocab: int
    positions: int
    hidden: int
    layers: int

    def tensors(self) -> Iterator[tuple[str, Shape]]:
        h = self.hidden
        yield "transformer.wte.weight", (self.vocab, h)
        yield "transformer.wpe.weight", (self.positions, h)
        for i in range(self.layers):
            p = f"transformer.h.{i}"
            yield from ((f"{p}.ln_1.{n}", (h,)) for n in ("weight", "bias"))
            yield f"{p}.attn.c_attn.weight", (h, 3 * h)
            yield f"{p}.attn.c_attn.bias", (3 * h,)
            yield f"{p}.attn.c_proj.weight", (h, h)
            yield f"{p}.attn.c_proj.bias", (h,)
            yield from ((f"{p}.ln_2.{n}", (h,)) for n in ("weight", "bias"))
            yield f"{p}.mlp.c_fc.weight", (h, 4 * h)
            yield f"{p}.mlp.c_fc.bias", (4 * h,)
            yield f"{p}.mlp.c_proj.weight", (4 * h, h)
            yield f"{p}.mlp.c_proj.bias", (h,)
        yield from ((f"transformer.ln_f.{n}", (h,)) for n in ("weight", "bias"))


@dataclass(frozen=True)
class Vit:
    """Vision Transformer for image classification (patch embedding, CLS token, pre-norm blocks)."""

    hidden: int
    layers: int
    intermediate: int
    image: int
    patch: int
    labels: int
    channels: int = 3

    def tensors(self) -> Iterator[tuple[str, Shape]]:
        h = self.hidden
        yield "vit.embeddings.cls_token", (1, 1, h)
        yield "vit.embeddings.position_embeddings", (1, (self.image // self.patch) ** 2 + 1, h)
        yield "vit.embeddings.patch_embeddings.projection.weight", (h, self.channels, self.patch, self.patch)
        yield "vit.embeddings.patch_embeddings.projection.bias", (h,)
        for i in range(self.layers):
            p = f"vit.encoder.layer.{i}"
            for name in ("attention.attention.query", "attention.attention.key", "attention.attention.value",
                         "attention.output.dense"):
                yield f"{p}.{name}.weight", (h, h)
                yield f"{p}.{name}.bias", (h,)
            yield f"{p}.intermediate.dense.weight", (self.intermediate, h)
            yield f"{p}.intermediate.dense.bias", (self.intermediate,)
            yield f"{p}.output.dense.weight", (h, self.intermediate)
            yield f"{p}.output.dense.bias", (h,)
            for norm in ("layernorm_before", "layernorm_after"):
                yield f"{p}.{norm}.weight", (h,)
                yield f"{p}.{norm}.bias", (h,)
        yield "vit.layernorm.weight", (h,)
        yield "vit.layernorm.bias", (h,)
        yield "classifier.weight", (self.labels, h)
        yield "classifier.bias", (self.labels,)


@dataclass(frozen=True)
class T5:
    """T5 v1.1 encoder-decoder (gated-GELU feed-forward, relative position bias, untied output layer)."""

    vocab: int
    d_model: int
    d_ff: int
    d_kv: int
    heads: int
    layers: int
    buckets: int = 32

    def _attention(self, prefix: str, relative_bias: bool) -> Iterator[tuple[str, Shape]]:
        inner = self.heads * self.d_kv
        yield from ((f"{prefix}.{n}.weight", (inner, self.d_model)) for n in ("q", "k", "v"))
        yield f"{prefix}.o.weight", (self.d_model, inner)
        if relative_bias:
            yield f"{prefix}.relative_attention_bias.weight", (self.buckets, self.heads)

    def _feed_forward(self, prefix: str) -> Iterator[tuple[str, Shape]]:
        yield f"{prefix}.DenseReluDense.wi_0.weight", (self.d_ff, self.d_model)
        yield f"{prefix}.DenseReluDense.wi_1.weight", (self.d_ff, self.d_model)
        yield f"{prefix}.DenseReluDense.wo.weight", (self.d_model, self.d_ff)
        yield f"{prefix}.layer_norm.weight", (self.d_model,)

    def tensors(self) -> Iterator[tuple[str, Shape]]:
        yield "shared.weight", (self.vocab, self.d_model)
        for stack in ("encoder", "decoder"):
            for i in range(self.layers):
                p = f"{stack}.block.{i}.layer"
                yield from self._attention(f"{p}.0.SelfAttention", relative_bias=i == 0)
                yield f"{p}.0.layer_norm.weight", (self.d_model,)
                if stack == "decoder":
                    yield from self._attention(f"{p}.1.EncDecAttention", relative_bias=False)
                    yield f"{p}.1.layer_norm.weight", (self.d_model,)
                yield from self._feed_forward(f"{p}.{2 if stack == 'decoder' else 1}")
            yield f"{stack}.final_layer_norm.weight", (self.d_model,)
        yield "lm_head.weight", (self.vocab, self.d_model)


Architecture = Llama | Gpt2 | Vit | T5

# Configurations as published with each model (Hugging Face config.json of the named checkpoint).
MODELS: dict[str, Architecture] = {
    "tiny": Llama(vocab=512, hidden=64, intermediate=128, layers=2),
    "small": Llama(vocab=8000, hidden=256, intermediate=688, layers=4),
    # google/vit-base-patch16-224
    "vit-base": Vit(hidden=768, layers=12, intermediate=3072, image=224, patch=16, labels=1000),
    "gpt2": Gpt2(vocab=50257, positions=1024, hidden=768, layers=12),  # openai-community/gpt2
    "T0_3B": T5(vocab=32128, d_model=2048, d_ff=5120, d_kv=64, heads=32, layers=24),  # bigscience/T0_3B
    "llama2-7b": Llama(vocab=32000, hidden=4096, intermediate=11008, layers=32),  # meta-llama/Llama-2-7b-hf
    "llama2-13b": Llama(vocab=32000, hidden=5120, intermediate=13824, layers=40),  # meta-llama/Llama-2-13b-hf
}


def architecture(name: str) -> Architecture:
    """The named model's architecture; raises KeyError for an unknown name."""
    return MODELS[name]


def parameter_count(name: str) -> int:
    return sum(math.prod(shape) for _name, shape in architecture(name).tensors())


def estimate_bytes(name: str, dtype: str) -> int:
    """Bytes of the model's state in `dtype`: what one full copy of it takes in memory and on storage."""
    return parameter_count(name) * DTYPES[canonical_dtype(dtype)]


def build_state(name: str, dtype: str, seed: int = 0, device: str = "cpu", zeros: bool = False) -> dict:
    """{parameter name: tensor} with the model's shapes: seeded random values, or zeros to load into.

    The same seed gives the same values on every rank: the state is replicated, as under DDP, and
    DCP's planner splits the writing of replicated tensors between the ranks.
    """
    import torch

    torch_dtype = getattr(torch, canonical_dtype(dtype))
    generator = torch.Generator(device=device).manual_seed(seed)
    state = {}
    for tensor_name, shape in architecture(name).tensors():
        if zeros:
            state[tensor_name] = torch.zeros(shape, dtype=torch_dtype, device=device)
        else:
            state[tensor_name] = torch.randn(shape, generator=generator, dtype=torch_dtype, device=device)
    return state
