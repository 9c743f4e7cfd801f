"""The transformer megatron-core 0.16.1 builds for a GPT job, from Megatron-LM's arguments.

Only what decides a checkpoint's tensors is kept: the shapes, which MLP each layer has (dense or MoE,
`moe_layer_freq`), the attention (standard/GQA or multi-latent), MTP layers, tied embeddings, the padded
vocabulary and the dtypes. Defaults are Megatron-LM's (`megatron/training/arguments.py`) where an argument
is absent. Every check raises `ArchitectureError` with one line naming the value and what would be valid.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ckpt_bench.model.errors import ArchitectureError
from ckpt_bench.model.families import refuse_unsizable
from ckpt_bench.model.tokenizers import vocabulary_size

__all__ = ["MLA", "Architecture", "ArchitectureError", "MoE", "parse_moe_layer_freq"]

#: Megatron-LM's `--make-vocab-size-divisible-by` default.
MAKE_VOCAB_SIZE_DIVISIBLE_BY = 128

DTYPES = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class MoE:
    """The mixture-of-experts MLP of megatron-core (`transformer/moe/`): router, routed experts, shared experts."""

    num_experts: int
    ffn_hidden_size: int
    """Each routed expert's inner size (`moe_ffn_hidden_size`)."""
    router_topk: int
    """Experts each token is routed to: what makes a parameter 'active'."""
    layers: tuple[bool, ...]
    """Per decoder layer, whether its MLP is MoE (`moe_layer_freq`); the others are dense."""
    shared_expert_size: int = 0
    """`moe_shared_expert_intermediate_size` (0: no shared experts)."""
    shared_expert_gate: bool = False
    expert_bias: bool = False
    """`moe_router_enable_expert_bias`: an fp32 buffer [E] per MoE layer, saved with the model."""
    grouped_gemm: bool = False
    """TEGroupedMLP/GroupedMLP instead of SequentialMLP: megatron-core saves both with the same keys and shapes."""
    numbered_layers: bool = False
    """`moe_layer_freq` given as a list or an int above 1: megatron-core's `TransformerBlock` then keys each
    layer by its number (`decoder.layers.<i>.`) instead of stacking all layers on a leading axis."""


@dataclass(frozen=True)
class MLA:
    """Multi-latent attention (`multi_latent_attention.py`): low-rank query and key/value projections."""

    q_lora_rank: int | None
    """None: one `linear_q_proj`; else `linear_q_down_proj` to this rank and `linear_q_up_proj`."""
    kv_lora_rank: int
    qk_head_dim: int
    qk_pos_emb_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class Architecture:
    """A GPT as megatron-core builds it; the vocabulary is the tokenizer's, padded by `padded_vocab_size`."""

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    kv_channels: int
    vocab_size: int
    """The tokenizer's vocabulary (before padding)."""
    vocab_source: str
    """Where `vocab_size` came from: an argument, or the tokenizer table (`tokenizers.py`)."""
    make_vocab_size_divisible_by: int = MAKE_VOCAB_SIZE_DIVISIBLE_BY
    padded_vocab: int | None = None
    """`padded_vocab_size` given as such: used as it is, not padded again."""
    tied_embeddings: bool = True
    """Megatron-LM ties the output layer to the embedding unless `untie_embeddings_and_output_weights`."""
    normalization: str = "LayerNorm"
    gated_mlp: bool = False
    """SwiGLU (`swiglu`): fc1 holds the gate and the up projection."""
    add_bias_linear: bool = True
    add_qkv_bias: bool = False
    qk_layernorm: bool = False
    learned_positions: int = 0
    """Rows of the learned absolute position embedding (0 with rope)."""
    moe: MoE | None = None
    mla: MLA | None = None
    mtp_num_layers: int = 0
    params_dtype: str = "bf16"

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
                     "kv_channels", "vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ArchitectureError(f"{name} = {value!r}: a positive integer is needed")
        if self.num_attention_heads % self.num_query_groups:
            raise ArchitectureError(f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                                    f"num_query_groups {self.num_query_groups}")
        if self.normalization not in ("LayerNorm", "RMSNorm"):
            raise ArchitectureError(f"normalization = {self.normalization!r}: megatron-core has LayerNorm and RMSNorm")
        if self.params_dtype not in DTYPES:
            raise ArchitectureError(f"params_dtype {self.params_dtype!r}: one of {', '.join(DTYPES)}")
        if self.moe is not None and len(self.moe.layers) != self.num_layers:
            raise ArchitectureError(f"moe_layer_freq names {len(self.moe.layers)} layers and the model has "
                                    f"{self.num_layers} (num_layers)")

    # ---- derived ----------------------------------------------------------------------------------------

    def padded_vocab_size(self, tp: int) -> int:
        """The embedding's rows: Megatron-LM pads the vocabulary to a multiple of divisible_by × TP."""
        if self.padded_vocab is not None:
            return self.padded_vocab
        multiple = self.make_vocab_size_divisible_by * tp
        return -(-self.vocab_size // multiple) * multiple

    @property
    def norm_tensors(self) -> int:
        """Tensors of one norm: weight, and bias for LayerNorm."""
        return 2 if self.normalization == "LayerNorm" else 1

    def is_moe_layer(self, layer: int) -> bool:
        return self.moe is not None and self.moe.layers[layer]

    @property
    def kind(self) -> str:
        """A short name of what it is: 'dense', 'MoE', with '+MLA', '+MTP'."""
        parts = ["MoE" if self.moe else "dense"]
        if self.mla:
            parts.append("MLA")
        if self.mtp_num_layers:
            parts.append(f"MTP{self.mtp_num_layers}")
        return "+".join(parts)

    # ---- (de)serialization --------------------------------------------------------------------------------

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Architecture:
        values = dict(data)
        if values.get("moe") is not None:
            values["moe"] = MoE(**{**values["moe"], "layers": tuple(values["moe"]["layers"])})
        if values.get("mla") is not None:
            values["mla"] = MLA(**values["mla"])
        return cls(**values)

    # ---- from Megatron-LM's arguments -------------------------------------------------------------------

    @classmethod
    def from_megatron_args(cls, args: Mapping[str, Any]) -> Architecture:
        """The model Megatron-LM builds from `args` (its argument names, underscores). Raises
        ArchitectureError for a model family we cannot size, an unknown tokenizer without `vocab_size`,
        or values megatron-core refuses."""
        refuse_unsizable(args)
        missing = [key for key in ("num_layers", "hidden_size", "num_attention_heads") if args.get(key) is None]
        if missing:
            raise ArchitectureError(f"the experiment sets no {', '.join(missing)}")
        layers, hidden, heads = _int(args, "num_layers"), _int(args, "hidden_size"), _int(args, "num_attention_heads")
        swiglu = bool(args.get("swiglu"))
        ffn = args.get("ffn_hidden_size")
        if ffn is None:  # Megatron-LM's default: 4h, or 2/3 of it rounded down to 64 with SwiGLU
            ffn = int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden
        groups = _int(args, "num_query_groups") if args.get("group_query_attention") and args.get(
            "num_query_groups") else heads
        vocab, source = vocabulary(args)
        padded = args.get("padded_vocab_size")
        dtype = "bf16" if args.get("bf16") else "fp16" if args.get("fp16") else "fp32"
        position = args.get("position_embedding_type", "learned_absolute")
        learned = 0
        if position == "learned_absolute":
            learned = _int(args, "max_position_embeddings") if args.get("max_position_embeddings") else _int(
                args, "seq_length")
        return cls(
            num_layers=layers, hidden_size=hidden, ffn_hidden_size=int(ffn), num_attention_heads=heads,
            num_query_groups=groups, kv_channels=int(args.get("kv_channels") or hidden // heads),
            vocab_size=vocab, vocab_source=source,
            make_vocab_size_divisible_by=int(args.get("make_vocab_size_divisible_by") or MAKE_VOCAB_SIZE_DIVISIBLE_BY),
            padded_vocab=int(padded) if padded else None,
            tied_embeddings=not args.get("untie_embeddings_and_output_weights", False),
            normalization=str(args.get("normalization") or "LayerNorm"), gated_mlp=swiglu,
            add_bias_linear=bool(args.get("add_bias_linear", True)), add_qkv_bias=bool(args.get("add_qkv_bias")),
            qk_layernorm=bool(args.get("qk_layernorm")), learned_positions=learned,
            moe=_moe(args, layers, int(ffn)), mla=_mla(args), mtp_num_layers=int(args.get("mtp_num_layers") or 0),
            params_dtype=dtype)


def _int(args: Mapping[str, Any], key: str) -> int:
    value = args[key]
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            return int(str(value))
        except ValueError:
            raise ArchitectureError(f"{key} = {value!r}: an integer is needed") from None
    return value


def vocabulary(args: Mapping[str, Any]) -> tuple[int, str]:
    """(size, where it came from) of the vocabulary Megatron-LM builds for `args`, before its padding:
    `vocab_size`, else `padded_vocab_size`, else the tokenizer's (`tokenizers.py`). Raises ArchitectureError."""
    if args.get("vocab_size"):
        return _int(args, "vocab_size"), "vocab_size"
    if args.get("padded_vocab_size"):
        return _int(args, "padded_vocab_size"), "padded_vocab_size"
    return vocabulary_size(args.get("tokenizer_type"), args.get("tokenizer_model"))


def parse_moe_layer_freq(value: Any, num_layers: int) -> tuple[tuple[bool, ...], bool]:
    """Megatron's `moe_layer_freq`: an int N (every N-th layer MoE, from layer 0), a list of 0/1 per layer, or
    that list as a Python expression string (`"([0]*3+[1]*58)"`, evaluated as Megatron-LM's `moe_freq_type`).
    Returns the per-layer flags and whether megatron-core keys the layers by number (a list, or N > 1)."""
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            value = int(text)
        else:
            value = _list_expression(text)
    if isinstance(value, bool) or not isinstance(value, (int, list, tuple)):
        raise ArchitectureError(f"moe_layer_freq = {value!r}: an integer or a list of 0/1 per layer")
    if isinstance(value, int):
        if value < 1:
            raise ArchitectureError(f"moe_layer_freq = {value}: at least 1")
        return tuple(layer % value == 0 for layer in range(num_layers)), value > 1
    if any(flag not in (0, 1) for flag in value):
        raise ArchitectureError(f"moe_layer_freq = {value!r}: a list of 0 (dense) and 1 (MoE) per layer")
    return tuple(bool(flag) for flag in value), True


def _list_expression(text: str) -> list[int]:
    """A list built of literals, `+` and `*` (what Primus's presets write), evaluated without eval."""

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [value(item) for item in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = value(node.left), value(node.right)
            return left + right if isinstance(node.op, ast.Add) else left * right
        raise ArchitectureError(f"moe_layer_freq = {text!r}: only lists, integers, + and * are read")

    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ArchitectureError(f"moe_layer_freq = {text!r} is not a list expression") from None
    result = value(tree.body)
    if not isinstance(result, list):
        raise ArchitectureError(f"moe_layer_freq = {text!r}: a list of 0/1 per layer is needed")
    return result


def _moe(args: Mapping[str, Any], layers: int, ffn: int) -> MoE | None:
    experts = args.get("num_experts")
    if not experts:
        return None
    topk = _int(args, "moe_router_topk") if args.get("moe_router_topk") else 2
    score = args.get("moe_router_score_function") or "softmax"
    if args.get("moe_router_enable_expert_bias") and score != "sigmoid":
        # megatron-core's TransformerConfig refuses it: its aux-loss-free expert bias is for sigmoid scores.
        raise ArchitectureError(f"moe_router_enable_expert_bias with moe_router_score_function {score!r}: "
                                "megatron-core's expert bias needs moe_router_score_function sigmoid")
    flags, numbered = parse_moe_layer_freq(args.get("moe_layer_freq", 1), layers)
    return MoE(
        num_experts=int(experts), ffn_hidden_size=int(args.get("moe_ffn_hidden_size") or ffn), router_topk=topk,
        layers=flags, numbered_layers=numbered,
        shared_expert_size=int(args.get("moe_shared_expert_intermediate_size") or 0),
        shared_expert_gate=bool(args.get("moe_shared_expert_gate")),
        expert_bias=bool(args.get("moe_router_enable_expert_bias")),
        grouped_gemm=bool(args.get("moe_grouped_gemm")))


def _mla(args: Mapping[str, Any]) -> MLA | None:
    if not args.get("multi_latent_attention"):
        return None
    return MLA(q_lora_rank=int(args["q_lora_rank"]) if args.get("q_lora_rank") else None,
               kv_lora_rank=int(args.get("kv_lora_rank") or 32), qk_head_dim=int(args.get("qk_head_dim") or 128),
               qk_pos_emb_head_dim=int(args.get("qk_pos_emb_head_dim") or 64),
               v_head_dim=int(args.get("v_head_dim") or 128))
