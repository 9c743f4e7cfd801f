"""Options, declared once.

A `Flag` says how one option is spelled and typed on the command line. A typed config dataclass
(a backend's `Config`, the launcher's `LaunchConfig`, a storage scheme's options) holds the values:
each of its fields is made by `Flag.field(default)`, so the field's name is the option's name
(`thread_count` for `--thread-count`), its default is that config's default, and its checks live
in the dataclass's `__post_init__`.

Several configs may share one `Flag` object (`--async-save` means the same thing to the Megatron,
DCP and Lightning backends); each gives its own default. The command line (`ckpt_bench.cli.launch`) is composed
from these declarations; `to_argv` turns values back into arguments (sweep jobs, `--emit`). Nothing
here imports click: the CLI maps `type`/`choices`/`min` to click's types.

    ASYNC_SAVE = Flag(("--async-save",), "Save asynchronously.", type=bool, toggle="--no-async-save")

    @dataclass
    class DcpConfig(Options):
        async_save: bool = ASYNC_SAVE.field(False)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

_UNSET = object()  # `Flag.field()` given no default: the flag's own `default` applies
_FLAG = "flag"


@dataclass(frozen=True, eq=False)
class Flag:
    """How one option is given on the command line. Identity matters: configs sharing an option
    share the same Flag object (the CLI declares it once and lists every user in its help)."""

    decls: tuple[str, ...]
    """Spellings, the canonical one first (`--tp`, `--tensor-model-parallel-size`); aliases follow."""
    help: str
    """One sentence for --help."""
    type: type = str
    """str, int, float or bool; a bool without `toggle` is an on-only switch (`--keep-checkpoints`)."""
    toggle: str | None = None
    """The negative spelling of a bool switch (`--no-async-save`): not given, the value is None."""
    choices: tuple[str, ...] | None = None
    """The only values accepted (case-sensitive)."""
    min: int | None = None
    """Smallest value of an int option."""
    max: int | None = None
    """Largest value of an int option."""
    multiple: bool = False
    """May be given several times (`--set a=1 --set b=2`); the value is a tuple."""
    metavar: str | None = None
    """How the value is shown in --help (`KEY=VALUE`)."""
    default: Any = None
    """What the command line holds when the option is not given; None for every option whose
    default depends on the backend (the config's field default applies)."""
    show_default: bool = False
    """Show `default` in --help."""

    @property
    def canonical(self) -> str:
        return self.decls[0]

    def field(self, default: Any = _UNSET) -> Any:
        """A dataclass field for this option with `default` as that config's default (when not given:
        the flag's own `default`, so a default shown in --help is declared once)."""
        if default is _UNSET:
            default = self.default
        if isinstance(default, (list, dict, set)):
            raise TypeError("use an immutable default (a tuple) for an option field")
        return dataclasses.field(default=default, metadata={_FLAG: self})


class Options:
    """Base of every options dataclass: its flags, and construction from command-line values."""

    section: ClassVar[str | None] = None  # --help section title

    def __post_init__(self) -> None:
        """A subclass checks its own values in its `__post_init__`, calling this one first (several
        option groups combine into one config by inheritance)."""

    @classmethod
    def flags(cls) -> dict[str, Flag]:
        """Option name -> Flag, for every field that is an option."""
        return {f.name: f.metadata[_FLAG] for f in dataclasses.fields(cls) if _FLAG in f.metadata}

    @classmethod
    def from_values(cls, values: Mapping[str, Any], **extra: Any):
        """The config from parsed values: a field whose value is None (an option not given) keeps its
        default; `extra` sets fields directly."""
        names = {f.name for f in dataclasses.fields(cls) if f.init} - set(extra)
        return cls(**{name: values[name] for name in names if values.get(name) is not None}, **extra)

    def values(self) -> dict[str, Any]:
        """Option name -> value, for every option field."""
        return {name: getattr(self, name) for name in self.flags()}


def to_argv(values: Mapping[str, Any], flags: Mapping[str, Flag], names: Iterable[str] | None = None) -> list[str]:
    """The command-line arguments that set `values` (option names with underscores), in the order of
    `names` (default: of `values`). None is "not given" and yields nothing."""
    argv: list[str] = []
    for name in values if names is None else names:
        value = values.get(name)
        if value is None:
            continue
        flag = flags[name]
        if flag.type is bool:
            if value:
                argv.append(flag.canonical)
            elif flag.toggle:
                argv.append(flag.toggle)
        elif flag.multiple:
            for item in value if isinstance(value, (list, tuple)) else [value]:
                argv += [flag.canonical, str(item)]
        else:
            argv += [flag.canonical, str(value)]
    return argv
