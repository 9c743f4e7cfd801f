"""The worker contract: a rank's context from torchrun's environment, the cold-load rule, timed calls."""

import socket

import pytest
import torch
import torch.distributed as dist

from ckpt_bench.core.events import EventKind, EventRecorder, event_files, read_event_files
from ckpt_bench.worker import entry as worker_entry
from ckpt_bench.worker.entry import WorkerContext, timed


def test_timed_records_the_start_and_only_a_failed_end(tmp_path):
    with EventRecorder(tmp_path, 0) as recorder:
        with timed(recorder, EventKind.SAVE_START, EventKind.SAVE_END, 1, path="/c/iter_0000001",
                   extra={"async": True}):
            pass  # success: the caller records the end (after the block, or on an async writer)
        with pytest.raises(OSError), timed(recorder, EventKind.LOAD_START, EventKind.LOAD_END, 2, path="/c/2"):
            raise OSError("disk full")
    events = list(read_event_files(event_files(tmp_path)))
    assert [(e.kind, e.iteration, e.path) for e in events] == [
        (EventKind.SAVE_START, 1, "/c/iter_0000001"), (EventKind.LOAD_START, 2, "/c/2"),
        (EventKind.LOAD_END, 2, "/c/2")]
    assert events[0].extra == {"async": True} and events[2].extra == {}
    assert [e.error for e in events] == [None, None, "OSError: disk full"]


def test_a_cold_load_evicts_once_per_host(monkeypatch):
    evicted = []
    monkeypatch.setattr(worker_entry, "evict_from_page_cache", evicted.append)
    first, second = WorkerContext(rank=2, local_rank=0, world_size=4), WorkerContext(rank=3, local_rank=1, world_size=4)
    first.evict("/ckpt/a", warm=False)
    second.evict("/ckpt/b", warm=False)  # its host's local rank 0 does it
    first.evict("/ckpt/c", warm=True)
    first.evict(None, warm=False)  # remote storage: no page cache here
    assert evicted == ["/ckpt/a"]


def test_join_on_gloo_uses_the_cpu(monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(name, value)
    context = WorkerContext.join("gloo")
    try:
        assert (context.rank, context.local_rank, context.world_size) == (0, 0, 1)
        assert context.device == torch.device("cpu") and dist.get_backend() == "gloo"
    finally:
        dist.destroy_process_group()
