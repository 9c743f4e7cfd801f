"""Primus experiment YAML, read with Primus's own rules.

* `${VAR}` must be set in the environment (a clear error names VAR); `${VAR:default}` falls back.
  Only values are substituted, never keys. A value that is *entirely* one substitution becomes
  bool/int/float when the text looks like one (`${TP:2}` is the int 2), as Primus does.
* `extends:` (a string or a list, paths relative to the file) deep-merges the parents in order, then
  the file itself: later wins, dicts merge, lists and scalars replace.
* An experiment names `work_group, user_name, exp_name, workspace` and
  `modules.pre_trainer.{framework, config, model, overrides}`. The trainer's arguments are the model
  preset, then the module preset over it, then `overrides` over both. The experiment root is
  `workspace/work_group/user_name/exp_name`.

Presets are looked up in our own `configs/` tree first (`configs/models/<framework>/`,
`configs/modules/<framework>/`, laid out like Primus's), then next to the experiment file.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.yamlfile import InvalidYaml, parse_yaml, read_yaml

CONFIGS_DIR = Path(__file__).resolve().parents[1] / "configs"  # presets and the default, shipped in the package
DEFAULT_EXPERIMENT = CONFIGS_DIR / "tiny_gpt.yaml"

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")


def _typed(text: str):
    """'true' -> True, '3' -> 3, '1e-4' -> 0.0001, anything else stays a string."""
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    if lowered in ("null", "none", "~"):
        return None
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def substitute(value, source: Path, environ: Mapping[str, str] | None = None):
    """Replace `${VAR}` / `${VAR:default}` in every string value of a nested structure."""
    environ = os.environ if environ is None else environ
    if isinstance(value, dict):
        return {key: substitute(item, source, environ) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute(item, source, environ) for item in value]
    if not isinstance(value, str) or "${" not in value:
        return value

    def lookup(match: re.Match) -> str:
        name, default = match.group(1), match.group(2)
        if name in environ:
            return environ[name]
        if default is None:
            raise ConfigError(
                f"{source}: environment variable {name} is not set (used as ${{{name}}}; "
                f"set it, or write ${{{name}:default}})"
            )
        return default

    whole = _VARIABLE.fullmatch(value)
    if whole:
        return _typed(lookup(whole))
    return _VARIABLE.sub(lookup, value)


def deep_merge(base: dict, override: Mapping) -> dict:
    """A new dict: `override` over `base`; dicts merge recursively, everything else replaces."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def load_yaml(path: str | os.PathLike, environ: Mapping[str, str] | None = None, _chain=()) -> dict:
    """One YAML file with its `extends:` parents merged in and variables substituted."""
    path = Path(path).resolve()
    if path in _chain:
        raise ConfigError(f"{path}: `extends` loops back to itself via {' -> '.join(map(str, _chain))}")
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    data = read_yaml(path) or {}  # within limits: no alias bomb, no huge file
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    parents = data.pop("extends", None) or []
    if isinstance(parents, str):
        parents = [parents]
    merged: dict = {}
    for parent in parents:
        parent_path = path.parent / parent
        if not parent_path.is_file():
            raise ConfigError(f"{path}: `extends: {parent}` names a file that does not exist ({parent_path})")
        merged = deep_merge(merged, load_yaml(parent_path, environ, (*_chain, path)))
    return substitute(deep_merge(merged, data), path, environ)


@dataclass
class Experiment:
    """A resolved Primus experiment: where it lives and the trainer arguments it asks for."""

    path: Path
    work_group: str
    user_name: str
    exp_name: str
    workspace: str
    framework: str
    model_preset: Path | None
    module_preset: Path | None
    args: dict = field(default_factory=dict)  # model preset < module preset < overrides

    @property
    def exp_root(self) -> Path:
        return Path(self.workspace) / self.work_group / self.user_name / self.exp_name

    def to_yaml_dict(self) -> dict:
        """The resolved experiment, as written into the run directory."""
        return {
            "work_group": self.work_group,
            "user_name": self.user_name,
            "exp_name": self.exp_name,
            "workspace": self.workspace,
            "modules": {
                "pre_trainer": {
                    "framework": self.framework,
                    "config": str(self.module_preset) if self.module_preset else None,
                    "model": str(self.model_preset) if self.model_preset else None,
                    "overrides": self.args,
                }
            },
        }


def _find_preset(name: str | None, kind: str, framework: str, experiment: Path) -> Path | None:
    """Our preset tree first (as Primus looks in its own), then next to the experiment file."""
    if not name:
        return None
    candidates = [CONFIGS_DIR / kind / framework / name, experiment.parent / name]
    for candidate in candidates:
        if candidate.is_file() and candidate.resolve() != experiment:
            return candidate.resolve()
    looked = ", ".join(str(c) for c in candidates)
    raise ConfigError(f"{kind[:-1]} preset {name!r} not found (looked in {looked})")


def load_experiment(path: str | os.PathLike, environ: Mapping[str, str] | None = None) -> Experiment:
    path = Path(path)
    data = load_yaml(path, environ)
    try:
        module = data["modules"]["pre_trainer"]
    except (KeyError, TypeError):
        raise ConfigError(f"{path}: no `modules.pre_trainer` section (a Primus experiment has one)") from None
    framework = module.get("framework", "megatron")
    model_preset = _find_preset(module.get("model"), "models", framework, path.resolve())
    module_preset = _find_preset(module.get("config"), "modules", framework, path.resolve())
    args: dict = {}
    for preset in (model_preset, module_preset):
        if preset is not None:
            args = deep_merge(args, load_yaml(preset, environ))
    args = deep_merge(args, module.get("overrides") or {})
    return Experiment(
        path=path.resolve(),
        work_group=str(data.get("work_group", "default")),
        user_name=str(data.get("user_name", "user")),
        exp_name=str(data.get("exp_name", path.stem)),
        workspace=str(data.get("workspace", "./output")),
        framework=framework,
        model_preset=model_preset,
        module_preset=module_preset,
        args=args,
    )


def parse_assignment(text: str) -> tuple[str, object]:
    """`--set key=value`: the value is read as YAML, so `true`, `3`, `1e-4`, `null` get real types."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected key=value, e.g. --set lr=3e-4")
    try:
        parsed = parse_yaml(value, f"--set {key.strip()}") if value.strip() else ""
    except InvalidYaml:  # not YAML: the text itself (beyond the limits is refused)
        parsed = value
    if isinstance(parsed, str):
        parsed = _typed(parsed)
    return key.strip(), parsed
