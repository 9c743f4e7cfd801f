"""Primus experiment YAML, read as Primus's own loader reads it (`primus/core/config/`, `PrimusParser`).

* Each file's `${VAR}` / `${VAR:default}` are replaced before its `extends:` are merged, in values only: an
  unset `${VAR}` without a default is an error naming VAR and the file. A value in which something was
  replaced becomes a bool (`true`/`false`, any case), an int or a float when the whole result reads as one
  (`${TP:2}` is the int 2, `${A}${B}` with 1 and 2 the int 12); anything else stays a string.
* `extends:` (a string or a list, paths relative to the file, nested) deep-merges the parents in order, then
  the file itself: later wins, dicts merge, lists and scalars replace.
* An experiment names `work_group, user_name, exp_name, workspace` and a trainer module,
  `modules.pre_trainer` or `modules.post_trainer` (SFT), with `framework`, `config` (the module preset),
  `model` (the model preset) and `overrides`. The trainer's arguments are the module preset, the model
  preset's keys the module preset does not set, then `overrides` deep-merged over both; a string `null`
  is None. Module-level keys other than those (Primus's `trainer_class`, ...) join where unset.

Presets (`NAME` or `NAME.yaml`, subfolders allowed: `diffusion/flux_12b.yaml`) come from a Primus checkout's
`primus/configs/{models,modules}/<framework>/`, found as `--primus-path`, `$PRIMUS_PATH`, the working
directory, or a folder above the experiment file, whichever comes first and holds `primus/configs/`.
Experiments of our own tree, and any experiment where no checkout is found, use our presets
(`ckpt_bench/configs/`, laid out like Primus's), then the experiment's own folder.
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
# Experiments that name our presets: the package's and the repository's example configs.
OUR_EXPERIMENTS = (CONFIGS_DIR, CONFIGS_DIR.parents[1] / "configs")
TRAINER_MODULES = ("pre_trainer", "post_trainer")  # Primus aliases one to the other when only one is given
# Keys of a trainer module that are not trainer arguments (Primus's own bookkeeping).
MODULE_KEYS = ("framework", "config", "model", "overrides", "params", "name")

_VARIABLE = re.compile(r"\$\{([^:{}]+)(?::([^}]*))?\}")
_INTEGER = re.compile(r"-?\d+")
_FLOAT = re.compile(r"-?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)")


def _scalar(text: str):
    """What a substituted value becomes: 'TRUE' -> True, '3' -> 3, '1e-4' -> 0.0001, else the text."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if _INTEGER.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
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

    replaced = _VARIABLE.sub(lookup, value)
    return _scalar(replaced) if replaced != value else value


def deep_merge(base: dict, override: Mapping) -> dict:
    """A new dict: `override` over `base`; dicts merge recursively, everything else replaces."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _nulls_to_none(args: dict) -> dict:
    """Primus stores a trainer argument given as the string 'null' as None (lists are left as they are)."""
    return {key: _nulls_to_none(value) if isinstance(value, dict) else None if value == "null" else value
            for key, value in args.items()}


def load_yaml(path: str | os.PathLike, environ: Mapping[str, str] | None = None, _chain=()) -> dict:
    """One YAML file with its variables substituted and its `extends:` parents merged in."""
    path = Path(path).resolve()
    if path in _chain:
        raise ConfigError(f"{path}: `extends` loops back to itself via {' -> '.join(map(str, _chain))}")
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    data = read_yaml(path) or {}  # within limits: no alias bomb, no huge file
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    data = substitute(data, path, environ)
    parents = data.pop("extends", None) or []
    if isinstance(parents, str):
        parents = [parents]
    merged: dict = {}
    for parent in parents:
        parent_path = path.parent / str(parent)
        if not parent_path.is_file():
            raise ConfigError(f"{path}: `extends: {parent}` names a file that does not exist ({parent_path})")
        merged = deep_merge(merged, load_yaml(parent_path, environ, (*_chain, path)))
    return deep_merge(merged, data)


@dataclass(frozen=True)
class PrimusCheckout:
    """A Primus checkout: where Primus keeps its model and module presets."""

    root: Path
    found_as: str  # how it was found, for messages: "--primus-path", "PRIMUS_PATH", ...

    @property
    def configs(self) -> Path:
        return self.root / "primus" / "configs"

    @staticmethod
    def holds_presets(folder: Path) -> bool:
        return (folder / "primus" / "configs" / "models").is_dir()

    @classmethod
    def find(cls, explicit: str | os.PathLike | None, experiment: Path | None = None,
             environ: Mapping[str, str] | None = None) -> PrimusCheckout | None:
        """`explicit` (--primus-path), else $PRIMUS_PATH, else the working directory, else a folder above
        `experiment`: the first that holds `primus/configs/`. A checkout named but without it is an error."""
        environ = os.environ if environ is None else environ
        for value, found_as in ((explicit, "--primus-path"), (environ.get("PRIMUS_PATH"), "PRIMUS_PATH")):
            if value:
                root = Path(value).expanduser().resolve()
                if not cls.holds_presets(root):
                    raise ConfigError(f"{found_as} {value}: not a Primus checkout (no primus/configs/models/ "
                                      "there); give the folder that holds Primus's primus/ package")
                return cls(root, found_as)
        cwd = Path.cwd()
        if cls.holds_presets(cwd):
            return cls(cwd, "the working directory")
        for folder in (experiment.resolve().parents if experiment else ()):
            if cls.holds_presets(folder):
                return cls(folder, "a folder above the experiment")
        return None

    def preset(self, name: str, kind: str, framework: str) -> Path:
        """`primus/configs/<kind>/<framework>/<name>[.yaml]`, as Primus's PresetLoader finds it."""
        base = (self.configs / kind / framework).resolve()
        path = (base / _preset_filename(name)).resolve()
        if not path.is_relative_to(self.configs.resolve()):
            raise ConfigError(f"{kind[:-1]} preset {name!r} leads out of {self.configs} (Primus refuses it too)")
        if not path.is_file():
            near = sorted(p.relative_to(base).as_posix() for p in base.rglob("*.yaml")) if base.is_dir() else []
            hint = f"; {len(near)} there, e.g. {', '.join(near[:4])}" if near else ""
            raise ConfigError(f"{kind[:-1]} preset {name!r} not found in the Primus checkout {self.root} "
                              f"({self.found_as}): no {path}{hint}")
        return path


def _preset_filename(name: str) -> str:
    return name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"


def _our_preset(name: str, kind: str, framework: str, experiment: Path) -> Path:
    """Our preset tree first (laid out like Primus's), then next to the experiment file."""
    filename = _preset_filename(name)
    candidates = [CONFIGS_DIR / kind / framework / filename, experiment.parent / filename]
    for candidate in candidates:
        if candidate.is_file() and candidate.resolve() != experiment:
            return candidate.resolve()
    looked = ", ".join(str(c) for c in candidates)
    raise ConfigError(f"{kind[:-1]} preset {name!r} not found (looked in {looked}; inside a Primus checkout, "
                      "or with --primus-path DIR / PRIMUS_PATH, Primus's own presets are read)")


def _name_words(text: str) -> set[str]:
    return set(re.split(r"[-_\s]+", text.lower())) - {""}


def experiment_label(exp_name: str, path: Path) -> str:
    """How a run shows the experiment it came from: its `exp_name` (what Primus names the run, its workspace
    and our run folder from) beside its file's name (what the model is): `llama3_70B-pretrain
    (llama3.1_70B-BF16-pretrain.yaml)`."""
    return f"{exp_name} ({path.name})"


def name_mismatch(exp_name: str, path: Path) -> str | None:
    """A note for a run whose `exp_name` has words its file's name lacks (Primus's Mixtral 8x7B example is
    named mixtral_8x22B_v0.1-pretrain, its Llama 3.1 70B llama3_70B-pretrain); None where they agree."""
    missing = sorted(_name_words(exp_name) - _name_words(path.stem))
    if not missing:
        return None
    return (f"exp_name {exp_name!r} is not the name of its file {path.name} ({', '.join(missing)} not in the file's "
            "name): the run and its folder are named from exp_name, as Primus names its workspace; the model is "
            "the one the file and its presets describe")


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
    args: dict = field(default_factory=dict)
    """The trainer's arguments: module preset, the model preset's other keys, then `overrides`."""
    module: str = "pre_trainer"  # the trainer module read: pre_trainer or post_trainer
    overrides: dict = field(default_factory=dict)  # the experiment's own `overrides`
    model_args: dict = field(default_factory=dict)  # what the model preset sets
    primus: PrimusCheckout | None = None  # where the presets came from, when from a Primus checkout

    @property
    def label(self) -> str:
        """`exp_name (file.yaml)`: see `experiment_label`."""
        return experiment_label(self.exp_name, self.path)

    @property
    def name_notes(self) -> list[str]:
        """The note of `name_mismatch`, where exp_name and the file's name disagree."""
        return [note for note in [name_mismatch(self.exp_name, self.path)] if note]

    @property
    def exp_root(self) -> Path:
        return Path(self.workspace) / self.work_group / self.user_name / self.exp_name

    @property
    def chosen(self) -> set[str]:
        """The arguments the experiment chose (its model and its overrides), as opposed to the trainer
        defaults its module preset brings."""
        return set(self.model_args) | set(self.overrides)

    def origin(self, key: str) -> str | None:
        """Which file sets the experiment's `key`, by its name for messages (`--plan` gives their paths): the
        experiment itself (its overrides or module keys), its model preset or its module preset; None where none
        does (the trainer's default)."""
        if key in self.overrides:
            return self.path.name
        if key in self.model_args:
            return f"model preset {self.model_preset.name}"
        if key in self.args:
            return f"module preset {self.module_preset.name}" if self.module_preset else self.path.name
        return None

    def to_yaml_dict(self) -> dict:
        """The resolved experiment, as written into the run directory."""
        return {
            "work_group": self.work_group,
            "user_name": self.user_name,
            "exp_name": self.exp_name,
            "workspace": self.workspace,
            "modules": {
                self.module: {
                    "framework": self.framework,
                    "config": str(self.module_preset) if self.module_preset else None,
                    "model": str(self.model_preset) if self.model_preset else None,
                    "overrides": self.args,
                }
            },
        }


# A DLIO workload YAML's own sections (a Primus experiment has neither at its top).
DLIO_SECTIONS = ("workflow", "checkpoint")


def _trainer_module(data: dict, path: Path) -> tuple[str, dict]:
    modules = data.get("modules")
    if not isinstance(modules, dict):
        dlio = [f"{key}:" for key in DLIO_SECTIONS if key in data]
        if dlio:
            raise ConfigError(f"{path}: a DLIO workload YAML (it has {' and '.join(dlio)}), not a Primus experiment: "
                              f"run it with --workload {path}")
        raise ConfigError(f"{path}: no `modules` section (a Primus experiment has modules.pre_trainer; a DLIO "
                          "workload YAML runs with --workload)")
    for name in TRAINER_MODULES:
        if isinstance(modules.get(name), dict):
            return name, modules[name]
    found = ", ".join(map(str, modules)) or "none"
    raise ConfigError(f"{path}: no trainer module (modules.pre_trainer or modules.post_trainer); found {found}")


def load_experiment(path: str | os.PathLike, environ: Mapping[str, str] | None = None,
                    primus_path: str | os.PathLike | None = None) -> Experiment:
    """The experiment at `path`, its presets from the Primus checkout `PrimusCheckout.find` gives (our
    own presets for the experiments of our tree or where none is found)."""
    path = Path(path)
    data = load_yaml(path, environ)
    module_name, module = _trainer_module(data, path)
    framework = str(module.get("framework") or "megatron")
    ours = any(path.resolve().is_relative_to(folder) for folder in OUR_EXPERIMENTS)
    primus = None if ours else PrimusCheckout.find(primus_path, path, environ)

    def preset(name, kind: str) -> Path | None:
        if not name:
            return None
        if primus is not None:
            return primus.preset(str(name), kind, framework)
        return _our_preset(str(name), kind, framework, path.resolve())

    module_preset = preset(module.get("config"), "modules")
    model_preset = preset(module.get("model"), "models")
    base = load_yaml(module_preset, environ) if module_preset else {}
    model_args = load_yaml(model_preset, environ) if model_preset else {}
    if module_preset is None:  # a module written out whole (Primus's exported config): its keys are the arguments
        base = {key: value for key, value in module.items() if key not in MODULE_KEYS}
    args = dict(base)
    for key, value in module.items():  # module-level keys first, then the model's: neither replaces a set key
        if key not in MODULE_KEYS and not key.startswith("_"):
            args.setdefault(key, value)
    for key, value in model_args.items():
        if key != "name":
            args.setdefault(key, value)
    overrides = module.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"{path}: modules.{module_name}.overrides is a {type(overrides).__name__}; a mapping of "
                          "trainer arguments is expected")
    args = _nulls_to_none(deep_merge(args, overrides))
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
        module=module_name,
        overrides=overrides,
        model_args=model_args,
        primus=primus,
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
        parsed = _scalar(parsed.strip())
    return key.strip(), parsed
