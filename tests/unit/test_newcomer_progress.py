"""Progress on the phases that take seconds (issue 31, item 3): each says when it starts, on stderr; a rank's
line reaches the terminal through the launcher whatever the backend's filter of lines."""

from __future__ import annotations

import io
import re
import sys

from ckpt_bench.core import progress
from ckpt_bench.launcher import torchrun


def test_rank_0_says_and_the_launcher_shows_it_under_the_pass(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("RANK", "0")
    progress.say("allocating llama3-70b's checkpoint state on each rank")
    said = capsys.readouterr().out
    monkeypatch.setenv("RANK", "1")
    progress.say("allocating llama3-70b's checkpoint state on each rank")
    assert capsys.readouterr().out == ""  # one rank speaks for the pass

    # Through torchrun's tee (`[default0]:`), with a backend whose filter shows none of the rank's lines.
    script = f"print({('[default0]:' + said.strip())!r}); print('[default0]:an iteration line')"
    torchrun.run_command("save", [sys.executable, "-c", script], tmp_path / "logs", lambda line: False)
    assert capsys.readouterr().err == "[save] allocating llama3-70b's checkpoint state on each rank\n"


def test_the_launcher_says_at_once(monkeypatch, capsys):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    progress.say("evicting /ckpt/iter_0000001 from the page cache")
    assert capsys.readouterr().err == "evicting /ckpt/iter_0000001 from the page cache\n"


def test_once_a_process(monkeypatch, capsys):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(progress, "_said_once", set())
    for _ in range(3):
        progress.say_once(progress.FIRST_SAVE)
    assert capsys.readouterr().err.count("first save") == 1


def test_rich_on_a_terminal(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    progress._console.cache_clear()
    try:
        progress.show("storage baseline: 4 files, 64.0 MiB", "save")
    finally:
        progress._console.cache_clear()
    line = terminal.getvalue()
    assert "\x1b[" in line and "[save]" in line and "storage baseline: 4 files, 64.0 MiB" in line
    assert re.search(r"\d+\.\ds", line)  # the seconds since the launcher started


def test_megatrons_progress_lines_leave_out_the_arguments_dump():
    """Issue 38: Megatron-LM's progress line showed `rl_verify_model_weights_swap .... False` for ~40 s (its
    arguments dump matched `verif`). Iterations, saves, loads and a rank's failed verification show; no argument."""
    from ckpt_bench.backends.megatron.launcher import shows_progress

    dump = ["  rl_verify_model_weights_swap .................... False", "  verify_integrity ........ False",
            "  save_interval ..................................... 100"]
    assert not any(map(shows_progress, dump))
    assert all(map(shows_progress, [" [2026-05-14 10:25:03] iteration        2/       6 | consumed samples: 4",
                                    "saving checkpoint at iteration       2 to /ckpt in torch_dist format",
                                    "[rank 1] verification failed: checkpoint of iteration 2 differs"]))
