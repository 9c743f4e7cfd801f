"""Megatron-LM's own argument parser, read once into the package: megatron-core, which the built-in worker
uses, does not ship it.

    python tools/megatron_lm_arguments.py names SRC@core_v0.12.3 SRC@core_v0.16.1 SRC@main > \
        ckpt_bench/core/megatron_lm_arguments.txt
    python tools/megatron_lm_arguments.py types SRC@core_v0.16.1 > \
        ckpt_bench/core/megatron_lm_argument_types.json
    python tools/megatron_lm_arguments.py types SRC@core_v0.19.0 > \
        ckpt_bench/core/megatron_lm_argument_types_0.19.json   # on Python 3.12+ (tools/today_stack.sh)

`names`: every argument name the parser defines at the given checkouts (their union: a name any of them
knows is a Megatron-LM argument). `types`: at one checkout (the release the pinned megatron-core matches),
how the parser reads each name: `bool` (a flag: store_true/store_false, --x/--no-x), `int`, `float`, `str`
(an enum's choices by name), `any` (a parser function of Megatron-LM's own, e.g. `moe_freq_type`'s `N` or
`([1]*3+[0])*2`), with its `choices` and `nargs` (`+`, `*`, N: a list) where it has them.

A table made before may stand for the checkouts it was made from (its file as a SRC: its names and header kept):
    python tools/megatron_lm_arguments.py names ckpt_bench/core/megatron_lm_arguments.txt \
        SRC@core_v0.19.0 > new.txt

Each SRC is a folder holding a Megatron-LM tree (`megatron/training/arguments.py`), after `@` the name
written into the header. The parser is built in a subprocess with that tree first on sys.path
(`add_megatron_arguments`, so arguments generated from megatron-core's dataclasses count too); GPU-only
imports (triton, einops) are stubbed: building the parser needs none of them. A name is an argument's `dest`
and each of its spellings (`--norm-epsilon` is `norm_epsilon`, its dest `layernorm_epsilon`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = r'''
import argparse, importlib.abc, importlib.machinery, sys, types, typing
typing.override = getattr(typing, "override", lambda f: f)  # Python 3.12's, used by recent trees

class _Anything(type):
    def __getattr__(cls, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Anything
    def __call__(cls, *args, **kwargs):
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else (lambda f=None, *a, **k: f)

class Anything(metaclass=_Anything):
    pass

class Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("triton", "einops"):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__, module.__file__, module.__version__ = [], "/nonexistent/triton.py", "3.0.0"
        module.__getattr__ = lambda attr: (_ for _ in ()).throw(AttributeError(attr)) if attr.startswith("__") \
            else Anything
        return module
    def exec_module(self, module):
        pass

sys.meta_path.insert(0, Stub())
try:
    from megatron.training.arguments import add_megatron_arguments
    parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
except ImportError:  # before 2025: the groups were added inside parse_args
    import megatron.training.arguments as arguments
    parser = argparse.ArgumentParser(allow_abbrev=False)
    for name in dir(arguments):
        if name.startswith("_add_") and name.endswith("_args"):
            parser = getattr(arguments, name)(parser) or parser
import enum, json
def type_of(action):
    """What a value of this argument is in our table (the module docstring)."""
    if action.nargs == 0 or action.type is bool:  # store_true/store_false, BooleanOptionalAction, type=bool
        return "bool"
    if action.type is None or (action.choices and all(isinstance(c, enum.Enum) for c in action.choices)):
        return "str"  # an enum's choices are read by name
    return action.type.__name__ if action.type in (int, float, str) else "any"
actions = []
for action in parser._actions:
    if action.option_strings and action.dest != "help":
        choices = None if action.choices is None else [c.name if isinstance(c, enum.Enum) else c
                                                       for c in action.choices]
        nargs = action.nargs if action.nargs not in (None, 0) else None
        actions.append({"dest": action.dest, "options": action.option_strings, "type": type_of(action),
                        "choices": choices, "nargs": nargs})
print(json.dumps(actions))
'''


def actions_at(tree: str) -> list[dict]:
    """The parser's arguments at the Megatron-LM tree `tree`: dest, option strings, type, choices, nargs."""
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=False,
                            env={"PYTHONPATH": tree, "PATH": "/usr/bin:/bin"})
    if result.returncode:
        raise SystemExit(f"{tree}: the parser could not be built:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout)


def spellings(action: dict) -> set[str]:
    """An argument's names: its dest and each `--spelling` (`--norm-epsilon` is `norm_epsilon`)."""
    return {action["dest"], *(o.lstrip("-").replace("-", "_") for o in action["options"] if o.startswith("--"))}


NAMES_HEADER = "# Megatron-LM's argument names (dests and spellings), the union of its parser at: "


def names(trees: list[str]) -> None:
    found: set[str] = set()
    labels = []
    for tree in trees:
        path, _, label = tree.partition("@")
        if Path(path).is_file():  # a table made before: its names and the checkouts they came from
            lines = Path(path).read_text().splitlines()
            labels += [label for line in lines if line.startswith(NAMES_HEADER)
                       for label in line[len(NAMES_HEADER):].split(", ")]
            found |= {line for line in lines if line and not line.startswith("#")}
            continue
        at = set().union(*map(spellings, actions_at(path)))
        labels.append(f"{label or path} ({len(at)})")
        found |= at
    print(NAMES_HEADER + ", ".join(labels))
    print("# Generated by tools/megatron_lm_arguments.py; do not edit.")
    print("\n".join(sorted(found)))


def types(tree: str) -> None:
    """Each name's type, choices and nargs (absent: one value, any), as JSON with one name a line. Two
    arguments of one name that disagree (a flag and its opposite agree: both bool) are `any`."""
    path, _, label = tree.partition("@")
    table: dict[str, dict] = {}
    for action in actions_at(path):
        entry = {key: action[key] for key in ("type", "choices", "nargs") if action[key] is not None}
        for name in spellings(action):
            table[name] = entry if table.get(name, entry) == entry else {"type": "any"}
    lines = [f"  {json.dumps(name)}: {json.dumps(table[name])}" for name in sorted(table)]
    print(f'{{"source": {json.dumps(f"Megatron-LM {label or path}, tools/megatron_lm_arguments.py types")},')
    print(' "arguments": {\n' + ",\n".join(lines) + "}}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["types"] and len(sys.argv) == 3:
        types(sys.argv[2])
    elif sys.argv[1:2] == ["names"] and len(sys.argv) > 2:
        names(sys.argv[2:])
    else:
        raise SystemExit(__doc__)
