"""The log scan's fast searches give what their plain definitions give (`ckpt_bench.report.parsers.lines`,
`ckpt_bench.report.parsers.iterations`): keyword positions, whether a range holds the counted keyword, and the
training-line pattern written for speed against its plain form."""

from __future__ import annotations

import random
import re

import pytest

from ckpt_bench.report.parsers import iterations, lines
from ckpt_bench.report.parsers.lines import _NEAR, MEGATRON, _holds

# The training-line pattern in its plain form: a negated class for blanks, a lazy scan to the time, `?` for the
# fraction. The pattern in use must give the same matches on any bytes.
_B = rb"[^\S\n]"
PLAIN = re.compile(
    rb"iteration(?<!\witeration)" + _B + rb"+(\d{1,4300})" + _B + rb"*/" + _B + rb"*\d+" + _B
    + rb"*\|[^\n]*?elapsed time per iteration \((m?s\):" + _B + rb"*\d+(?:\.\d+)?)[^\n]*")

TRAINING_LINES = [
    b" [2026-05-18 14:10:48.428589] iteration   198324/ 1000000 | consumed samples:     50770944 | elapsed time"
    b" per iteration (ms): 2031.4 | learning rate: 2.999871E-04 | number of skipped iterations:   0 |",
    b" iteration      100/    1000 | consumed samples:        800 | skipped samples: 3 | elapsed time per iteration"
    b" (ms): 733.2/733.2 | lm loss: 2.3",
    b"iteration\t7/\t10 |\tconsumed samples: 1 | elapsed time per iteration (s):\x0b5. | x",
    b"iteration 8/ 10 | consumed samples: 2 | elapsed time per iteration (ms): x | elapsed time per iteration (ms): 9",
    b"iteration 9/ 10 | consumed samples: 3 |elapsed time per iteration (ms): 4.5",
    b"iteration 10/ 10 | elapsed time per iteration (ms):\r 12 | iteration 11/ 10 | elapsed time per iteration (ms): 1",
    b"preiteration 12/ 10 | consumed samples: 4 | elapsed time per iteration (ms): 7",
    b"iteration 13 / 10 | consumed samples:  5 | elapsed time per iteration (ms): 8.25 |",
    b"step 5 rank 7: tokens/s/GPU 8123.4, iteration 3 of elapsed time per iteration (ms): 1",
]


def test_training_pattern_matches_its_plain_form_on_real_and_odd_lines():
    text = b"\n".join(TRAINING_LINES) + b"\n"
    assert iterations.ITERATION_TIME.findall(text) == PLAIN.findall(text)
    assert len(PLAIN.findall(text)) == 7  # the odd lines really test something


def test_training_pattern_matches_its_plain_form_on_random_bytes():
    pieces = [b"iteration", b" ", b"\t", b"\x0b", b"\n", b"/", b"|", b"12", b"3.5", b".", b"x", b"(", b"e",
              b"elapsed time per iteration (", b"ms): ", b"s):", b" consumed samples: "]
    rng = random.Random(30)
    for _ in range(300):
        text = b"".join(rng.choice(pieces) for _ in range(rng.randrange(1, 60)))
        assert iterations.ITERATION_TIME.findall(text) == PLAIN.findall(text), text


def _find_loop(buf: bytes, keyword: bytes) -> list[int]:
    found, position = [], buf.find(keyword)
    while position >= 0:
        found.append(position)
        position = buf.find(keyword, position + len(keyword))
    return found


@pytest.mark.parametrize("keyword", [b"checkpoint", b"aa", b"--- arguments ---"])
def test_keyword_hits_are_a_find_loops(keyword):
    rng = random.Random(len(keyword))
    pieces = [b"checkpoint", b"check", b"a", b"aaa", b"--- arguments ---", b"-", b"\n", b"point"]
    buf = bytearray(b"".join(rng.choice(pieces) for _ in range(2000)))
    with memoryview(buf) as view:
        got = [start for _, start, _ in lines.searcher(keyword).find_matches_as_indexes(view)]
    assert got == _find_loop(bytes(buf), keyword)
    assert got  # present


@pytest.mark.parametrize("where", [0, _NEAR - 12, _NEAR - 5, _NEAR, 3 * _NEAR, None])
def test_holds_finds_the_keyword_anywhere_in_the_range(where):
    keyword = MEGATRON.counted
    buf = bytearray(b"x" * (4 * _NEAR))
    if where is not None:
        buf[where:where + len(keyword)] = keyword
    assert _holds(buf, keyword, 0, len(buf)) == (where is not None)
    if where is not None:  # a range that stops short of it, or starts past its first byte
        assert not _holds(buf, keyword, 0, where + len(keyword) - 1)
        assert not _holds(buf, keyword, where + 1, len(buf))


def _primus(clock: str, message: str, rank: int = 0, role: str = "rank") -> str:
    return f"[20260514 {clock}][job][pre_trainer][{role}-{rank}/8][INFO]     [----utils.py:425] : {message}\n"


def _training(clock: str, iteration: int) -> str:
    return _primus(clock, f"iteration {iteration:8d}/ 1000 | consumed samples: {iteration * 8:12d} | elapsed time per "
                          "iteration (ms): 2031.4 |")


@pytest.mark.parametrize("role", ["rank", "node"])
def test_primus_line_without_prefix_after_training_lines_takes_the_last_ones_time(tmp_path, role):
    """The last counted line's prefix is read when a line needs it: a save's end line without the Primus prefix
    (a continuation) has the time of the training line before it, whatever the line before that was."""
    from ckpt_bench.report.assembly import log_report

    log = tmp_path / "primus.log"
    log.write_text(_primus("10:00:00", "saving checkpoint at iteration       2 to /ckpt", role=role)
                   + _training("10:00:05", 3) + _training("10:00:09", 4)
                   + "  successfully saved checkpoint from iteration       2 to /ckpt\n")
    (save,) = log_report([log])["saves"]
    assert save["total_time"] == 9.0
    assert save["time_source"] == "primus-prefix"


def test_rising_compares_printed_iterations_as_their_numbers():
    rng = random.Random(7)
    for _ in range(2000):
        width = rng.choice([None, 3])  # zero-padded to one length, or as printed
        numbers = [rng.randrange(0, 1200) for _ in range(rng.randrange(1, 6))]
        printed = [(f"{n:0{width}d}" if width else str(n)).encode() for n in numbers]
        assert iterations._rising(printed) == all(map(int.__lt__, numbers, numbers[1:])), printed
