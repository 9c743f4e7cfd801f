"""The storage baseline (real files, real threads, fio where installed), peak memory sampling, the
fraction-of-peak math and an event's time taken before its fields are computed."""

import json
import shutil

import pytest

from ckpt_bench.core.events import EventKind, EventRecorder, read_event_files
from ckpt_bench.core.memory import MemoryWatch
from ckpt_bench.core.units import MIB
from ckpt_bench.report.engine import ReportBuilder, fractions_of_peak
from ckpt_bench.storage.baseline import FioBaseline, IOShape, LocalFiles, PlainIOBaseline, measure_rounds


def test_shape_drops_empty_files_and_never_has_more_writers_than_files():
    shape = IOShape.of([3 * MIB, 0, MIB, 5], concurrency=8, fsync=None)
    assert shape.file_sizes == (3 * MIB, MIB, 5) and shape.concurrency == 3 and shape.fsync is False
    assert shape.total_bytes == 4 * MIB + 5
    assert IOShape.of([MIB] * 10, concurrency=4, fsync=True).concurrency == 4


class CountingFiles(LocalFiles):
    """LocalFiles that remembers what it wrote, fsynced and read, and when the cache was dropped."""

    def __init__(self, folder):
        super().__init__(folder)
        self.calls = []

    def write(self, name, size, fsync, block):
        super().write(name, size, fsync, block)
        self.calls.append(("write", name, (self.folder_path / name).stat().st_size, fsync))

    def read(self, name):
        count = super().read(name)
        self.calls.append(("read", name, count, None))
        return count

    def drop_cache(self):
        super().drop_cache()
        self.calls.append(("drop", None, None, None))

    @property
    def folder_path(self):
        from pathlib import Path

        return Path(self.location)


def test_builtin_baseline_writes_the_shape_then_reads_it_cold_and_removes_it(tmp_path):
    files = CountingFiles(tmp_path / "baseline")
    shape = IOShape.of([9 * MIB, 2 * MIB, 12345], concurrency=2, fsync=True)
    result = PlainIOBaseline(files).measure(shape)

    writes = [c for c in files.calls if c[0] == "write"]
    assert sorted(size for _, _, size, _ in writes) == sorted(shape.file_sizes)
    assert all(fsync for *_, fsync in writes)
    kinds = [c[0] for c in files.calls]
    assert kinds.index("drop") == 3 and kinds[4:] == ["read"] * 3  # every write, the cache dropped, the reads
    assert result["files"] == 3 and result["bytes"] == shape.total_bytes and result["concurrency"] == 2
    assert result["fsync"] is True and result["read_cache"] == "cold"
    assert result["write_bandwidth"] > 0 and result["read_bandwidth"] > 0
    assert result["write_bandwidth"] == pytest.approx(shape.total_bytes / MIB / result["write_time"], rel=0.01)
    assert not (tmp_path / "baseline").exists()


def test_rounds_report_the_fastest_and_keep_each_round(tmp_path):
    result = measure_rounds(PlainIOBaseline(LocalFiles(tmp_path / "b")), IOShape.of([MIB] * 2, 2, False), rounds=3)
    writes = [r["write_bandwidth"] for r in result["rounds"]]
    assert 3 <= len(writes) <= 6 and result["write_bandwidth"] == max(writes)
    assert result["read_bandwidth"] == max(r["read_bandwidth"] for r in result["rounds"])
    assert result["tool"] == "built-in (os.write/os.read)" and "fastest" in result["peak"]


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (apt-get install fio)")
def test_fio_baseline_runs_the_same_shape(tmp_path):
    shape = IOShape.of([4 * MIB] * 4 + [1000], concurrency=2, fsync=True)
    result = FioBaseline(tmp_path / "fio").measure(shape)
    assert result["tool"] == "fio" and result["concurrency"] == 2 and result["fsync"] is True
    # fio gives every job the same files: 2 jobs x 3 files of the mean size in whole 1 MiB blocks.
    assert result["files"] == 6 and abs(result["bytes"] - shape.total_bytes) <= 6 * MIB // 2
    assert result["write_bandwidth"] > 0 and result["read_bandwidth"] > 0
    assert result["fio"]["write"]["io_bytes"] == result["bytes"]
    assert not (tmp_path / "fio").exists()


def test_fractions_of_peak_use_the_steady_saves_and_the_loads():
    report = {
        "stats": {"bandwidth": {"median": 50.0}, "excluding_first": {"bandwidth": {"median": 80.0}}},
        "loads": [{"bandwidth": 100.0}, {"bandwidth": 300.0}, {"bandwidth": None}],
    }
    assert fractions_of_peak(report, {"write_bandwidth": 160.0, "read_bandwidth": 400.0}) == {
        "save_fraction_of_peak": 0.5, "load_fraction_of_peak": 0.5}
    single = {"stats": {"bandwidth": {"median": 50.0}, "excluding_first": None}, "load": {"bandwidth": 10.0}}
    assert fractions_of_peak(single, {"write_bandwidth": 100.0, "read_bandwidth": 0}) == {
        "save_fraction_of_peak": 0.5, "load_fraction_of_peak": None}
    assert fractions_of_peak(single, None) == {"save_fraction_of_peak": None, "load_fraction_of_peak": None}
    # Above the peak: no fraction (tests/unit/test_consistency_peak.py).
    assert fractions_of_peak(report, {"write_bandwidth": 60.0})["save_fraction_of_peak"] is None


def test_memory_watch_gives_the_exact_peak_of_each_operation(tmp_path):
    import numpy

    with EventRecorder(tmp_path, rank=0, memory=MemoryWatch()) as events:
        events.record(EventKind.SAVE_START, 1)
        buffer = numpy.ones(256 * MIB // 8)  # touched: resident
        del buffer
        events.record(EventKind.SAVE_BLOCK_END, 1)
        events.record(EventKind.SAVE_END, 1)
        events.record(EventKind.LOAD_START, 1)
        events.record(EventKind.LOAD_END, 1)
    recorded = list(read_event_files([tmp_path / "rank-0.jsonl"]))
    save_end = next(e for e in recorded if e.kind == EventKind.SAVE_END)
    load_end = next(e for e in recorded if e.kind == EventKind.LOAD_END)
    # The freed 256 MiB still counts for the save, not for the load that started after it.
    assert save_end.peak_rss_bytes - load_end.peak_rss_bytes > 200 * MIB
    assert all(e.peak_rss_bytes is None for e in recorded if e.kind in (EventKind.SAVE_START, EventKind.LOAD_START))

    report = ReportBuilder().add_all(recorded).build()
    assert report["saves"][0]["peak_rss_bytes"] == save_end.peak_rss_bytes
    assert report["saves"][0]["peak_rss_bytes_per_rank"]["max_rank"] == 0
    assert report["load"]["peak_rss_bytes"] == load_end.peak_rss_bytes


def test_an_event_can_carry_the_time_taken_before_its_fields(tmp_path):
    with EventRecorder(tmp_path, rank=3) as events:
        ended = events.now()
        events.record(EventKind.SAVE_END, 7, at=ended, bytes=42)
    line = json.loads((tmp_path / "rank-3.jsonl").read_text())
    assert (line["mono_ns"], line["wall_ns"]) == ended and line["bytes"] == 42
