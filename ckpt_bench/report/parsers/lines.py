"""Streaming the lines of a log: constant memory, and only the lines a report can use.

Logs of long runs reach gigabytes, and almost every line is an iteration line no report needs. So a
file is read in blocks of a few MiB and searched in C for the few lines that can matter (each keyword
with a SIMD substring search, `ahocorasick_rs`, about 6x faster here than `bytes.find`, whose two-way
search of a long needle runs at about 2.5 GB/s; compiled patterns for the rest); only those are decoded
and handed to a parser, never the others one by one.
What a format keeps is its `Grammar`:

* a line holding one of its `keywords` (`checkpoint`, the start of an arguments dump, ...);
* every line of an arguments dump (its lines name no keyword), up to `end of arguments`;
* for formats with multi-line records (`record_start`: a line that does not start a record continues
  the one above, e.g. an indented line in Megatron's stdout, a line without the prefix in Primus),
  the continuation lines of a kept record that can matter: timer names (`  name:`) and per-rank
  values (`rank N: t`);
* a timer block's header (`... across ranks (ms):`, a `headers` keyword) only when a line of its
  block, or the line right after it, is kept: a block naming no checkpoint timer cannot matter, and a
  long run prints thousands. The header is looked for up to 1 MiB before the kept line, in the same
  file (a block split by a rotation loses its header);
* with a `context` (trigger, needle), the nearest line before a kept line holding the trigger that
  holds the needle, after the line kept before it, in the same block: torchtitan's `step: N` before
  a save that does not name its step.

Lines holding the grammar's `counted` keyword (Megatron's training line, `elapsed time per iteration`:
one per logged interval, most of a long log) are not kept but counted: each run of lines between two
kept lines that holds one comes as one `Counted`, a view of the bytes read, and the parser finds what
it counts in them with one compiled pattern (`LogParser.count`), never a line at a time.

`candidate_lines` states the same rules line by line: it is the definition, `scan_lines` the fast
reading, and the two keep the same lines but for timer headers whose block holds nothing kept (and
context lines, which the definition does not have); the definition gives each counted line as a
`Counted` of its own, the fast reading a run of them as one. `tests/unit/test_log_scan.py` holds them to it.

Long lines: a line is read up to its first `MAX_LINE` bytes (the rest of it is skipped, never held), and
a parser reads at most the first `MAX_TEXT` bytes of a line it gets; the notes count the lines cut. A
file without newlines (or a binary file) thus costs the buffer, never memory in proportion to its size.

Damaged files: a `.gz` cut short (a copy interrupted, a disk full) gives the lines before the cut
and a note saying where it is; data that is not gzip, or is corrupt inside, is an `OSError` naming the
file, as for a file that cannot be opened.

Times: log timestamps carry no zone. They are read as if they were UTC, always, so the result never
depends on the reader's timezone or a DST switch; only differences between them are used. A time
that does not exist (`2025-06-31`, month 13) is a `ValueError`, never silently moved to another day.
"""

from __future__ import annotations

import errno
import gzip
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path

from ahocorasick_rs import BytesAhoCorasick

from ckpt_bench.report.parsers.launchers import PREFIX_BYTES

ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")
ARGUMENTS_START = b"--- arguments ---"  # Megatron's `-------- arguments --------` (3+ dashes, as the parser reads it)
ARGUMENTS_END = b"end of arguments"
_BUFFER = 1 << 20
# Bytes searched at once. A block is searched several times over (each keyword, the training lines), likelier
# from the CPU's cache when small: 2 MiB took about 20 ms less CPU than 8 MiB on the 230 MB read of
# benchmarks/parse_speed.py's 1 GiB tree (and must stay above _MAX_CARRY, which a block carries over).
BLOCK = 2 << 20
MAX_LINE = 8 << 20  # a longer line is cut to its first MAX_LINE bytes, the rest skipped (the buffer grows to it)
MAX_TEXT = 64 << 10  # a parser reads at most the first MAX_TEXT bytes of a line
HEAD_BYTES = 1 << 20  # a file's first lines (sniffing) come from at most its first MiB
_MAX_CARRY = 1 << 20  # how far a timer header is looked for, or carried over a block boundary
_NEAR = 4 << 10  # how far `_holds` looks with `find` before the SIMD search, which lists every occurrence
# A run of counted lines whose first _PROBE bytes hold its keyword less than once in _SPARSE bytes is searched a line
# at a time (`Counted.findall_in_lines`): the pattern steps through every byte at about 2 GB/s, the keyword search at
# about 10, and each line costs about 1 us in Python (2,000 bytes of the pattern's time).
_PROBE, _SPARSE = 16 << 10, 2048
_COLON_END = re.compile(rb":[ \t\r\x0b\x0c]*(?:\n|\Z)")  # a line whose last non-blank character is `:`


@dataclass(frozen=True)
class Position:
    """Where a line is when its reader did not count lines (`scan_lines`): `lines` lines after byte
    `offset` (a line start) of file `file` of its stream. `locate` turns it into a line number."""

    file: int
    offset: int
    lines: int = 0


@dataclass(frozen=True, slots=True)
class Counted:
    """A run of lines none of which is kept, holding the grammar's `counted` keyword: what a parser counts
    in them (`LogParser.count`), as the file holds them (ANSI colours removed). A view, not a copy: `data`
    is the reader's buffer, whose bytes [start, stop) are these lines until the next line of the same
    stream is read (read them before; `bytes(counted)` keeps them)."""

    data: bytes | bytearray
    start: int
    stop: int

    def find(self, sub: bytes, start: int = 0) -> int:
        """`bytes.find` within the lines, positions relative to their start."""
        found = self.data.find(sub, self.start + start, self.stop)
        return found - self.start if found >= 0 else -1

    def rfind(self, sub: bytes, end: int | None = None) -> int:
        """`bytes.rfind` within the lines (before `end`), positions relative to their start."""
        found = self.data.rfind(sub, self.start, self.stop if end is None else self.start + end)
        return found - self.start if found >= 0 else -1

    def match(self, pattern: re.Pattern[bytes], at: int) -> re.Match[bytes] | None:
        return pattern.match(self.data, self.start + at, self.stop)

    def findall(self, pattern: re.Pattern[bytes]) -> list:
        return pattern.findall(self.data, self.start, self.stop)

    def findall_in_lines(self, pattern: re.Pattern[bytes], keyword: bytes) -> list:
        """`findall` of a pattern each of whose matches lies within one line holding `keyword` (the training
        line's pattern and keyword): where those lines are sparse among the bytes (a timer block between two),
        the pattern runs over them alone, put together (found by one SIMD search of the keyword); the same
        matches, in the same order."""
        data, start, stop = self.data, self.start, self.stop
        probe = min(stop, start + _PROBE)
        if data.count(keyword, start, probe) * _SPARSE > probe - start:  # dense: one pass of the pattern
            return pattern.findall(data, start, stop)
        rfind, find = data.rfind, data.find
        with memoryview(data) as view:
            with view[start:stop] as window:
                places = searcher(keyword).find_matches_as_indexes(window)
            spans = {rfind(b"\n", start, start + at) + 1 or start: find(b"\n", start + end, stop) + 1 or stop
                     for _, at, end in places}  # a line holding the keyword twice: once
            lines = b"".join([view[begin:end] for begin, end in spans.items()])
        return pattern.findall(lines)

    def line(self, at: int) -> bytes:
        """The line holding byte `at`."""
        end = self.find(b"\n", at)
        return bytes(memoryview(self.data)[self.start + self.rfind(b"\n", at) + 1:
                                           self.stop if end < 0 else self.start + end])

    def cut(self, at: int) -> tuple[Counted, Counted]:
        """The lines before `at` (a line start) and those from it."""
        return Counted(self.data, self.start, self.start + at), Counted(self.data, self.start + at, self.stop)

    def __len__(self) -> int:
        return self.stop - self.start

    def __bytes__(self) -> bytes:
        return bytes(memoryview(self.data)[self.start:self.stop])


# A line to parse: the files it was read from (one stream: a log and its rotations, oldest first),
# where it is in them (a line number counted across the files, or a `Position`; `locate` turns
# either into file and line), its text, or a run of counted lines.
Line = tuple[list[Path], "int | Position", "str | Counted"]


@dataclass(frozen=True)
class Grammar:
    """Which lines of a format can matter to a report (see the module docstring)."""

    keywords: tuple[bytes, ...]
    record_start: re.Pattern[bytes] | None = None  # matches at the start of a line that begins a record
    headers: tuple[bytes, ...] = ()  # a record holding one is kept only for a kept line in its block
    context: tuple[bytes, bytes] | None = None  # (trigger, needle)
    counted: bytes | None = None  # lines holding it (and no keyword) are counted in bulk, not kept

    def continues(self, raw: bytes) -> bool:
        """Whether a line continues the record above it."""
        return self.record_start is not None and self.record_start.match(raw) is None

    @property
    def next_record(self) -> re.Pattern[bytes]:
        """A newline followed by a line that begins a record."""
        return _next_record(self.record_start)


_NEXT_RECORD: dict[bytes, re.Pattern[bytes]] = {}


def _next_record(start: re.Pattern[bytes]) -> re.Pattern[bytes]:
    pattern = _NEXT_RECORD.get(start.pattern)
    if pattern is None:
        pattern = _NEXT_RECORD[start.pattern] = re.compile(b"\n(?:" + start.pattern + b")")
    return pattern


def read_lines(path: str | os.PathLike, notes: list[str]) -> Iterator[bytes]:
    """The raw lines of a file (gzip-compressed when its name ends in `.gz`), each cut to `MAX_LINE`
    bytes; `notes` gets where a `.gz` cut short ends. For the definition of the lines kept
    (`candidate_lines`): `scan_lines` reads the lines a report needs."""
    number = 0
    with _open(path) as file:
        try:
            while line := file.readline(MAX_LINE):
                number += 1
                if len(line) == MAX_LINE and not line.endswith(b"\n"):
                    _skip_line(file)
                yield line
        except EOFError:
            notes.append(_cut_note(path, number))
        except (gzip.BadGzipFile, zlib.error) as error:
            raise _not_gzip(path, error) from error


def head(path: str | os.PathLike, size: int = HEAD_BYTES) -> bytes:
    """A file's first `size` bytes (decompressed for a `.gz`; of a `.gz` cut short, what came out before the
    cut): bounded whatever the file holds."""
    data = bytearray()
    with _open(path) as file:
        try:
            while len(data) < size and (chunk := file.read1(size - len(data))):
                data += chunk
        except EOFError:
            pass
        except (gzip.BadGzipFile, zlib.error) as error:
            raise _not_gzip(path, error) from error
    return bytes(data)


def head_lines(path: str | os.PathLike, count: int) -> list[str]:
    """The first `count` lines of a file within its first `HEAD_BYTES` (what formats are sniffed by), ANSI
    colour codes removed: bounded whatever the file holds (a file without newlines, a binary file)."""
    return [ANSI.sub(b"", raw).decode("utf-8", "replace").rstrip("\r") for raw in head(path).split(b"\n")[:count]]


def _open(path: str | os.PathLike):
    if str(path).endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb", buffering=_BUFFER)  # noqa: SIM115 - the caller's `with`


def _skip_line(file) -> None:
    """Reads a buffered file past the end of the current line (a line cut to MAX_LINE)."""
    while (chunk := file.readline(_BUFFER)) and not chunk.endswith(b"\n"):
        pass


def _cut_note(path, lines: int) -> str:
    return f"{path} is cut short (truncated .gz): read up to line {lines}, the rest is lost"


def _not_gzip(path, error: Exception) -> OSError:
    return OSError(errno.EINVAL, f"not readable as gzip ({error})", str(path))


def locate(files: list[Path], number: int | Position) -> tuple[Path, int]:
    """File and line in it of line `number` of `files` read as one stream (or of a `Position`). Reads
    the files again to count their lines: for a note, not for every line."""
    if isinstance(number, Position):
        return files[number.file], _newlines(files[number.file], number.offset) + number.lines + 1
    for path in files[:-1]:
        count = sum(1 for _ in read_lines(path, []))
        if number <= count:
            return path, number
        number -= count
    return files[-1], number


def _newlines(path: Path, limit: int) -> int:
    """How many newlines the first `limit` bytes of a file hold."""
    count = 0
    with _open(path) as file:
        while limit > 0 and (chunk := file.read(min(limit, _BUFFER))):
            count += chunk.count(b"\n")
            limit -= len(chunk)
    return count


# -- the definition, line by line ------------------------------------------------------------------


def _hit(raw: bytes, keywords: tuple[bytes, ...]) -> bool:
    return any(keyword in raw for keyword in keywords)


def candidate_lines(
    raw_lines: Iterable[bytes], continues: Callable[[bytes], bool], grammar: Grammar | None = None
) -> Iterator[tuple[int, str | Counted]]:
    """(line number, text) of the lines worth parsing, ANSI colour codes removed, and (line number,
    `Counted`) of each counted line: the rules, one line at a time (timer headers are kept whatever their
    block holds). `grammar`: its keywords and headers (Megatron's by default); `continues` says which
    lines continue a record."""
    grammar = grammar or MEGATRON
    keywords = grammar.keywords + grammar.headers
    follow = in_arguments = False
    for number, raw in enumerate(raw_lines, 1):
        if b"\x1b" in raw:
            raw = ANSI.sub(b"", raw)
        if in_arguments:
            in_arguments = ARGUMENTS_END not in raw
        elif _hit(raw, keywords):
            follow = True
            in_arguments = ARGUMENTS_START in raw
        elif not (follow and continues(raw) and (b"rank" in raw or raw.rstrip().endswith(b":"))):
            # Not kept: a line beginning a record ends the one kept before; another timer's entry does not
            # (its block goes on, but the line cannot matter).
            follow = follow and continues(raw)
            if grammar.counted is not None and grammar.counted in raw:
                yield number, Counted(raw, 0, len(raw))
            continue
        yield number, raw[:MAX_TEXT].decode("utf-8", "replace").rstrip("\r\n")


def is_indented(raw: bytes) -> bool:
    return raw[:1] in (b" ", b"\t")


# Megatron-LM's stdout: a record's continuation lines are indented (a timer's entries), behind a
# launcher's prefix if any (`launchers`: srun's label, torchrun's `[default0]:`).
# Megatron's training log line (`iteration 100/ 1000 | ... | elapsed time per iteration (ms): 733.2 | ...`).
ITERATION_TIME = b"elapsed time per iteration ("
MEGATRON = Grammar(
    keywords=(b"checkpoint", ARGUMENTS_START, b"without --use-persistent-ckpt-worker", b"using world size: "),
    record_start=re.compile(rb"(?!" + PREFIX_BYTES + rb"[ \t])"),
    headers=(b"across ranks (ms)",),
    counted=ITERATION_TIME,
)


# -- the fast reading ------------------------------------------------------------------------------


def scan_lines(files: list[Path], grammar: Grammar, notes: list[str], block: int = BLOCK) -> Iterator[Line]:
    """The lines worth parsing of files read as one stream (a log and its rotations, oldest first),
    `block` bytes at a time (at first: a line or a timer block that does not fit doubles it)."""
    scan = _Scan(grammar, block)
    for index, path in enumerate(files):
        for where, text in scan.file(path, index, notes):
            yield files, where, text


class _Blocks:
    """A file's blocks of whole lines: `buf[:end]`, the last line without its newline only at the end of the
    file or when it is cut (`MAX_LINE`). The caller says how far it used each (`keep`): the next block
    starts there; when it used nothing (a record it keeps for the next block fills the block), the next
    block is larger, up to `MAX_LINE`."""

    def __init__(self, path: Path, buffer: bytearray):
        self.path, self.buffer = path, buffer
        self.keep = 0  # where the next block starts, in the block just given
        self.offset = 0  # where the block just given starts in the file (its decompressed bytes)
        self.cut_short: int | None = None  # lines read of a `.gz` cut short
        self.cut = 0  # lines cut to MAX_LINE

    def __iter__(self) -> Iterator[tuple[bytes | bytearray, int, bool, bool]]:
        """(buffer, end, last, whether the block is one line cut to MAX_LINE) per block."""
        return self._gzip() if str(self.path).endswith(".gz") else self._plain()

    def _plain(self) -> Iterator[tuple[bytearray, int, bool, bool]]:
        with open(self.path, "rb", buffering=0) as file:
            while True:
                buf = self.buffer
                size = _fill(file, buf)
                if size == 0:
                    return
                last = size < len(buf)
                end = size if last else buf.rfind(b"\n", 0, size) + 1
                cut = not end and len(buf) >= MAX_LINE  # one line longer than MAX_LINE: its start is read
                if cut:
                    end = MAX_LINE
                used = 0
                if end:
                    self.keep = end
                    yield buf, end, last, cut
                    if last:
                        return
                    used = end if cut else self.keep
                if cut:
                    self.cut += 1
                    file.seek(used - size, os.SEEK_CUR)
                    self.offset += used + _skip_rest(file)
                    continue
                if not used:  # a line longer than the buffer, or a kept record filling it
                    self.buffer = bytearray(min(2 * len(buf), max(MAX_LINE, len(buf))))
                file.seek(used - size, os.SEEK_CUR)  # read again what was not used
                self.offset += used

    def _gzip(self) -> Iterator[tuple[bytes, int, bool, bool]]:
        rest, lines, want = b"", 0, len(self.buffer)
        with gzip.open(self.path, "rb") as compressed:
            while True:
                parts, size, last, cut = [rest], len(rest), False, False
                try:
                    while size < want:
                        data = compressed.read1(want - size)
                        if not data:
                            last = True
                            break
                        parts.append(data)
                        size += len(data)
                except EOFError:
                    last = cut = True
                except (gzip.BadGzipFile, zlib.error) as error:
                    raise _not_gzip(self.path, error) from error
                block = b"".join(parts)
                end = len(block) if last else block.rfind(b"\n") + 1
                long_line = not end and want >= MAX_LINE
                if long_line:
                    end = MAX_LINE
                used = 0
                if end:
                    self.keep = end
                    yield block, end, last, long_line
                    used = end if long_line else self.keep
                if last:
                    if cut:
                        self.cut_short = lines + block.count(b"\n") + (not block.endswith(b"\n"))
                    return
                if long_line:
                    self.cut += 1
                    try:
                        skipped, rest = _skip_rest_compressed(compressed)
                    except EOFError:
                        self.cut_short = lines + 1
                        return
                    except (gzip.BadGzipFile, zlib.error) as error:
                        raise _not_gzip(self.path, error) from error
                    self.offset += len(block) + skipped
                    lines += 1
                    continue
                if not used:
                    want = min(2 * want, max(MAX_LINE, want))
                lines += block.count(b"\n", 0, used)
                rest = block[used:]
                self.offset += used


def _skip_rest(file) -> int:
    """Reads a raw file past the end of the current line (a line cut to MAX_LINE); the bytes skipped."""
    skipped = 0
    while chunk := file.read(_BUFFER):
        newline = chunk.find(b"\n")
        if newline >= 0:
            file.seek(newline + 1 - len(chunk), os.SEEK_CUR)
            return skipped + newline + 1
        skipped += len(chunk)
    return skipped


def _skip_rest_compressed(compressed: gzip.GzipFile) -> tuple[int, bytes]:
    """`_skip_rest` for a `.gz`: the bytes skipped, and those read after the newline."""
    skipped = 0
    while chunk := compressed.read1(_BUFFER):
        newline = chunk.find(b"\n")
        if newline >= 0:
            return skipped + newline + 1, chunk[newline + 1:]
        skipped += len(chunk)
    return skipped, b""


def _fill(file, buf: bytearray) -> int:
    """Reads into `buf` until it is full or the file ends; the bytes read."""
    view, size = memoryview(buf), 0
    while size < len(buf):
        got = file.readinto(view[size:])
        if not got:
            break
        size += got
    return size


class _Scan:
    """The state of one stream's scan, carried from block to block and file to file."""

    def __init__(self, grammar: Grammar, block: int):
        self.grammar = grammar
        self.follow = False  # the last kept line's record may go on
        self.in_arguments = False
        self.buffer = bytearray(block)
        self.long_lines = 0  # kept lines of the file being read cut to MAX_TEXT (not cut to MAX_LINE)

    def file(self, path: Path, index: int, notes: list[str]) -> Iterator[tuple[Position, str]]:
        blocks = _Blocks(path, self.buffer)
        for raw, end, last, cut in blocks:
            buf, stripped = raw, False
            if raw.find(b"\x1b", 0, end) >= 0:  # ANSI colours: removed before anything is searched
                buf, stripped = ANSI.sub(b"", raw[:end]), True
            block = _Block(self, buf, len(buf) if stripped else end, last, index, blocks.offset, stripped, cut)
            yield from block.lines()
            keep = block.keep
            if stripped:  # back to a position in the file's bytes
                keep = end if keep >= block.end else _nth_line_start(raw, buf.count(b"\n", 0, keep))
            blocks.keep = keep
        self.buffer = blocks.buffer
        if blocks.cut_short is not None:
            notes.append(_cut_note(path, blocks.cut_short))
        long_lines, self.long_lines = blocks.cut + self.long_lines, 0
        if long_lines:
            notes.append(f"{path}: {long_lines} line{'s' * (long_lines > 1)} longer than {MAX_TEXT >> 10} KiB "
                         f"{'were' if long_lines > 1 else 'was'} read up to {MAX_TEXT >> 10} KiB, the rest skipped")


def _nth_line_start(raw: bytes | bytearray, lines: int) -> int:
    """Where line `lines` (counted from 0) of `raw` starts."""
    position = 0
    for _ in range(lines):
        position = raw.index(b"\n", position) + 1
    return position


class _Block:
    """One block of a stream: finds its kept lines (positions are in `buf`)."""

    def __init__(self, scan: _Scan, buf: bytes | bytearray, end: int, last: bool, file: int, offset: int,
                 stripped: bool, cut: bool):
        self.scan, self.buf, self.end, self.last, self.cut = scan, buf, end, last, cut
        self.grammar = scan.grammar
        self.file, self.offset, self.stripped = file, offset, stripped
        self.keep = end
        self._counted = self._lines = 0  # in a stripped block: lines before position `_counted`
        self._done = 0  # end of the last line handed over
        self._gap = 0  # where the lines not handed over since the last one handed over start
        self.hits = self._hits()
        self._hit = 0  # index of the first hit not behind us

    def _hits(self) -> list[int]:
        """Where the block's keywords are (each keyword's occurrences that do not overlap, as a `find` loop
        gives them), in order."""
        with memoryview(self.buf) as view, view[:self.end] as block:
            return sorted(start for keyword in self.grammar.keywords
                          for _, start, _ in searcher(keyword).find_matches_as_indexes(block))

    # -- positions ------------------------------------------------------------------------------

    def where(self, start: int) -> Position:
        if not self.stripped:
            return Position(self.file, self.offset + start)
        self._lines += self.buf.count(b"\n", self._counted, start)
        self._counted = start
        return Position(self.file, self.offset, self._lines)

    def line_start(self, position: int, floor: int = 0) -> int:
        return self.buf.rfind(b"\n", floor, position) + 1 or floor

    def line_end(self, position: int) -> int:
        newline = self.buf.find(b"\n", position, self.end)
        return self.end if newline < 0 else newline + 1

    def record_starts(self, position: int) -> bool:
        return self.grammar.record_start.match(self.buf, position, self.end) is not None

    def run_end(self, start: int, stop: int) -> int:
        """The first line in [start, stop) that begins a record (`start`: a line start), else `stop`."""
        if start >= stop or self.record_starts(start):
            return start
        found = self.grammar.next_record.search(self.buf, start, stop)
        return stop if found is None else found.start() + 1

    def text(self, start: int, stop: int) -> Iterator[tuple[Position, str | Counted]]:
        """The line in [start, stop), after the run of counted lines before it."""
        yield from self.counted(start)
        self._done = self._gap = stop
        if stop - start > MAX_TEXT and not (self.cut and stop == self.end):  # a cut line is counted once
            self.scan.long_lines += 1
        yield self.where(start), self.buf[start:start + min(stop - start, MAX_TEXT)].decode(
            "utf-8", "replace").rstrip("\r\n")

    def counted(self, stop: int) -> Iterator[tuple[Position, Counted]]:
        """The lines not handed over up to `stop` (a line start), when they hold the counted keyword."""
        keyword, start = self.grammar.counted, self._gap
        if keyword is not None and start < stop and _holds(self.buf, keyword, start, stop):
            yield self.where(start), Counted(self.buf, start, stop)
        self._gap = max(start, stop)

    # -- the rules ------------------------------------------------------------------------------

    def lines(self) -> Iterator[tuple[Position, str]]:
        scan, grammar, end = self.scan, self.grammar, self.end
        position = 0
        while position < end:
            if scan.in_arguments:
                found = self.buf.find(ARGUMENTS_END, position, end)
                stop = end if found < 0 else self.line_end(found)
                yield from self._every_line(position, stop)
                scan.in_arguments = found < 0
                position = stop
            elif scan.follow and grammar.record_start is not None:
                stop = self.run_end(position, end)
                position = yield from self._run(position, stop)
                if not scan.in_arguments and stop < end:
                    scan.follow = False  # a line beginning a record ends it (a block's end does not)
            else:
                hit = self._next_hit(position)
                if hit is None:
                    break
                start = self.line_start(hit, position)
                if grammar.record_start is not None and grammar.headers:
                    start = self._header_before(position, start)
                position = yield from self._kept(start)
        if not scan.follow and not scan.in_arguments and not self.last:
            self.keep = self._open_header()
        yield from self.counted(self.keep)  # what comes after `keep` is read again with the next block

    def _next_hit(self, position: int) -> int | None:
        hits, index = self.hits, self._hit
        while index < len(hits) and hits[index] < position:
            index += 1
        self._hit = index
        return hits[index] if index < len(hits) else None

    def _kept(self, start: int) -> Iterator[tuple[Position, str]]:
        """A kept line (and the line its context brings): the position after it."""
        stop = self.line_end(start)
        line = self.buf[start:stop]
        context = self.grammar.context
        if context is not None and context[0] in line:
            found = self.buf.rfind(context[1], self._done, start)
            if found >= 0:
                before = self.line_start(found, self._done)
                yield from self.text(before, self.line_end(before))
        yield from self.text(start, stop)
        self.scan.follow = True
        self.scan.in_arguments = ARGUMENTS_START in line
        return stop

    def _every_line(self, start: int, stop: int) -> Iterator[tuple[Position, str]]:
        while start < stop:
            end = self.line_end(start)
            yield from self.text(start, end)
            start = end

    def _run(self, start: int, stop: int) -> Iterator[tuple[Position, str]]:
        """The kept lines of a record's continuation lines in [start, stop): the position after them,
        or after a line starting an arguments dump."""
        buf, candidates = self.buf, set()
        index = self._hit
        while index < len(self.hits) and self.hits[index] < stop:
            if self.hits[index] >= start:
                candidates.add(self.line_start(self.hits[index], start))
            index += 1
        found = buf.find(b"rank", start, stop)
        while found >= 0:
            line = self.line_start(found, start)
            candidates.add(line)
            found = buf.find(b"rank", self.line_end(line), stop)
        for match in _COLON_END.finditer(buf, start, stop):
            candidates.add(self.line_start(match.start(), start))
        for line in sorted(candidates):
            position = yield from self._kept(line)
            if self.scan.in_arguments:
                return position
        return stop

    def _header_before(self, floor: int, start: int) -> int:
        """The header line of the timer block that the line at `start` is in or ends (its run of
        continuation lines reaches it), if that block starts in [floor, start); else `start`."""
        if start <= floor:
            return start
        before = self.line_start(start - 1, floor)
        if self.record_starts(before):  # the line before begins a record: a header, or not
            return before if self._is_header(before) else start
        lowest = max(floor, start - _MAX_CARRY)
        header = max(self.buf.rfind(keyword, lowest, start) for keyword in self.grammar.headers)
        if header < 0:
            return start
        line = self.line_start(header, floor)
        if self.record_starts(line) and self.run_end(self.line_end(line), start) == start:
            return line
        return start

    def _is_header(self, start: int) -> bool:
        stop = self.line_end(start)
        return any(self.buf.find(keyword, start, stop) >= 0 for keyword in self.grammar.headers)

    def _open_header(self) -> int:
        """Where a timer block at the end of the block starts, when nothing of it was kept yet and it
        may go on in the next block (then it is read again there); else the end of the block."""
        if not self.grammar.headers or self.grammar.record_start is None:
            return self.end
        header = max(self.buf.rfind(keyword, self._done, self.end) for keyword in self.grammar.headers)
        if header < 0:
            return self.end
        line = self.line_start(header, self._done)
        if (self.end - line <= _MAX_CARRY and self.record_starts(line)
                and self.run_end(self.line_end(line), self.end) == self.end):
            return line
        return self.end


def _holds(buf: bytes | bytearray, keyword: bytes, start: int, stop: int) -> bool:
    """Whether `buf[start:stop]` holds `keyword`: its first `_NEAR` bytes with `find`, where a run of training
    lines has it at once, then the rest with the SIMD search, through lines that may have none."""
    near = min(stop, start + _NEAR)
    if buf.find(keyword, start, near) >= 0:
        return True
    if near == stop:
        return False
    with memoryview(buf) as view, view[near - len(keyword) + 1:stop] as rest:
        return bool(searcher(keyword).find_matches_as_indexes(rest))


@cache
def searcher(keyword: bytes) -> BytesAhoCorasick:
    """One keyword's searcher: an automaton of one pattern is a SIMD substring search (`memchr::memmem`); one
    of several patterns is not, so each keyword has its own."""
    return BytesAhoCorasick([keyword])


def megatron_time_ns(text: str) -> int:
    """`YYYY-MM-DD HH:MM:SS[.ffffff]` (Python's `str(datetime.now())`) -> ns, read as UTC."""
    return _utc_ns(datetime.fromisoformat(text))


def primus_time_ns(day: str, clock: str) -> int:
    """`YYYYMMDD`, `HH:MM:SS` -> ns, read as UTC."""
    return _utc_ns(
        datetime(int(day[:4]), int(day[4:6]), int(day[6:8]), int(clock[:2]), int(clock[3:5]), int(clock[6:8]))
    )


_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)


def _utc_ns(stamp: datetime) -> int:
    """A zone-less time, read as UTC -> ns since the epoch (exact: no float)."""
    return (stamp - _EPOCH) // _MICROSECOND * 1000
