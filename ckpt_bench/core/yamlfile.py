"""YAML read within limits: a small file must not be able to exhaust the machine.

YAML's anchors and aliases let a few hundred bytes describe a billion nodes ("billion laughs"): the
loader itself shares the aliased objects, but everything after it (merging, substituting variables,
writing resolved.yaml or worker.json) copies them out. So every document is measured as it would be
once expanded, before anything walks it:

    data = read_yaml(path)            # experiment files, sweep files, sweep.yaml
    value = parse_yaml(text, source)  # a --set value

* at most MAX_BYTES of text (a config is kilobytes; a bigger file is refused before it is parsed);
* at most MAX_NODES nodes with every alias expanded, counted without expanding anything (each shared
  object is sized once); a document that contains itself (`&a [*a]`) is refused;
* libyaml's C parser where PyYAML has it (the pure-Python one takes over a minute for 50 MB);
* only regular files: a FIFO or a device would block or never end.

Each refusal is a ConfigError: one line naming the file and the limit.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from ckpt_bench.core.errors import ConfigError

MAX_BYTES = 8 * 1024 * 1024
MAX_NODES = 200_000
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class InvalidYaml(ConfigError):
    """The text is not YAML at all (a syntax error), as opposed to YAML beyond the limits."""


def expanded_nodes(data: object, source: str) -> int:
    """Nodes of `data` with every shared object counted each time it is referred to (as YAML aliases
    expand), each object sized once; ConfigError above MAX_NODES or for a document that contains itself."""
    sizes: dict[int, int] = {}
    open_ids: set[int] = set()

    def size(node: object) -> int:
        if not isinstance(node, dict | list):
            return 1
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_ids:
            raise ConfigError(f"{source}: an alias refers to a node that contains it; a document cannot include "
                              "itself")
        open_ids.add(key)
        children = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        total = 1 + sum(size(child) for child in children)
        open_ids.discard(key)
        if total > MAX_NODES:
            raise ConfigError(f"{source}: more than {MAX_NODES:,} nodes once its aliases are expanded; a config "
                              "is far smaller (an alias of an alias of ... repeats its nodes)")
        sizes[key] = total
        return total

    try:
        return size(data)
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply") from None


def parse_yaml(text: str, source: str) -> object:
    """A YAML document from `text`, within the limits; `source` names it in messages."""
    if len(text) > MAX_BYTES:
        raise ConfigError(f"{source}: {len(text):,} characters of YAML; at most {MAX_BYTES:,} are read")
    try:
        data = yaml.load(text, Loader=Loader)  # noqa: S506 - CSafeLoader/SafeLoader: plain data only
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise InvalidYaml(f"{source}:{where} is not valid YAML ({getattr(error, 'problem', None) or error})") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply") from None
    expanded_nodes(data, source)
    return data


def read_yaml(path: str | os.PathLike) -> object:
    """The YAML document in file `path`, within the limits; ConfigError (one line) for anything else."""
    path = Path(path)
    if not path.is_file():  # is_file follows links and is False for a FIFO or a device
        raise ConfigError(f"{path}: not found, or not a regular file")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise ConfigError(f"{path}: {size:,} bytes; a YAML config is read up to {MAX_BYTES:,} bytes")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot be read ({error})") from None
    return parse_yaml(text, str(path))
