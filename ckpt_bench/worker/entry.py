"""The contract every torchrun worker shares, so that each backend's worker holds only its own calls.

    python -m torch.distributed.run ... -m bench.<backend>.worker --spec worker.json --phase save|load

* `worker_main`: arguments and exit codes (`exit_process` ends the rank's process with one). 0 ok; 3 the
  checkpoint loaded but differs from what was saved (ckpt_bench.worker.integrity.VerificationFailed); 1
  anything else, with the traceback and a last line `[rank R] <phase> failed: ...` on stderr, which the
  launcher shows with the rank's log tail.
* `WorkerContext`: this rank as torchrun started it -- its ranks, its device and process group (nccl
  with one GPU per local rank, gloo on the CPU), its event `recorder` (each operation's peak memory
  included: ckpt_bench.core.memory), and the cold-load rule (`evict`).
* `start_together`: the untimed start of a timed save or load that does not train before it: the
  cyclic garbage collected (and frozen) now, then the barrier.
* `timed`: the span of one checkpoint call in events -- its start event, and its end event with the
  error if the call raises. A successful call's end events are the caller's: a synchronous save or a
  load records them right after the block (`save_returned`, `load_returned`), an async save's writer
  records SAVE_END when it finishes. Each end event carries the phases of its span
  (ckpt_bench.worker.phases).
"""

from __future__ import annotations

import argparse
import gc
import logging
import multiprocessing.util
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import NoReturn, TypeVar

import torch
import torch.distributed as dist

from ckpt_bench.core import progress
from ckpt_bench.core.checkpoint_dir import evict_from_page_cache
from ckpt_bench.core.events import EventKind, EventRecorder, Phase
from ckpt_bench.core.memory import MemoryWatch
from ckpt_bench.worker.integrity import EXIT_VERIFICATION_FAILED, VerificationFailed
from ckpt_bench.worker.phases import PhaseClock

Spec = TypeVar("Spec")


ERROR_TEXT_CHARS = 500


def error_text(error: BaseException) -> str:
    """How a failed checkpoint call is named in its end event's `error`: one line. DCP's CheckpointException
    prints every rank's traceback; its first rank's own error is what it means."""
    failures = getattr(error, "failures", None)
    if isinstance(failures, dict) and failures:
        rank = min(failures)
        cause = failures[rank][0] if isinstance(failures[rank], tuple) else failures[rank]
        return f"{type(error).__name__} on ranks {sorted(failures)}: rank {rank}: {error_text(cause)}"
    return f"{type(error).__name__}: {' '.join(str(error).split())}"[:ERROR_TEXT_CHARS]


@contextmanager
def timed(recorder: EventRecorder, start_kind: EventKind, end_kind: EventKind, iteration: int | None,
          path: str | None = None, phases: PhaseClock | None = None, first: Phase = Phase.STATE_DICT,
          **fields) -> Iterator[None]:
    """Record `start_kind` (with `path` and `fields`, e.g. `extra`), run the block; if it raises, record
    `end_kind` with `path` and the error, and re-raise. Only the block is timed: a barrier lining the
    ranks up belongs before it. `phases`: opened at the start event's stamp in phase `first`."""
    started = recorder.record(start_kind, iteration, path=path, **fields)
    if phases is not None:
        phases.open(first, started.mono_ns)
    try:
        yield
    except BaseException as error:
        recorder.record(end_kind, iteration, path=path, error=error_text(error))
        raise


def save_returned(recorder: EventRecorder, iteration: int | None, path: str | None,
                  end_fields: Callable[[], dict] | None, phases: PhaseClock | None = None) -> None:
    """The save call returned: SAVE_BLOCK_END now, with the phases of `phases` up to it. A save that is
    complete when its call returns (`end_fields` given) ends at that same time, its SAVE_END holding
    `end_fields()`, computed after the stamp (counting the bytes is ours, never the save's); None: its write
    goes on and records its own SAVE_END."""
    returned = recorder.now()
    spans = phases.close(returned[0]) if phases is not None else ()
    recorder.record(EventKind.SAVE_BLOCK_END, iteration, path=path, at=returned, phases=spans)
    if end_fields is not None:
        recorder.record(EventKind.SAVE_END, iteration, path=path, at=returned, **end_fields())


def load_returned(recorder: EventRecorder, iteration: int | None, path: str | None,
                  phases: PhaseClock | None = None, **fields) -> None:
    """The load call returned: LOAD_END now, with the phases of `phases` up to it and `fields`."""
    returned = recorder.now()
    spans = phases.close(returned[0]) if phases is not None else ()
    recorder.record(EventKind.LOAD_END, iteration, path=path, at=returned, phases=spans, **fields)


@dataclass(frozen=True)
class WorkerContext:
    """This rank, from torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE)."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @classmethod
    def from_env(cls) -> WorkerContext:
        """Without joining a process group: for a framework that makes its own (Lightning's strategy)."""
        return cls(int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0")),
                   int(os.environ.get("WORLD_SIZE", "1")))

    @classmethod
    def join(cls, dist_backend: str | None = None) -> WorkerContext:
        """Join the process group: nccl on `cuda:LOCAL_RANK` (one GPU per local rank), gloo on the CPU;
        no backend named: nccl where CUDA is available, else gloo."""
        context = cls.from_env()
        backend = dist_backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":
            device = torch.device("cuda", context.local_rank)
            torch.cuda.set_device(device)
            dist.init_process_group(backend, device_id=device)
        else:
            device = torch.device("cpu")
            dist.init_process_group(backend)
        return replace(context, device=device)

    def recorder(self, events_dir: str) -> EventRecorder:
        """This rank's event recorder, with each operation's peak memory in its end events."""
        return EventRecorder(events_dir, self.rank, memory=MemoryWatch(self.device))

    def evict(self, path: str | None, warm: bool) -> None:
        """Before a cold load: drop `path` from the page cache, once per host (its ranks share the cache).
        Nothing for a warm load, or a `path` of None (remote storage has no page cache here)."""
        if path is not None and not warm and self.local_rank == 0:
            progress.say(f"evicting {path} from the page cache (a cold load): each file fsynced and dropped")
            evict_from_page_cache(path)


def start_together() -> None:
    """Untimed, right before a timed save or load of a worker that does not train: collect Python's cyclic
    garbage now and freeze what survives, then the barrier the ranks leave together. Python's automatic full
    collection scans every object of a process that imported torch (100-130 ms a rank here) whenever enough
    have been allocated: inside a timed save it is a pause of one rank that the others wait for in the next
    collective (a 0.12 s longer fifth save of the DCP worker, every run). Training jobs keep it out of their
    steps the same way (Megatron-LM's --manual-gc, torchtitan's gc_freq)."""
    gc.collect()
    gc.freeze()
    dist.barrier()


def exit_process(code: int) -> NoReturn:
    """End a rank's process with `code`. A rank that succeeded ends without Python's finalization, its work
    recorded and closed: a process group that a framework keeps past `destroy_process_group` (megatron-core's
    groups, a device mesh) still has gloo worker threads then; one that is freeing a finished collective needs
    the GIL for its tensors, the finalizing interpreter ends that thread, and the C++ runtime aborts the process
    ("terminate called without an active exception", SIGABRT) after a verified load -- 4 times in ~10 suite
    runs on this loaded 2-core VM; gdb on the core: ProcessGroupGloo::runLoop, ~AsyncBarrierWork, decref,
    take_gil, pthread_exit. A rank that failed exits the usual way: torchrun names the first failure by when it
    sees each rank end (in whole seconds, ties to the lowest rank), and a rank that failed because a peer died
    must not end before that peer is seen.
    Before it ends, multiprocessing's exit runs as at a normal exit (`util._exit_function`, which Python's atexit
    would call: managers shut down, child processes joined, its temporary folder removed): megatron-core keeps a
    `multiprocessing.Manager` whose server removes its `/tmp/pymp-*` folder only when shut down, and a rank's shared
    memory arenas have a folder of their own; every run left one or two a rank."""
    if code != 0:
        sys.exit(code)
    multiprocessing.util._exit_function()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def worker_main(
    description: str,
    load_spec: Callable[[str], Spec],
    run: Callable[[Spec, str], None],
    argv: list[str] | None = None,
) -> int:
    """Parse `--spec/--phase`, call `run(load_spec(spec_path), phase)`, map its outcome to an exit code.
    A spec that cannot be read fails like any other error: one line naming the rank, exit 1."""
    parser = argparse.ArgumentParser(description=description.split("\n\n")[0])
    parser.add_argument("--spec", required=True, help="JSON spec written by the launcher")
    parser.add_argument("--phase", required=True, choices=("save", "load"))
    options = parser.parse_args(argv)
    rank = os.environ.get("RANK", "?")
    try:
        run(load_spec(options.spec), options.phase)
        # Every rank reaches teardown together: a rank that destroys its process group while a peer
        # is still inside a collective (e.g. Lightning's own teardown) can abort at exit.
        if dist.is_initialized():
            dist.barrier()
    except VerificationFailed as error:
        print(f"[rank {rank}] verification failed: {error}", file=sys.stderr, flush=True)
        return EXIT_VERIFICATION_FAILED
    except Exception as error:
        traceback.print_exc()
        print(f"[rank {rank}] {options.phase} failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0
