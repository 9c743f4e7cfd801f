"""The fast log reading (`scan_lines`: blocks searched in C) against its line-by-line definition
(`candidate_lines`): the same lines, whatever the block size, on every fixture and on random logs.

The one difference allowed: a timer header whose block holds no kept line is left out by the fast
reading (nothing in such a block can matter), so the events of the two must be the same. Counted lines
(the training lines) come one by one from the definition, in runs from the fast reading: the same
iteration times, in the same places among the kept lines.
"""

from __future__ import annotations

import dataclasses
import gzip
import heapq
import random
from pathlib import Path

import pytest
from helpers import LOGS

from ckpt_bench.report.engine import build_report
from ckpt_bench.report.parsers import deepspeed, nemo, primus
from ckpt_bench.report.parsers.deepspeed import DeepSpeedParser
from ckpt_bench.report.parsers.iterations import ITERATION_TIME
from ckpt_bench.report.parsers.lines import (
    ANSI,
    MEGATRON,
    Counted,
    Grammar,
    Position,
    candidate_lines,
    locate,
    read_lines,
    scan_lines,
)
from ckpt_bench.report.parsers.megatron import MegatronParser
from ckpt_bench.report.parsers.nemo import NemoParser
from ckpt_bench.report.parsers.primus import PrimusParser
from ckpt_bench.report.parsers.srun import SrunMegatronParser

PRIMUS = dataclasses.replace(primus.GRAMMAR, context=None)  # the definition has no context lines
# Megatron's grammar serves srun's labels and every launcher's prefix (`launchers`).
GRAMMARS = {"megatron": (MEGATRON, MegatronParser), "primus": (PRIMUS, PrimusParser),
            "srun": (MEGATRON, SrunMegatronParser), "nemo-run": (nemo.GRAMMAR, NemoParser),
            "deepspeed": (deepspeed.GRAMMAR, DeepSpeedParser)}
BLOCKS = (16, 61, 256, 4096, 8 << 20)


def definition(path: Path, grammar: Grammar) -> list[tuple[int, str | Counted]]:
    return list(candidate_lines(read_lines(path, []), grammar.continues, grammar))


def fast(path: Path, grammar: Grammar, block: int) -> list[tuple[int, str | Counted]]:
    lines = []
    for files, where, text in scan_lines([path], grammar, [], block=block):
        assert isinstance(where, Position)
        located, number = locate(files, where)
        assert located == path
        if isinstance(text, Counted):  # a view of the reader's buffer: kept as a copy
            text = Counted(bytes(text), 0, len(text))
        lines.append((number, text))
    return lines


def kept(lines: list[tuple[int, str | Counted]]) -> list[tuple[int, str]]:
    return [(number, text) for number, text in lines if isinstance(text, str)]


def counted_between(lines: list[tuple[int, str | Counted]]) -> list[list[tuple]]:
    """The iteration times of the counted lines after each kept line (before the first, then after each)."""
    runs: list[list[tuple]] = [[]]
    for _, text in lines:
        if isinstance(text, Counted):
            runs[-1] += text.findall(ITERATION_TIME)
        else:
            runs.append([])
    return runs


def events(parser_class, lines: list[tuple[int, str | Counted]]) -> list:
    parser, found = parser_class(), []
    for seq, (_, text) in enumerate(lines, 1):
        if isinstance(text, Counted):
            parser.count(text)
            continue
        try:
            found += parser.feed(text, seq)
        except (ValueError, OverflowError):
            continue
    found += parser.finish()
    times = parser.iteration_times
    return [(e.kind, e.rank, e.iteration, e.wall_ns, e.elapsed_ns, e.path, e.source, e.error, e.extra)
            for e in found] + [(times.lines, times.iterations, sorted(times.seconds.items()))]


def assert_same(path: Path, grammar: Grammar, parser_class, blocks=BLOCKS) -> None:
    expected = definition(path, grammar)
    for block in blocks:
        got = fast(path, grammar, block)
        assert set(kept(got)) <= set(kept(expected)), (block, sorted(set(kept(got)) - set(kept(expected)))[:3])
        left_out = [text for number, text in kept(expected) if (number, text) not in set(kept(got))]
        assert all(not text or text[:1] in " \t" or "across ranks (ms)" in text or "rank" in text
                   or text.rstrip().endswith(":") for text in left_out), (block, left_out[:3])
        if not left_out:  # the same kept lines: the same counted lines between them
            assert counted_between(got) == counted_between(expected), block
        assert events(parser_class, got) == events(parser_class, expected), block


@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("*.log")))
def test_fixtures_read_fast_as_defined(name):
    path = LOGS / name
    for grammar, parser_class in GRAMMARS.values():
        assert_same(path, grammar, parser_class)


def test_primus_folder_files_read_fast_as_defined():
    for path in sorted((LOGS / "primus_run").rglob("*.log*")):
        assert_same(path, PRIMUS, PrimusParser)


# -- random logs -----------------------------------------------------------------------------------------
# Made of the records of real logs in random order: save and load lines, timer blocks (a header and its
# entries, one after another as a timer prints them), arguments dumps, iteration lines and other noise.

ITERATION = " iteration      101/    1000 | consumed samples:        25856 | lm loss: 2.345678E+00 |"


def _records(rng: random.Random) -> list[list[str]]:
    """Records: each a list of lines, the first beginning the record (the others indented)."""
    i = rng.choice([100, 200, 300])
    stamp = f"[2025-06-01 10:00:0{rng.randrange(10)}.000000] "
    ds = f"[2025-06-01 10:00:0{rng.randrange(10)},{rng.randrange(1000):03d}] [INFO] [logging.py:96:log_dist] "
    entries = [
        f"    save-checkpoint ................................: ({rng.randrange(9)}00.00, 1200.00)",
        "    forward-backward ...............................: (900.00, 950.00)",
        "    load-checkpoint ................................: 3000.00",
        "  save-checkpoint:", "  forward-backward:", "  save-checkpoint-non-persistent:",
        f"     rank {rng.randrange(4):2d}: {rng.randrange(2000)}.00",
    ]
    header = rng.choice(["(min, max) time across ranks (ms):", "times across ranks (ms):",
                         "max time across ranks (ms):"])
    return [
        [f"saving checkpoint at iteration {i:7d} to /ckpt in torch_dist format"],
        [f"{stamp}saving checkpoint at iteration {i:7d} to /c"],
        [f"  {stamp}scheduled an async checkpoint save at iteration {i:7d} to /ckpt"],
        [f"  successfully saved checkpoint from iteration {i:7d} to /ckpt [ t 1/2, gtp_remat 1/1, p 1/1 ]"],
        [f"  successfully saved local checkpoint from iteration {i:7d}"],
        [header] + [rng.choice(entries) for _ in range(rng.randrange(5))],
        ["------------------------ arguments ------------------------",
         "  async_save ...................................... True",
         "  world_size ...................................... 4",
         "-------------------- end of arguments ---------------------"],
        [ITERATION.strip()], [ITERATION], ["\t indented: with a colon:"], [""],
        [f"{stamp} iteration {rng.randrange(1, 400):8d}/    1000 | consumed samples:        25856 | elapsed time per "
         f"iteration (ms): {rng.choice(['733.2', '801.0/733.2', '1204'])} | learning rate: 3.0E-04 |"],
        [f"  iteration {rng.randrange(1, 400):8d}/    1000 | elapsed time per iteration (s): 6.93 | rank 3:"],
        ["\x1b[32mWARNING: Starting a checkpoint save before previous has finished\x1b[0m"],
        ["UserWarning: --async-save is not supported without --use-persistent-ckpt-worker."],
        ["building dataset: rank 3 ready", "  rank 3: shard 1 of 4"],
        [" loading distributed checkpoint from /ckpt at iteration 100"],
        ["  successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 100"],
        [f"{ds}[Rank 0] [Torch] Checkpoint global_step{i} is about to be saved!"],
        [f"{ds}[Torch] Checkpoint global_step{i} is ready now!"],
        [f"{ds}[Torch] Loading checkpoint from /ckpt/global_step{i}/mp_rank_00_model_states.pt..."],
        [f"{ds}[Torch] Loaded checkpoint from /ckpt/global_step{i}/mp_rank_00_model_states.pt."],
        [f"time (ms) | save-checkpoint: {rng.randrange(9000)}.25 | forward: 3.00"],
        [f"[NeMo I 2025-06-01 10:00:0{rng.randrange(10)} nemo_logging:393] Global Checkpoint Save : Rank: 0 : "
         f"Iteration: {i} : Start time: 1748772000.000s : Save duration: 1.500s"],
        ["[2025-06-01 10:00:01,000] [INFO] [ft_launcher1@node] [default] Worker group FAILED. 3/3 attempts left; "
         "will restart worker group"],
    ]


def _primus(rng: random.Random, record: list[str]) -> list[str]:
    prefix = f"[20250601 10:00:0{rng.randrange(10)}][rank-0/4][INFO]     [---checkpointing.py:411] : "
    first = record[0].lstrip() if record[0].startswith(" ") and len(record) == 1 else record[0]
    return [prefix + first, *record[1:]]


def _srun(rng: random.Random, record: list[str]) -> list[str]:
    task = rng.choice([" 0", " 3", "15"])
    return [f"{task}: {line}" for line in record]


def _nemo_run(rng: random.Random, record: list[str]) -> list[str]:
    prefix = rng.choice(["pretrain_ft/0 [default0]:", "pretrain_ft/0 [default3]:[rank3]: ", "[rank1]:"])
    return [prefix + line for line in record]


def random_log(rng: random.Random, style: str) -> bytes:
    lines = []
    for _ in range(rng.randrange(1, 60)):
        record = rng.choice(_records(rng))
        if style == "primus":
            record = _primus(rng, record)
        elif style == "srun":
            record = _srun(rng, record)
        elif style == "nemo-run":
            record = _nemo_run(rng, record)
        lines += record
    if rng.random() < 0.3:
        index = rng.randrange(len(lines))
        lines[index] = f"\x1b[1m{lines[index][:5]}\x1b[0m{lines[index][5:]}"
    data = "".join(line + ("\r\n" if rng.random() < 0.05 else "\n") for line in lines)
    if rng.random() < 0.3:
        data = data.rstrip("\n")  # a last line without its newline
    return data.encode()


@pytest.mark.parametrize("style", sorted(GRAMMARS))
def test_random_logs_read_fast_as_defined(tmp_path, style):
    grammar, parser_class = GRAMMARS[style]
    rng = random.Random(20260514)
    for case in range(150):
        path = tmp_path / f"{case}.log"
        path.write_bytes(random_log(rng, style))
        assert_same(path, grammar, parser_class, blocks=(16, 97, 1 << 20))


def test_gzip_reads_as_plain(tmp_path):
    plain = LOGS / "megatron_2024_per_rank_timers.log"
    packed = tmp_path / "stdout.log.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    for block in (16, 4096):
        assert fast(packed, MEGATRON, block) == fast(plain, MEGATRON, block)


def test_rotated_files_are_one_stream_numbered_per_file(tmp_path):
    """A save goes on across a rotation; `locate` says which file and line."""
    first, second = tmp_path / "stdout.log.1", tmp_path / "stdout.log"
    first.write_bytes(b"noise\nsaving checkpoint at iteration      10 to /c in torch_dist format\n"
                      b"(min, max) time across ranks (ms):\n    save-checkpoint ....: (1.00, 2000.00)\n")
    second.write_bytes(b"noise\n  successfully saved checkpoint from iteration      10 to /c\nnoise")
    lines = [(locate(files, where), text) for files, where, text in scan_lines([first, second], MEGATRON, [])]
    assert lines == [((first, 2), "saving checkpoint at iteration      10 to /c in torch_dist format"),
                     ((first, 3), "(min, max) time across ranks (ms):"),
                     ((first, 4), "    save-checkpoint ....: (1.00, 2000.00)"),
                     ((second, 2), "  successfully saved checkpoint from iteration      10 to /c")]


def test_context_brings_the_nearest_step_line_of_the_same_block(tmp_path):
    grammar = Grammar(keywords=(b"checkpoint",), context=(b"the checkpoint", b"step: "))
    path = tmp_path / "titan.log"
    path.write_bytes(b"step: 9 loss 1\nstep: 10 loss 2\nnoise\nSaving the checkpoint.\n"
                     b"Finished saving the checkpoint in 1.00 seconds.\nstep: 11\n")
    texts = [text for _, _, text in scan_lines([path], grammar, [])]
    assert texts == ["step: 10 loss 2", "Saving the checkpoint.", "Finished saving the checkpoint in 1.00 seconds."]


def test_ansi_codes_are_removed_before_searching(tmp_path):
    path = tmp_path / "colour.log"
    path.write_bytes(b"\x1b[32mcheck\x1b[0mpoint saving checkpoint at iteration 1 to /c\x1b[0m\nnoise\n")
    (line,) = scan_lines([path], MEGATRON, [], block=16)
    assert line[2] == "checkpoint saving checkpoint at iteration 1 to /c"
    assert ANSI.sub(b"", path.read_bytes().splitlines()[0]).decode() == line[2]


def test_a_big_log_is_searched_not_read_line_by_line(tmp_path):
    """The kept lines of a log with a million iteration lines: few, and the right ones."""
    path = tmp_path / "stdout.log"
    noise = (ITERATION + "\n").encode() * 20000
    with open(path, "wb") as out:
        for i in range(50):
            out.write(noise)
            out.write(b"(min, max) time across ranks (ms):\n    forward-backward ....: (1.00, 2.00)\n")
            if i % 10 == 9:
                out.write(f"saving checkpoint at iteration {i:7d} to /c in torch_dist format\n".encode())
                out.write(f"  successfully saved checkpoint from iteration {i:7d} to /c\n".encode())
                out.write(b"(min, max) time across ranks (ms):\n    save-checkpoint ....: (1.00, 2000.00)\n")
    texts = [text for _, _, text in scan_lines([path], MEGATRON, [])]
    # Per save: the timer block just before its line (that block ends at it), the line, its timer.
    assert len(texts) == 25 and texts[:5] == ["(min, max) time across ranks (ms):",
                                              "saving checkpoint at iteration       9 to /c in torch_dist format",
                                              "  successfully saved checkpoint from iteration       9 to /c",
                                              "(min, max) time across ranks (ms):",
                                              "    save-checkpoint ....: (1.00, 2000.00)"]
    parser = MegatronParser()
    found = [e for seq, text in enumerate(texts, 1) for e in parser.feed(text, seq)] + parser.finish()
    report = build_report(found)
    assert [(s["iteration"], s["complete"], s["total_time"]) for s in report["saves"]] == [
        (i, True, 2.0) for i in (9, 19, 29, 39, 49)]


def _primus_ranks(rng: random.Random, folder: Path) -> list[list[Path]]:
    """Rank 0's and rank 7's files of a Primus run, times that do not go back, several lines a second:
    rank 0 saves, rank 7 logs training lines and save timers; in half the runs rank 0 logs training lines too
    (a run logging INFO on every rank), a file's last line without its newline now and then."""
    def prefix(rank: int, second: int) -> str:
        return f"[20260514 10:{second // 60:02d}:{second % 60:02d}][rank-{rank}/8][INFO]     [-----utils.py:425] : "

    files = {0: [], 7: []}
    second, iteration = 0, 0
    training = [7] if rng.random() < 0.5 else rng.choice([[0, 7], [0], [7, 0]])
    for _ in range(rng.randrange(20, 300)):
        second += rng.choice([0, 0, 1])
        if rng.random() < 0.08:
            files[0].append(prefix(0, second) + f"saving checkpoint at iteration {iteration:7d} to /c")
            files[7].append(prefix(7, second) + "(min, max) time across ranks (ms):")
            files[7].append(f"    save-checkpoint ................................: ({rng.randrange(9)}00.00, 1200.00)")
        elif rng.random() < 0.2:
            files[rng.choice([0, 7])].append(prefix(0, second) + "[rank 0] allocated 61.2 GiB")
        else:
            iteration += rng.choice([1, 1, 1, -3]) if iteration > 3 else 1  # now and then a process starts again
            for rank in training[:rng.randrange(1, len(training) + 1)]:
                files[rank].append(prefix(rank, second) + f"[2026-05-14 10:00:00.1] iteration {iteration:8d}/ 1000 | "
                                   f"elapsed time per iteration (ms): {rng.choice(['733.2', '801.5'])} | loss 2.0 |")
    paths = []
    for rank, lines in files.items():
        path = folder / f"rank-{rank}.log"
        path.write_text("".join(line + "\n" for line in lines)[:-1 if rng.random() < 0.2 else None])
        paths.append([path])
    return paths


def test_primus_ranks_merge_training_runs_as_their_lines_would(tmp_path):
    """Runs of training lines merged with the other rank's lines (cut where those come between) give the
    order a line-by-line merge by prefix time gives (rank 0 first within a second): the same kept lines, the
    same training lines between them."""
    def flat(items) -> list[tuple]:
        out = []
        for text in items:
            out += [("line", text)] if isinstance(text, str) else [("iter", m) for m in text.findall(ITERATION_TIME)]
        return out

    def line_by_line(streams: list[list[Path]]) -> list:
        def timed(path: Path, grammar: Grammar):
            stamp = ""
            for _, text in candidate_lines(read_lines(path, []), grammar.continues, grammar):
                raw = text.encode() if isinstance(text, str) else bytes(text)
                if match := primus._PREFIX_TIME_BYTES.match(raw):
                    stamp = match[1].decode()
                yield stamp, text
        grammars = (PRIMUS, dataclasses.replace(primus.LAST_RANK, context=None))
        merged = heapq.merge(*(timed(files[0], g) for files, g in zip(streams, grammars, strict=True)),
                             key=lambda item: item[0])
        return flat(text for _, text in merged)

    rng = random.Random(20261125)
    for case in range(60):
        folder = tmp_path / str(case)
        folder.mkdir()
        streams = _primus_ranks(rng, folder)
        fast = flat(text for _, _, text in primus.merged_lines(streams, []))
        assert fast == line_by_line(streams), case
