"""Example outputs in the docs are what the commands print (issue 31, item 8).

A block of printed output is marked by the line before it, `<!-- output of: python ckpt_launch.py ... -->`, and
this test runs that command (in-process; only commands that start nothing: `--plan`, `--emit`) and compares.
A JSON block may be abridged with `...`: the last item of a list (more items follow, those shown come first) or
of an object (other keys follow). Everything shown must be what is printed, and nothing left out unsaid.
"""

from __future__ import annotations

import json
import re
import shlex

import pytest
from click.testing import CliRunner
from helpers import ROOT

from ckpt_bench.cli.launch import launch

MARKED = re.compile(r"^<!-- output of: (?P<command>.+?) -->\n```(?P<lang>\w*)\n(?P<block>.*?)^```", re.S | re.M)
MORE = "..."


def marked_blocks() -> list[tuple[str, str, str, str]]:
    """(page, command, language, block) of every marked block in README.md and docs/*.md."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [(page.name, m["command"], m["lang"], m["block"])
            for page in pages for m in MARKED.finditer(page.read_text())]


def abridged(block: str):
    """A JSON block with `...` where items or keys are left out: `...` in a list stays an item, in an object it
    becomes the key `...`."""
    text = re.sub(r",\s*\.\.\.\s*}", f', "{MORE}": null}}', block)
    return json.loads(re.sub(r"(?<=[\[,])\s*\.\.\.\s*(?=\])", f' "{MORE}"', text))


def differences(shown, printed, where: str = "") -> list[str]:
    """Where the abridged `shown` says something `printed` does not."""
    if isinstance(shown, dict) and isinstance(printed, dict):
        problems = []
        for key in (key for key in shown if key != MORE):
            problems += (differences(shown[key], printed[key], f"{where}.{key}") if key in printed
                         else [f"{where}.{key}: not printed"])
        if MORE not in shown:
            problems += [f"{where}.{key}: printed, not shown (end the object with ...)" for key in printed
                         if key not in shown]
        return problems
    if isinstance(shown, list) and isinstance(printed, list):
        items = shown[:-1] if shown[-1:] == [MORE] else shown
        if len(items) > len(printed) or (items is shown and len(shown) != len(printed)):
            return [f"{where}: {len(printed)} items printed, {len(items)} shown"]
        return [p for i, item in enumerate(items) for p in differences(item, printed[i], f"{where}[{i}]")]
    return [] if shown == printed else [f"{where or 'the output'}: shown {shown!r}, printed {printed!r}"]


def test_the_docs_mark_their_outputs():
    assert any(command.endswith("--workload llama3-70b --plan") for _page, command, _lang, _block in marked_blocks())


@pytest.mark.parametrize("page,command,lang,block", marked_blocks(), ids=lambda value: str(value)[:60])
def test_a_documented_output_is_what_the_command_prints(page, command, lang, block):
    program, script, *args = shlex.split(command)
    assert (program, script) == ("python", "ckpt_launch.py") and ("--plan" in args or "--emit" in args), (
        f"{page}: only ckpt_launch.py commands that start nothing (--plan, --emit) are run here: {command}")
    result = CliRunner().invoke(launch, args)
    assert result.exit_code == 0, result.output
    if lang == "json":
        problems = differences(abridged(block), json.loads(result.stdout))
    else:
        problems = [] if block == result.stdout else [f"printed:\n{result.stdout}"]
    assert not problems, f"{page}, `{command}`: " + "; ".join(problems)


def test_an_abridged_block_that_says_too_much_or_too_little_is_caught():
    printed = {"a": 1, "b": [1, 2, 3], "c": {"d": 4, "e": 5}}
    assert differences(abridged('{"a": 1, "b": [1, ...], "c": {"d": 4, ...}}'), printed) == []
    assert differences(abridged('{"a": 2, "b": [1, 2, 3], "c": {"d": 4, "e": 5}}'), printed) == [
        ".a: shown 2, printed 1"]
    assert differences(abridged('{"a": 1, "b": [1, 2], "c": {"d": 4}}'), printed) == [
        ".b: 3 items printed, 2 shown", ".c.e: printed, not shown (end the object with ...)"]
