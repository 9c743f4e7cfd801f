"""The PyTorch DCP worker: one rank of a save pass or a load pass, started by torchrun.

    python -m torch.distributed.run --nproc-per-node N -m bench.dcp.worker --spec SPEC.json --phase save|load

save: build the named model's state (replicated on every rank, as under DDP) and save it `save_calls`
      times with `torch.distributed.checkpoint.save` (or `async_save`), call K into `iter_000000K/`
      of the run's folder or S3 prefix. Before each save the state changes a little (one small
      tensor is incremented) so each checkpoint is distinct, and its digests are written for the
      load pass; neither is timed.
load: load *every* saved checkpoint, oldest first, into a zeroed state of the same shapes (for a
      local folder, evicted from the page cache first unless `warm_load`), and compare each with
      the digests written when it was saved. Loading each one (not only the last) gives as many
      load samples as save samples and checks that each iteration holds its own state.

Timing (bench.events), per rank. Before each save or load, untimed: the storage writer/reader is
built (for S3 that creates the client, as s3torchbenchmarking does) and a barrier lines the ranks up.
  sync   SAVE_START -> `save` returns: SAVE_BLOCK_END and SAVE_END.
  async  SAVE_START -> `async_save` returns its future: SAVE_BLOCK_END (the state is staged, training
         could go on) -> the future completes: SAVE_END, recorded by the future's done-callback, so
         the time is when the write finished, not when we next looked. The next save waits for it.

Exit codes (bench.worker_entry): 0 ok, 3 a checkpoint loaded with different values, 1 anything else.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from bench import integrity
from bench.checkpoint_dir import evict_from_page_cache, iter_dir_name
from bench.dcp.models import build_state
from bench.events import EventKind, EventRecorder
from bench.storage import s3_client_config
from bench.worker_entry import worker_main


@dataclass
class WorkerSpec:
    """worker.json as the launcher writes it: the DCP settings plus the run's paths."""

    model: str
    dtype: str
    save_calls: int
    thread_count: int
    sync_files: bool
    async_save: bool
    dist_backend: str
    storage: dict  # bench.storage describe(): {"storage": "disk"|"s3", s3 settings}
    seed: int
    checkpoint_dir: str  # local folder or s3://bucket/prefix of this run
    events_dir: str
    integrity_dir: str
    warm_load: bool

    @classmethod
    def from_file(cls, path: str) -> WorkerSpec:
        data = json.loads(Path(path).read_text())
        return cls(**data["dcp"], **{k: data[k] for k in ("checkpoint_dir", "events_dir", "integrity_dir",
                                                            "warm_load")})

    @property
    def on_s3(self) -> bool:
        return self.storage["storage"] == "s3"

    def location(self, call: int) -> str:
        return f"{self.checkpoint_dir.rstrip('/')}/{iter_dir_name(call)}"

    def writer(self, call: int):
        if self.on_s3:
            from s3torchconnector.dcp import S3StorageWriter

            return S3StorageWriter(self.storage["s3_region"], self.location(call),
                                   s3client_config=s3_client_config(self.storage), thread_count=self.thread_count)
        return dcp.FileSystemWriter(self.location(call), thread_count=self.thread_count, sync_files=self.sync_files)

    def reader(self, call: int):
        if self.on_s3:
            from s3torchconnector.dcp import S3StorageReader

            return S3StorageReader(self.storage["s3_region"], self.location(call),
                                   s3client_config=s3_client_config(self.storage))
        return dcp.FileSystemReader(self.location(call))


def _device(spec: WorkerSpec) -> torch.device:
    if spec.dist_backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def _log(rank: int, message: str) -> None:
    if rank == 0:
        print(message, flush=True)


def _perturb(state: dict, call: int) -> None:
    """Make checkpoint `call` differ from the others: its smallest tensor gets `call` added."""
    smallest = min(state, key=lambda name: state[name].numel())
    state[smallest].add_(call)


def _save_async(state: dict, writer, call: int, events: EventRecorder, path: str) -> None:
    future = dcp.async_save(state, storage_writer=writer)
    events.record(EventKind.SAVE_BLOCK_END, call, path=path)
    finished = threading.Event()

    def on_done(done) -> None:
        # Runs in the thread that completed the write: the moment the checkpoint is on storage.
        error = done.exception()
        events.record(EventKind.SAVE_END, call, path=path,
                      error=f"{type(error).__name__}: {error}" if error else None)
        finished.set()

    future.add_done_callback(on_done)
    finished.wait()
    future.result()  # raises the writer's error, if any


def save_pass(spec: WorkerSpec, events: EventRecorder, rank: int) -> None:
    state = build_state(spec.model, spec.dtype, seed=spec.seed, device=_device(spec))
    for call in range(1, spec.save_calls + 1):
        _perturb(state, call)
        integrity.write_manifest(spec.integrity_dir, call, rank, integrity.state_digests(state))
        path = spec.location(call)
        writer = spec.writer(call)  # not timed: building it creates the S3 client (as s3torchbenchmarking)
        dist.barrier()
        _log(rank, f"saving checkpoint {call}/{spec.save_calls} to {path}")
        events.record(EventKind.SAVE_START, call, path=path)
        try:
            if spec.async_save:
                _save_async(state, writer, call, events, path)
            else:
                dcp.save(state, storage_writer=writer)
                events.record(EventKind.SAVE_BLOCK_END, call, path=path)
                events.record(EventKind.SAVE_END, call, path=path)
        except Exception as error:
            if not spec.async_save:
                events.record(EventKind.SAVE_END, call, path=path, error=f"{type(error).__name__}: {error}")
            raise
        _log(rank, f"saved checkpoint {call}/{spec.save_calls}")


def load_pass(spec: WorkerSpec, events: EventRecorder, rank: int) -> dict:
    """Load every saved checkpoint and return this rank's verdict over all of them."""
    state = build_state(spec.model, spec.dtype, device=_device(spec), zeros=True)
    verdicts = {}
    for call in range(1, spec.save_calls + 1):
        path = spec.location(call)
        for tensor in state.values():
            tensor.zero_()
        if not spec.on_s3 and not spec.warm_load and int(os.environ.get("LOCAL_RANK", "0")) == 0:
            evict_from_page_cache(path)  # once per host: the ranks of a host share its page cache
        reader = spec.reader(call)
        dist.barrier()
        _log(rank, f"loading checkpoint {call}/{spec.save_calls} from {path}")
        events.record(EventKind.LOAD_START, call, path=path)
        try:
            dcp.load(state, storage_reader=reader)
        except Exception as error:
            events.record(EventKind.LOAD_END, call, path=path, error=f"{type(error).__name__}: {error}")
            raise
        events.record(EventKind.LOAD_END, call, path=path)
        expected = integrity.read_manifest(spec.integrity_dir, call, rank)
        verdicts[call] = integrity.compare(expected, integrity.state_digests(state))
        _log(rank, f"loaded checkpoint {call}/{spec.save_calls}: verified={verdicts[call]['verified']}")
    return integrity.combine_calls([verdicts[call] for call in sorted(verdicts)])


def run(spec: WorkerSpec, phase: str) -> None:
    dist.init_process_group(spec.dist_backend)
    rank = dist.get_rank()
    with EventRecorder(spec.events_dir, rank) as events:
        if phase == "save":
            save_pass(spec, events, rank)
        else:
            integrity.publish_verdict(spec.integrity_dir, rank, spec.save_calls, load_pass(spec, events, rank))


def main(argv: list[str] | None = None) -> int:
    return worker_main(__doc__, WorkerSpec.from_file, run, argv)


if __name__ == "__main__":
    sys.exit(main())
