"""The vocabulary of the tokenizers Primus's presets name, each with where its size comes from.

Megatron-LM sizes the embedding from the tokenizer it builds: `padded_vocab_size = pad(tokenizer.vocab_size)`,
and every tokenizer type Primus's presets name (Llama2/3/4Tokenizer, MixtralTokenizer, DeepSeekV2/V3Tokenizer,
HuggingFaceTokenizer, ...) is built by Primus as Megatron-LM's Hugging Face tokenizer of `tokenizer_model`,
whose `vocab_size` is `len(tokenizer)`: the base vocabulary plus the added special tokens (not the model
config's `vocab_size`, which is often padded). So the size belongs to `tokenizer_model`. Only sizes with a
stated source are listed; any other tokenizer is one line asking for `--set vocab_size=N` rather than a
guess, since a wrong vocabulary is a silently wrong embedding and output layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from ckpt_bench.model.errors import ArchitectureError

__all__ = ["TOKENIZERS", "KnownTokenizer", "vocabulary_size"]


@dataclass(frozen=True)
class KnownTokenizer:
    """A tokenizer's `len()` and where that number comes from."""

    size: int
    source: str


_LLAMA2 = KnownTokenizer(32000, "Llama 2's SentencePiece model: 32,000 pieces, no added tokens "
                                "(the Llama 2 paper's 32k vocabulary)")
_LLAMA3 = KnownTokenizer(128256, "Llama 3's tiktoken BPE: 128,000 tokens + 256 reserved special tokens "
                                 "(Meta's Llama 3 model card; the same tokenizer for 3.1, 3.2 and 3.3)")
_MIXTRAL = KnownTokenizer(32000, "Mistral's v1 SentencePiece model: 32,000 pieces (Mixtral v0.1's tokenizer)")
_QWEN25 = KnownTokenizer(151665, "Qwen2.5's BPE: 151,643 tokens + 22 added special tokens (the count Primus's "
                                 "kimi_k3_curve.yaml states for len(tokenizer))")
_QWEN3 = KnownTokenizer(151669, "Qwen2.5's 151,665 + 4 added tokens (<think>, </think>, <tool_response>, "
                                "</tool_response>)")

#: `tokenizer_model` -> its size. Primus's presets name these repositories.
TOKENIZERS: dict[str, KnownTokenizer] = {
    **{f"meta-llama/Llama-2-{size}-hf": _LLAMA2 for size in ("7b", "13b", "70b")},
    **{name: _LLAMA3 for name in (
        "meta-llama/Meta-Llama-3-8B", "meta-llama/Meta-Llama-3-70B", "meta-llama/Llama-3.1-8B",
        "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-405B", "meta-llama/Llama-3.2-1B",
        "meta-llama/Meta-Llama-3.2-1B", "meta-llama/Meta-Llama-3.2-3B", "meta-llama/Llama-3.3-70B-Instruct")},
    # NousResearch's ungated copies of Meta's repositories: the same tokenizer files.
    "NousResearch/Meta-Llama-3-8B": _LLAMA3,
    **{f"NousResearch/Llama-2-{size}-hf": _LLAMA2 for size in ("7b", "13b", "70b")},
    "mistralai/Mixtral-8x7B-v0.1": _MIXTRAL,
    "mistralai/Mixtral-8x22B-v0.1": _MIXTRAL,
    **{f"Qwen/Qwen2.5-{size}": _QWEN25 for size in ("3B", "7B", "14B", "32B", "72B")},
    **{f"Qwen/Qwen3-{size}": _QWEN3 for size in ("4B", "8B", "14B", "32B", "30B-A3B", "235B-A22B")},
}


def vocabulary_size(tokenizer_type: object, tokenizer_model: object) -> tuple[int, str]:
    """(size, source) of the tokenizer an experiment names; raises ArchitectureError when it is not known."""

    known = TOKENIZERS.get(str(tokenizer_model)) if tokenizer_model else None
    if known is None:
        named = f"tokenizer_model {tokenizer_model!r}" if tokenizer_model else f"tokenizer_type {tokenizer_type!r}"
        raise ArchitectureError(
            f"the vocabulary size of {named} is not known here (no vocab_size or padded_vocab_size is set): "
            "give it with --set vocab_size=N (len() of the tokenizer)")
    return known.size, f"{tokenizer_model}: {known.source}"
