"""Which trainer arguments exist, what values they take, and which the built-in worker acts on; nothing is
silently ignored and no value is passed on that Megatron-LM would not read.

    MEGATRON_LM        every argument name Megatron-LM's own parser defines (its `dest`s and spellings,
                       the union over Megatron-LM core_v0.12.3, core_v0.16.1, core_v0.19.0 and a 2026 main):
                       megatron-core, which the worker uses, ships no parser, so the names were taken from
                       Megatron-LM by tools/megatron_lm_arguments.py into megatron_lm_arguments.txt
    TYPES              how that parser reads each name at the release the installed megatron-core matches:
                       core_v0.16.1 (megatron_lm_argument_types.json) up to 0.18, core_v0.19.0 from 0.19
                       (megatron_lm_argument_types_0.19.json: 0.19's new choices, `optimizer lion` and the like,
                       are refused on 0.16.1 and taken on 0.19), by the same tool
    SIZES              the integers a model or its layout is built from: 1 or more
    MEGATRON_DEFAULTS  the arguments the built-in worker acts on, with its defaults

    check_known(sources)          a name no Megatron-LM knows: ConfigError, one line, the closest names
    check_settings(settings)      the same for `--set` (beside an experiment's own keys, for Primus's)
    check_values(values, sources) a value Megatron-LM's parser would refuse: ConfigError, one line
    check_given_values(settings, experiment)   the same for `--set` and an experiment's values
    not_acted_on(args, given)     names Megatron-LM knows that the worker ignores: the report's notes

No torch here: the launcher checks names and values before deciding to launch anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ckpt_bench.core import megatron_release
from ckpt_bench.core.errors import ConfigError, did_you_mean
from ckpt_bench.core.experiment import Experiment

_NAMES_FILE = Path(__file__).with_name("megatron_lm_arguments.txt")
_TYPES_FILES = {(0, 16): Path(__file__).with_name("megatron_lm_argument_types.json"),
                (0, 19): Path(__file__).with_name("megatron_lm_argument_types_0.19.json")}

# Megatron-LM's parser types these as plain integers; a model or its layout cannot be built from 0 or less.
SIZES = frozenset({
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
    "seq_length", "max_position_embeddings", "vocab_size", "make_vocab_size_divisible_by", "num_experts",
    "moe_ffn_hidden_size", "moe_router_topk", "tensor_model_parallel_size", "pipeline_model_parallel_size",
    "expert_model_parallel_size", "expert_tensor_parallel_size", "context_parallel_size", "micro_batch_size",
    "global_batch_size", "train_iters", "save_interval",
})

MEGATRON_DEFAULTS = {
    "num_layers": 2,
    "hidden_size": 64,
    "ffn_hidden_size": None,
    "num_attention_heads": 4,
    "group_query_attention": False,
    "num_query_groups": None,
    "seq_length": 64,
    "max_position_embeddings": None,
    "vocab_size": 1024,
    "make_vocab_size_divisible_by": 128,
    "position_embedding_type": "learned_absolute",
    "rotary_percent": 1.0,
    "rotary_base": 10000,
    "normalization": "LayerNorm",
    "norm_epsilon": 1e-5,
    "swiglu": False,
    "untie_embeddings_and_output_weights": False,
    "add_bias_linear": True,
    "hidden_dropout": 0.1,
    "attention_dropout": 0.1,
    "init_method_std": 0.02,
    "num_experts": None,
    "moe_router_topk": 2,
    "moe_grouped_gemm": False,
    "bf16": False,
    "fp16": False,
    "tensor_model_parallel_size": 1,
    "pipeline_model_parallel_size": 1,
    "expert_model_parallel_size": 1,
    "context_parallel_size": 1,
    "sequence_parallel": False,
    "micro_batch_size": 2,
    "global_batch_size": None,
    "train_iters": 6,
    "seed": 1234,
    "log_interval": 1,
    "optimizer": "adam",
    "lr": 1e-4,
    "weight_decay": 0.01,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_eps": 1e-8,
    "sgd_momentum": 0.9,
    "clip_grad": 1.0,
    "use_distributed_optimizer": False,
    "accumulate_allreduce_grads_in_fp32": False,
    "save": None,
    "load": None,
    "save_interval": None,
    "ckpt_format": "torch_dist",
    "async_save": False,
    "use_persistent_ckpt_worker": False,
    "async_strategy": None,  # megatron-core 0.17+: nvrx or mcore, as the launcher resolves it (core.megatron_release)
    "ckpt_fully_parallel_save": True,
    "ckpt_fully_parallel_load": False,
    "ckpt_assume_constant_structure": False,
    "dist_ckpt_optim_fully_reshardable": False,
    "dist_ckpt_strictness": "assume_ok_unexpected",
    "save_retain_interval": None,
    "non_persistent_save_interval": None,
    "non_persistent_ckpt_type": None,
    "non_persistent_local_ckpt_algo": "fully_parallel",
    "replication": False,
    "replication_jump": None,
    "replication_factor": 2,
}


@cache
def megatron_lm_names() -> frozenset[str]:
    """Megatron-LM's argument names (see the module docstring), and the worker's own."""
    lines = _NAMES_FILE.read_text().splitlines()
    return frozenset(line for line in lines if line and not line.startswith("#")) | set(MEGATRON_DEFAULTS)


def check_known(sources: Mapping[str, str], beside: Iterable[str] = ()) -> None:
    """Refuse the first key that is no Megatron-LM argument nor one of `beside` (the keys a framework reads
    beside them: a Primus experiment's, its presets' included); `sources` maps each key to where it was
    given (`--set num_layer=3`, the experiment file), for the message."""
    known = megatron_lm_names() | set(beside)
    # A key a framework reads off its arguments without listing it in a preset can still be given in the
    # experiment's own overrides, which are the framework's to check.
    what = "a Megatron-LM argument" + (" nor a key of the experiment or its presets (one the framework reads "
                                       "but lists nowhere goes in the experiment's overrides)" if beside else "")
    for key, source in sources.items():
        if key not in known:
            raise ConfigError(f"{source}: {key} is not {what}{did_you_mean(key, known)}")


def check_settings(settings: Mapping[str, object], beside: Iterable[str] = ()) -> None:
    """`check_known` on the `--set KEY=VALUE` settings: every path that reads an experiment refuses a typo."""
    check_known({key: f"--set {key}={value}" for key, value in settings.items()}, beside)


_PYTHON_TYPES = {"bool": bool, "int": int, "float": int | float, "str": str | int | float}
_WORDS = {"bool": ("true or false", "true or false"), "int": ("an integer", "integers"),
          "float": ("a number", "numbers"), "str": ("text", "texts")}


@dataclass(frozen=True)
class ArgumentType:
    """How Megatron-LM's parser reads one argument (an entry of megatron_lm_argument_types.json)."""

    type: str
    """`bool` (a flag), `int`, `float`, `str`, or `any`: a parser function of Megatron-LM's own, not checked."""
    choices: tuple | None = None
    nargs: str | int | None = None
    """`+`, `*` or a count: a list, of which one value alone is a list of one; None: one value."""
    positive: bool = False
    """A size (SIZES): 1 or more."""

    def _accepts_one(self, value, parsed: bool) -> bool:
        if not parsed and self.type == "bool" and value in (0, 1):  # a namespace's flag is read as truthy
            return True
        if isinstance(value, bool) != (self.type == "bool"):  # YAML's true is no integer, 1 no flag
            return False
        if self.choices is not None and (parsed or isinstance(value, bool)):
            return value in self.choices
        return isinstance(value, _PYTHON_TYPES[self.type])  # text: a number given where text is read is its text

    def accepts(self, value, parsed: bool = True) -> bool:
        """Whether Megatron-LM would read `value` (YAML's null: the argument left at its default): through its
        parser (`parsed`), or put into its namespace as it is, as Primus does (`parsed=False`: a flag may be
        0 or 1, and choices are open: Primus adds its own, e.g. its tokenizers)."""
        if value is None or self.type == "any":
            return True
        values = value if self.nargs is not None and isinstance(value, list) else [value]
        if isinstance(self.nargs, int) and isinstance(value, list) and len(value) != self.nargs:
            return False
        return all(self._accepts_one(one, parsed) and not (self.positive and one < 1) for one in values)

    def describe(self, parsed: bool = True) -> str:
        """What Megatron-LM reads, for the message: `a positive integer`, `one of torch, torch_dist`."""
        one, many = _WORDS[self.type]
        if self.choices is not None and parsed:
            one = many = f"one of {', '.join(map(str, self.choices))}"
        elif self.positive:
            one, many = f"a positive {one.split()[-1]}", f"positive {many}"
        elif self.type == "bool" and not parsed:
            one = many = "true or false (or 1 or 0)"
        if self.nargs is None:
            return one
        count = f"{self.nargs} " if isinstance(self.nargs, int) else ""
        return f"a list of {count}{many}" if self.choices is None or not parsed else f"a list, each {one}"


@cache
def argument_types() -> dict[str, ArgumentType]:
    """Megatron-LM's argument names with how its parser reads them (TYPES in the module docstring)."""
    table = json.loads(_TYPES_FILES[megatron_release.installed().argument_types_of].read_text())["arguments"]
    return {name: ArgumentType(entry["type"], tuple(entry["choices"]) if "choices" in entry else None,
                               entry.get("nargs"), positive=name in SIZES) for name, entry in table.items()}


def check_values(values: Mapping[str, object], sources: Mapping[str, str], parsed: bool = True) -> None:
    """Refuse the first value of `values` that Megatron-LM would not read (ArgumentType.accepts: through its
    parser, or with `parsed=False` as Primus puts them into its namespace), for the keys in `sources` (each
    key -> where it was given, for the message). Names the parser does not define (a framework's own keys,
    or names of another release) are not ours to type."""
    types = argument_types()
    for key, source in sources.items():
        kind = types.get(key)
        if kind is not None and not kind.accepts(values[key], parsed):
            raise ConfigError(f"{source}: Megatron-LM's {key} is {kind.describe(parsed)}, not {values[key]!r}")


def check_given_values(settings: Mapping[str, object], experiment: Experiment, parsed: bool = True) -> None:
    """check_values on the `--set` values (`settings`), then on the experiment's; presets from a Primus
    checkout as Primus reads them (parsed=False)."""
    check_values(settings, {key: f"--set {key}={value}" for key, value in settings.items()}, parsed)
    check_values(experiment.args, dict.fromkeys(experiment.args, f"{experiment.path} (with its presets)"),
                 parsed and experiment.primus is None)


def not_acted_on(args: Mapping, given: Iterable[str]) -> list[str]:
    """The `given` keys (set by the user, not by our presets) that Megatron-LM knows and the built-in
    worker does not act on, as `key=value`."""
    return [f"{key}={args[key]!r}" for key in sorted(given) if key in args and key not in MEGATRON_DEFAULTS]
