"""The vocabulary of the tokenizers Primus's presets name, each with where its size comes from.

Megatron-LM sizes the embedding from the tokenizer it builds: `padded_vocab_size = pad(tokenizer.vocab_size)`,
and every tokenizer type Primus's presets name (Llama2/3/4Tokenizer, MixtralTokenizer, DeepSeekV2/V3Tokenizer,
HuggingFaceTokenizer, ...) is built by Primus as Megatron-LM's Hugging Face tokenizer of `tokenizer_model`,
whose `vocab_size` is `len(tokenizer)`: the base vocabulary plus the added special tokens (not the model
config's `vocab_size`, which is often padded). So the size belongs to `tokenizer_model`. Only sizes with a
stated source are listed; any other tokenizer is one line asking for `--set vocab_size=N` rather than a
guess, since a wrong vocabulary is a silently wrong embedding and output layer. Where the tokenizer's own file
could not be read here, the source says what the number rests on; Megatron-LM pads the length up to a
multiple of `make_vocab_size_divisible_by` x TP (128 x TP by default), so a length a few tokens off gives the
same embedding unless a multiple lies between them.
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
_MIXTRAL = KnownTokenizer(32000, "Mistral's v1 SentencePiece model: 32,000 pieces (Mixtral 8x7B v0.1's tokenizer)")
_MIXTRAL_V3 = KnownTokenizer(32768, "Mistral's v3 SentencePiece model: 32,768 pieces, control tokens included "
                                    "(mistral-inference #233: Mixtral 8x22B uses tokenizer v3; maxtext #1012 "
                                    "corrected its vocabulary from 32,000 to 32,768; mistral-community's re-upload "
                                    "has 32,000)")
_DEEPSEEK_V2 = KnownTokenizer(100015, "DeepSeek's 100K byte-level BPE (the DeepSeek-V2 paper: DeepSeek 67B's "
                                      "tokenizer): 100,000 tokens + 15 added (len() reported in deepseek-ai/"
                                      "DeepSeek-MoE #14 for that tokenizer; V2's own file not seen here: any length "
                                      "from 99,969 to 100,096 pads to the same embedding at 128 a TP rank)")
_DEEPSEEK_V3 = KnownTokenizer(128815, "DeepSeek-V3's BPE: ids 0-128,814, the last <｜tool▁sep｜>, the highest id "
                                      "its published special tokens give (128,000 tokens + placeholders and tool "
                                      "tokens; its tokenizer file not read here; config.json's 129,280 is padded)")
_LLAMA4 = KnownTokenizer(201135, "Llama 4's BPE as Hugging Face builds it (transformers' convert_llama4_weights_to_hf"
                                 ".py): 200,000 tokens + 1,134 special tokens + its pad token; the same for Scout "
                                 "and Maverick (config.json's 202,048 counts all 2,048 reserved slots)")
_KIMI_K2 = KnownTokenizer(163840, "Kimi K2's tiktoken BPE through its own tokenization_kimi.py (Primus retries "
                                  "with trust_remote_code when the plain build fails): 163,584 tokens + 256 reserved")
_GLM4 = KnownTokenizer(151343, "GLM-4's tiktoken BPE (ChatGLM4Tokenizer): 151,329 tokens + 14 special tokens "
                               "(tokenizer_config.json's added tokens start at 151,329; config.json's 151,552 is "
                               "padded)")
_MINIMAX_M2 = KnownTokenizer(200054, "MiniMax-M2's BPE: 200,000 tokens + 54 added (ids 200,000-200,053 in "
                                     "added_tokens.json; config.json's 200,064 is padded)")
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
    "mistralai/Mixtral-8x22B-v0.1": _MIXTRAL_V3,
    **{f"Qwen/Qwen2.5-{size}": _QWEN25 for size in ("3B", "7B", "14B", "32B", "72B")},
    # DeepSeek's R1 distillations keep Qwen2.5's 22 added ids (151,643-151,664) under DeepSeek's names.
    **{f"deepseek-ai/DeepSeek-R1-Distill-Qwen-{size}": _QWEN25 for size in ("1.5B", "7B", "14B", "32B")},
    "deepseek-ai/DeepSeek-V2": _DEEPSEEK_V2,
    "deepseek-ai/DeepSeek-V2-Lite": _DEEPSEEK_V2,
    "deepseek-ai/DeepSeek-V3": _DEEPSEEK_V3,
    "meta-llama/Llama-4-Scout-17B-16E": _LLAMA4,
    "meta-llama/Llama-4-Maverick-17B-128E": _LLAMA4,
    "moonshotai/Kimi-K2-Instruct": _KIMI_K2,
    "THUDM/glm-4-9b": _GLM4,
    "MiniMaxAI/MiniMax-M2.5": _MINIMAX_M2,
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
