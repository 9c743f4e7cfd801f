"""Which model families we can size, registered in one place.

A GPT (`model_type: gpt`, Megatron-LM's default): dense or MoE MLPs, standard/GQA or multi-latent
attention, MTP layers -- `architecture.Architecture`. Every other family Primus trains has state we do
not describe (Mamba's SSM blocks, hybrid layer patterns, diffusion transformers, DeepSeek-V4's and
Kimi-K3's own attention, Gated DeltaNet layers, gated attention outputs), so it is refused with one
line naming it wherever a size would be printed, never sized as a GPT.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ckpt_bench.model.errors import ArchitectureError

__all__ = ["UNSIZABLE", "Unsizable", "refuse_unsizable"]


@dataclass(frozen=True)
class Unsizable:
    """A family whose checkpoint we cannot size: how it is recognised from the arguments, and why."""

    name: str
    matches: Callable[[Mapping[str, Any]], bool]
    why: str


def _model_type(*names: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda args: str(args.get("model_type") or "gpt") in names


UNSIZABLE: tuple[Unsizable, ...] = (
    Unsizable("hybrid (Mamba + attention)",
              lambda args: bool(args.get("is_hybrid_model") or args.get("hybrid_override_pattern")),
              "its layer pattern mixes Mamba, attention and MLP blocks"),
    Unsizable("Mamba", _model_type("mamba"), "its SSM blocks are not a GPT's layers"),
    Unsizable("diffusion", lambda args: "num_joint_layers" in args or "num_single_layers" in args,
              "a diffusion transformer's blocks are not a GPT's layers"),
    Unsizable("DeepSeek-V4", _model_type("deepseek_v4"), "its compressed sparse attention has state of its own"),
    Unsizable("Kimi-K3", _model_type("kimi_k3"), "its linear-attention layers have state of their own"),
    Unsizable("heterogeneous blocks", lambda args: bool(args.get("heterogeneous_layers_config_path")),
              "each layer's shape comes from a separate file"),
    Unsizable("linear-attention hybrid",
              lambda args: bool(args.get("experimental_attention_variant") or args.get("linear_attention_freq")),
              "its Gated DeltaNet / linear-attention layers have state of their own"),
    Unsizable("gated-attention", lambda args: bool(args.get("attention_output_gate")),
              "its attention output gate adds parameters we do not describe"),
)


def refuse_unsizable(args: Mapping[str, Any]) -> None:
    """Raise ArchitectureError naming the family when `args` describe a model we cannot size."""

    for family in UNSIZABLE:
        if family.matches(args):
            raise ArchitectureError(f"a {family.name} model (model_type {args.get('model_type') or 'gpt'!r}) "
                                    f"cannot be sized: {family.why}; only GPT models (dense, MoE, MLA, MTP) are")
    model_type = str(args.get("model_type") or "gpt")
    if model_type != "gpt":
        raise ArchitectureError(f"model_type {model_type!r} cannot be sized: only GPT models (dense, MoE, MLA, MTP)")
