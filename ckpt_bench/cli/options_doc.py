"""docs/options.md, generated from the option registry: every option of `ckpt_launch.py` once, in --help
order, with its spellings, its value, its default for each runner that reads it, and its help.

    python -m ckpt_bench.cli.options_doc > docs/options.md

`tests/unit/test_newcomer_docs.py` fails when docs/options.md differs from what this prints, so the
page cannot drift from the code.
"""

from __future__ import annotations

import dataclasses

from ckpt_bench.benchmark import registry
from ckpt_bench.cli.launch import PEER_OVERRIDES_HELP, SWEEP_SECTION, launch
from ckpt_bench.core.options import Flag

HEADER = """# Every option of `ckpt_launch.py`

Generated from the option registry (`ckpt_bench.benchmark.registry.sections()`) by
`python -m ckpt_bench.cli.options_doc > docs/options.md`; a test fails when this page and the code
differ. The same text, grouped the same way, is `python ckpt_launch.py --help`.

An option that the chosen runner does not read is refused with one line, never ignored: "read by"
names the runners that read it (all of them when empty). A default that depends on the runner is given
per runner; none given: the experiment YAML (Megatron) or the backend decides, as the help says.
"""

def _value(flag: Flag) -> str:
    if flag.type is bool:
        return ""
    if flag.choices:
        return "\\|".join(flag.choices)
    return flag.metavar or flag.type.__name__.upper().replace("STR", "TEXT")


def _spelling(flag: Flag) -> str:
    names = [f"{flag.canonical}/{flag.toggle}" if flag.toggle else flag.canonical, *flag.decls[1:]]
    return ", ".join(f"`{name}`" for name in names)


def _shown(value) -> str:
    if value is None or value == ():
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"`{value}`"


def _defaults(name: str, flag: Flag, readers: tuple[str, ...]) -> str:
    """The default, or per runner where the runners' configs differ."""
    per_runner = {}
    for runner in readers:
        fields = {f.name: f for f in dataclasses.fields(registry.RUNNERS[runner].Config)}
        per_runner[runner] = fields[name].default if name in fields else flag.default
    if len(set(map(repr, per_runner.values()))) <= 1:
        return _shown(next(iter(per_runner.values()), flag.default))
    return "; ".join(f"{runner}: {_shown(value)}" for runner, value in per_runner.items() if _shown(value))


def render() -> str:
    """The whole page."""
    parts = [HEADER]
    for title, flags, readers in registry.sections():
        rows = ["| option | value | default | read by | meaning |", "|---|---|---|---|---|"]
        for name, flag in flags.items():
            read_by = readers[name] if set(readers[name]) != set(registry.RUNNERS) else ()
            meaning = flag.help.replace("|", "\\|")
            rows.append(f"| {_spelling(flag)} | {_value(flag)} | {_defaults(name, flag, readers[name])} | "
                        f"{', '.join(read_by)} | {meaning} |")
        parts.append(f"## {title}\n\n" + "\n".join(rows) + "\n")
    parts.append(_sweeps())
    return "\n".join(parts)


def _sweeps() -> str:
    """The options of the command itself (sweeps), as the command declares them."""
    group = next(group for group in launch.option_groups if group.title == SWEEP_SECTION)
    rows = [f"| `{option.opts[0]}` | {option.make_metavar(None)} | "
            f"{option.help} |" for option in group.options]
    return (f"## {SWEEP_SECTION}\n\n| option | value | meaning |\n|---|---|---|\n" + "\n".join(rows)
            + f"\n\n{PEER_OVERRIDES_HELP}\n")


if __name__ == "__main__":
    print(render(), end="")
