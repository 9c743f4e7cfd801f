"""Damaged logs never crash `ckpt_report.py`: seeded mutations of every fixture log, parsed in-process
the way ckpt_report.py parses them.

Whatever the damage, the outcome is one of: a report whose JSON is strict (no NaN/Infinity) with no
complete save or load of negative time, or a one-line `ReportError` (no event found, a file that
cannot be read). A failure names the seed and the mutations, so it can be replayed alone.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import shutil
import time
from pathlib import Path

import pytest
from helpers import LOGS, REAL_LOGS, assert_one_line_error, ckpt_report

from ckpt_bench.core.errors import ReportError
from ckpt_bench.report.assembly import log_report, to_json

SEED = 20250601
CASES = 1000
BUDGET_S = 20.0  # stop early on a slow machine: the cases run are still a valid sample

# Most lines of a log cannot matter to a report (see ckpt_bench.report.parsers.lines): damage is aimed at the ones
# that can, most of the time.
MATTERS = re.compile(rb"checkpoint|across ranks|rank|\.\.\.|arguments")
EXPECTED_ERRORS = re.compile(r"no checkpoint save or load found in |cannot read ")
DIGIT = re.compile(rb"\d")
NUMBER = re.compile(rb"\d+(?:\.\d+)?")
DATE = re.compile(rb"\d{4}-\d\d-\d\d|\d{8}")
CLOCK = re.compile(rb"\d\d:\d\d:\d\d")
DUMPED_NUMBER = re.compile(rb"(?<=\.\. )\d[\d.e+-]*$")  # `  world_size .......... 8` in an arguments dump


def _pick(rng, lines) -> int:
    aimed = [i for i, line in enumerate(lines) if MATTERS.search(line)]
    return rng.choice(aimed) if aimed and rng.random() < 0.8 else rng.randrange(len(lines))


def _flip_byte(rng, lines):
    i = _pick(rng, lines)
    if lines[i]:
        j = rng.randrange(len(lines[i]))
        lines[i] = lines[i][:j] + bytes([rng.randrange(256)]) + lines[i][j + 1:]


def _sub_one(rng, lines, pattern, make):
    i = _pick(rng, lines)
    hits = list(pattern.finditer(lines[i]))
    if hits:
        m = rng.choice(hits)
        lines[i] = lines[i][: m.start()] + make(rng, m.group()) + lines[i][m.end():]


def _change_digit(rng, lines):
    _sub_one(rng, lines, DIGIT, lambda r, _: str(r.randrange(10)).encode())


def _bad_number(rng, lines):
    _sub_one(rng, lines, NUMBER, lambda r, _: r.choice(
        [b"inf", b"nan", b"-inf", b"1e999", b"9" * 400, b"2250..0", b"", b"-1", b"0.0", b"1" * 5000]))


def _non_finite_setting(rng, lines):
    dumped = [i for i, line in enumerate(lines) if DUMPED_NUMBER.search(line.rstrip())]
    if dumped:
        i = rng.choice(dumped)
        value = rng.choice([b"inf", b"-inf", b"nan", b"1e999"])
        lines[i] = DUMPED_NUMBER.sub(value, lines[i].rstrip()) + b"\n"


def _bad_date(rng, lines):
    _sub_one(rng, lines, DATE, lambda r, text: r.choice(
        [b"2025-06-31", b"2025-13-01", b"0000-00-00", b"20251301", b"20250631", b"99999999"]
        if b"-" in text or r.random() < 0.3 else [b"20251301", b"20250631", b"00000000", b"20250229"]))


def _bad_clock(rng, lines):
    _sub_one(rng, lines, CLOCK, lambda r, _: r.choice([b"25:00:00", b"10:61:00", b"10:00:99", b"99:99:99"]))


def _end_before_start(rng, lines):
    ends = [i for i, line in enumerate(lines) if b"successfully" in line and CLOCK.search(line)]
    if ends:
        i = rng.choice(ends)
        lines[i] = CLOCK.sub(b"00:00:00", lines[i])


def _duplicate_line(rng, lines):
    i = _pick(rng, lines)
    lines.insert(i, lines[i])


def _delete_line(rng, lines):
    if len(lines) > 1:
        del lines[_pick(rng, lines)]


def _truncate_line(rng, lines):
    i = _pick(rng, lines)
    lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]


def _swap_lines(rng, lines):
    i, j = _pick(rng, lines), _pick(rng, lines)
    lines[i], lines[j] = lines[j], lines[i]


MUTATIONS = [_flip_byte, _change_digit, _bad_number, _non_finite_setting, _bad_date, _bad_clock, _end_before_start,
             _duplicate_line, _delete_line, _truncate_line, _swap_lines]


def mutate(rng: random.Random, data: bytes, done: list[str]) -> bytes:
    lines = data.splitlines(keepends=True) or [b""]
    for _ in range(rng.randint(1, 4)):
        mutation = rng.choice(MUTATIONS)
        mutation(rng, lines)
        done.append(mutation.__name__)
    return b"".join(lines)


def write(rng: random.Random, path: Path, data: bytes, done: list[str]) -> Path:
    """`data` at `path`, or gzipped at `path.gz`: whole, cut short, or with corrupt bytes."""
    if rng.random() < 0.7:
        path.write_bytes(data)
        return path
    packed = bytearray(gzip.compress(data))
    kind = rng.choice(["whole", "cut", "corrupt"])
    if kind == "cut":
        packed = packed[: rng.randrange(len(packed))]
    elif kind == "corrupt":
        start = rng.randrange(len(packed))
        packed[start: start + 8] = bytes(rng.randrange(256) for _ in range(8))
    done.append(f"gzip:{kind}")
    gz = path.with_name(path.name + ".gz")
    gz.write_bytes(bytes(packed))
    return gz


def corpus() -> list[Path]:
    logs = sorted(LOGS.glob("*.log")) + [LOGS / "primus_run"]
    return logs + (sorted(REAL_LOGS.glob("*.log")) if REAL_LOGS.is_dir() else [])


def damaged_case(rng: random.Random, source: Path, where: Path, done: list[str]) -> Path:
    """A damaged copy of a log file, or of a Primus folder with one of its files damaged."""
    if source.is_file():
        return write(rng, where / source.name, mutate(rng, source.read_bytes(), done), done)
    root = where / source.name
    shutil.copytree(source, root)
    files = sorted(f for f in root.rglob("*.log*") if f.is_file())
    target = rng.choice(files)
    done.append(str(target.relative_to(root)))
    data = mutate(rng, target.read_bytes(), done)
    target.unlink()
    write(rng, target, data, done)
    return root


def check(report: dict) -> None:
    text = to_json(report)

    def strict(constant):
        raise AssertionError(f"non-strict JSON constant {constant}")

    parsed = json.loads(text, parse_constant=strict)
    for save in parsed["saves"]:
        if save["complete"]:
            for key in ("block_time", "total_time"):
                assert save[key] is None or save[key] >= 0, save
    for load in [parsed["load"], *(parsed["loads"] or [])]:
        if load and load["complete"]:
            assert load["time"] is None or load["time"] >= 0, load


def test_damaged_logs_give_a_report_or_one_line_error(tmp_path):
    rng = random.Random(SEED)
    logs = corpus()
    started = time.monotonic()
    outcomes = {"report": 0, "error": 0}
    for case in range(CASES):
        if time.monotonic() - started > BUDGET_S:
            break
        source = rng.choice(logs)
        where = tmp_path / str(case)
        where.mkdir()
        done: list[str] = []
        path = damaged_case(rng, source, where, done)
        context = f"seed {SEED} case {case}: {source.name} {done}"
        try:
            check(log_report([path]))
            outcomes["report"] += 1
        except ReportError as error:
            assert EXPECTED_ERRORS.match(str(error)) and "\n" not in str(error), f"{context}: {error}"
            outcomes["error"] += 1
        except Exception as error:  # the point of the test: name the case that raised or broke a rule
            pytest.fail(f"{context}: {type(error).__name__}: {error}")
        shutil.rmtree(where)
    assert outcomes["report"] > outcomes["error"] > 0, outcomes  # the damage was varied, not all fatal


def test_gzip_cut_short_reports_what_was_read_and_corrupt_gzip_is_one_line(tmp_path):
    log = (LOGS / "megatron_2024_untimestamped_sync.log").read_bytes()
    packed = gzip.compress(log + b"".join(b"iteration %d | loss %d\n" % (i, i * 7919) for i in range(5000)))
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(packed[: len(packed) * 3 // 4])
    result = ckpt_report(cut)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [s["iteration"] for s in report["saves"]] == [100, 200]
    assert any(n.startswith(f"{cut} is cut short (truncated .gz): read up to line ") for n in report["notes"])

    corrupt = tmp_path / "corrupt.log.gz"
    damaged = bytearray(packed)
    damaged[len(damaged) // 2: len(damaged) // 2 + 64] = bytes(64)
    corrupt.write_bytes(bytes(damaged))
    assert_one_line_error(ckpt_report(corrupt), "not readable as gzip")
    not_gzip = tmp_path / "plain.log.gz"
    not_gzip.write_bytes(log)
    assert_one_line_error(ckpt_report(not_gzip), "not readable as gzip")
