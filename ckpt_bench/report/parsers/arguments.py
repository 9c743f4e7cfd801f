"""Megatron-LM's arguments dump: the run's configuration, as far as a log holds it.

    ------------------------ arguments ------------------------
      async_save ...................................... True
      ckpt_fully_parallel_save ........................ True
      <a 48+ character name> None
      save ............................................ /ckpt
    -------------------- end of arguments ---------------------

Megatron pads each name with dots to 48 characters, so names of 46+ characters get fewer dots or
none, and `str(value)` may be empty. Values come back with real types (`True` -> True, `None` ->
None, numbers -> int/float); anything else stays the string Megatron printed.
"""

from __future__ import annotations

import re

from ckpt_bench.report.engine import CONFIG_KEYS

START = re.compile(r"-{3,} arguments -{3,}")
END = re.compile(r"-{3,} end of arguments -{3,}")
LINE = re.compile(r"^\s+(?P<name>[A-Za-z_]\w*) \.*\s?(?P<value>.*?)\s*$")

# Beyond the report's configuration keys: what explains a checkpoint's size and layout.
EXTRA_KEYS = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "load",
    "non_persistent_ckpt_type",
    "use_persistent_ckpt_worker",
    "ckpt_assume_constant_structure",
    "num_layers",
    "hidden_size",
    "bf16",
    "fp16",
)


def typed(text: str):
    """The Python value behind Megatron's `str(value)`."""
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


class ArgumentsDump:
    """Collects the dump's `name value` lines; `feed` says whether a line belonged to a dump."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}
        self.dumps = 0
        self.active = False

    def starts(self, message: str) -> bool:
        if START.search(message) is None:
            return False
        self.active = True
        self.dumps += 1
        return True

    def feed(self, message: str) -> None:
        if END.search(message):
            self.active = False
            return
        match = LINE.match(message)
        if match:
            self.values[match["name"]] = typed(match["value"])

    def run_info(self) -> dict:
        """The report's configuration keys (and a few more) the dump holds; the rest is absent."""
        return {key: self.values[key] for key in (*CONFIG_KEYS, *EXTRA_KEYS) if key in self.values}
