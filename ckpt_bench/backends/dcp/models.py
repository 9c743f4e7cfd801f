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

s3torchbenchmarking's model names are here too, each with exactly the parameter count its
`models.py` builds (`ckpt_bench.sweep.peers.s3torchbenchmarking` maps its names onto these): `vit-base-in21k`
(its `vit-base`: ViTModel with the pooler, 86,389,248), `clip-vit`, `whisper`, `T0pp`, and `L7b` ...
`L70b` (its own LLaMA shapes with a 50,432-token vocabulary, not Meta's LLaMA-2 checkpoints).
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
    """Vision Transformer (patch embedding, CLS token, pre-norm blocks) with either head: a classifier
    (`ViTForImageClassification`, `labels` classes) or, with `labels=0`, the bare `ViTModel` and its
    pooler (a dense layer on the CLS token), which is what s3torchbenchmarking saves."""

    hidden: int
    layers: int
    intermediate: int
    image: int
    patch: int
    labels: int
    channels: int = 3

    def tensors(self) -> Iterator[tuple[str, Shape]]:
        h = self.hidden
        vit = "vit." if self.labels else ""  # the classifier wraps the bare model as `vit`
        yield f"{vit}embeddings.cls_token", (1, 1, h)
        yield f"{vit}embeddings.position_embeddings", (1, (self.image // self.patch) ** 2 + 1, h)
        yield f"{vit}embeddings.patch_embeddings.projection.weight", (h, self.channels, self.patch, self.patch)
        yield f"{vit}embeddings.patch_embeddings.projection.bias", (h,)
        for i in range(self.layers):
            p = f"{vit}encoder.layer.{i}"
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
        yield f"{vit}layernorm.weight", (h,)
        yield f"{vit}layernorm.bias", (h,)
        if self.labels:
            yield "classifier.weight", (self.labels, h)
            yield "classifier.bias", (self.labels,)
        else:
            yield "pooler.dense.weight", (h, h)
            yield "pooler.dense.bias", (h,)


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


def _attention(prefix: str, h: int, k_bias: bool = True) -> Iterator[tuple[str, Shape]]:
    """Self-attention projections as CLIP and Whisper name them (Whisper's k_proj has no bias)."""
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        yield f"{prefix}.self_attn.{name}.weight", (h, h)
        if name != "k_proj" or k_bias:
            yield f"{prefix}.self_attn.{name}.bias", (h,)


@dataclass(frozen=True)
class Clip:
    """CLIP (`CLIPModel`): a text and a vision transformer, their projections and the logit scale."""

    vocab: int
    text_hidden: int
    text_intermediate: int
    text_layers: int
    text_positions: int
    vision_hidden: int
    vision_intermediate: int
    vision_layers: int
    image: int
    patch: int
    projection: int

    def _tower(self, prefix: str, h: int, intermediate: int, layers: int) -> Iterator[tuple[str, Shape]]:
        for i in range(layers):
            p = f"{prefix}.encoder.layers.{i}"
            yield from _attention(p, h)
            yield from ((f"{p}.layer_norm1.{n}", (h,)) for n in ("weight", "bias"))
            yield f"{p}.mlp.fc1.weight", (intermediate, h)
            yield f"{p}.mlp.fc1.bias", (intermediate,)
            yield f"{p}.mlp.fc2.weight", (h, intermediate)
            yield f"{p}.mlp.fc2.bias", (h,)
            yield from ((f"{p}.layer_norm2.{n}", (h,)) for n in ("weight", "bias"))

    def tensors(self) -> Iterator[tuple[str, Shape]]:
        t, v = self.text_hidden, self.vision_hidden
        yield "text_model.embeddings.token_embedding.weight", (self.vocab, t)
        yield "text_model.embeddings.position_embedding.weight", (self.text_positions, t)
        yield from self._tower("text_model", t, self.text_intermediate, self.text_layers)
        yield from ((f"text_model.final_layer_norm.{n}", (t,)) for n in ("weight", "bias"))
        yield "vision_model.embeddings.class_embedding", (v,)
        yield "vision_model.embeddings.patch_embedding.weight", (v, 3, self.patch, self.patch)
        yield "vision_model.embeddings.position_embedding.weight", ((self.image // self.patch) ** 2 + 1, v)
        yield from ((f"vision_model.pre_layrnorm.{n}", (v,)) for n in ("weight", "bias"))  # sic, HF's name
        yield from self._tower("vision_model", v, self.vision_intermediate, self.vision_layers)
        yield from ((f"vision_model.post_layernorm.{n}", (v,)) for n in ("weight", "bias"))
        yield "visual_projection.weight", (self.projection, v)
        yield "text_projection.weight", (self.projection, t)
        yield "logit_scale", ()


@dataclass(frozen=True)
class Whisper:
    """Whisper (`WhisperForConditionalGeneration`): convolutional front end and encoder, decoder with
    cross-attention; the output projection is tied to the token embedding (one tensor)."""

    vocab: int
    mel_bins: int
    d_model: int
    ffn: int
    encoder_layers: int
    decoder_layers: int
    source_positions: int
    target_positions: int

    def _block(self, p: str, cross: bool) -> Iterator[tuple[str, Shape]]:
        h = self.d_model
        yield from _attention(p, h, k_bias=False)
        yield from ((f"{p}.self_attn_layer_norm.{n}", (h,)) for n in ("weight", "bias"))
        if cross:
            for name, shape in _attention(p, h, k_bias=False):
                yield name.replace(".self_attn.", ".encoder_attn."), shape
            yield from ((f"{p}.encoder_attn_layer_norm.{n}", (h,)) for n in ("weight", "bias"))
        yield f"{p}.fc1.weight", (self.ffn, h)
        yield f"{p}.fc1.bias", (self.ffn,)
        yield f"{p}.fc2.weight", (h, self.ffn)
        yield f"{p}.fc2.bias", (h,)
        yield from ((f"{p}.final_layer_norm.{n}", (h,)) for n in ("weight", "bias"))

    def tensors(self) -> Iterator[tuple[str, Shape]]:
        h = self.d_model
        yield "model.encoder.conv1.weight", (h, self.mel_bins, 3)
        yield "model.encoder.conv1.bias", (h,)
        yield "model.encoder.conv2.weight", (h, h, 3)
        yield "model.encoder.conv2.bias", (h,)
        yield "model.encoder.embed_positions.weight", (self.source_positions, h)
        for i in range(self.encoder_layers):
            yield from self._block(f"model.encoder.layers.{i}", cross=False)
        yield from ((f"model.encoder.layer_norm.{n}", (h,)) for n in ("weight", "bias"))
        yield "model.decoder.embed_tokens.weight", (self.vocab, h)
        yield "model.decoder.embed_positions.weight", (self.target_positions, h)
        for i in range(self.decoder_layers):
            yield from self._block(f"model.decoder.layers.{i}", cross=True)
        yield from ((f"model.decoder.layer_norm.{n}", (h,)) for n in ("weight", "bias"))


Architecture = Llama | Gpt2 | Vit | T5 | Clip | Whisper


def _peer_llama(hidden: int, intermediate: int, layers: int, kv_heads_ratio: int = 1) -> Llama:
    """s3torchbenchmarking's LLaMA shapes (`dcp_fsdp/llama_model_config.py`): its own 50,432-token
    vocabulary, untied output layer."""
    return Llama(vocab=50432, hidden=hidden, intermediate=intermediate, layers=layers, kv_heads_ratio=kv_heads_ratio)


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
    # s3torchbenchmarking's models (its `models.py`), under names that say what they are.
    # google/vit-base-patch16-224-in21k as `ViTModel`: no classifier, a pooler (its `vit-base`).
    "vit-base-in21k": Vit(hidden=768, layers=12, intermediate=3072, image=224, patch=16, labels=0),
    "clip-vit": Clip(vocab=49408, text_hidden=768, text_intermediate=3072, text_layers=12, text_positions=77,
                     vision_hidden=1024, vision_intermediate=4096, vision_layers=24, image=224, patch=14,
                     projection=768),  # openai/clip-vit-large-patch14
    "whisper": Whisper(vocab=51866, mel_bins=128, d_model=1280, ffn=5120, encoder_layers=32, decoder_layers=32,
                       source_positions=1500, target_positions=448),  # openai/whisper-large-v3
    "T0pp": T5(vocab=32128, d_model=4096, d_ff=10240, d_kv=64, heads=64, layers=24),  # bigscience/T0pp
    "L7b": _peer_llama(4096, 11008, 32),
    "L13b": _peer_llama(5120, 13824, 40),
    "L30b": _peer_llama(6656, 17920, 60),
    "L65b": _peer_llama(8192, 22016, 80),
    "L70b": _peer_llama(8192, 28672, 80, kv_heads_ratio=8),  # 64 heads, 8 key/value heads
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
