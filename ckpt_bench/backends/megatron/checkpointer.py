"""Saves and loads with events, integrity manifests and Megatron-LM's log lines around them.

Timing: ranks meet at a barrier (not timed), then each records SAVE_START, builds its state dict
and saves -- the same span as Megatron-LM's `save-checkpoint` timer. SAVE_BLOCK_END is recorded
when the save call hands control back to training; SAVE_END when this rank's data are on storage.
For a synchronous save those are the same moment.

For an async save the writer records SAVE_WRITTEN itself: the request's `async_fn` (the function
megatron-core runs in its forked or spawned writer process) is wrapped in `RecordWritten`
(worker/megatron_phases.py), which records it the moment the writing returns, with the writer's phases
(write | fsync). The checkpoint is complete, and SAVE_END recorded, only when its finalize functions
(the .metadata file, metadata.json, the tracker) have run: megatron-core runs them in this process at
the first `maybe_finalize` that finds every rank's writer done, as Megatron-LM does at its next
iteration. The wait for that is the save's `awaiting_finalize`: until then the checkpoint cannot be
loaded. Write errors reach megatron-core's finalize step (the writer passes them on through a queue
rather than raising); if finalize raises, SAVE_END with `error` is recorded for that iteration.

Phases (ckpt_bench.worker.phases): the format marks megatron-core's steps (formats.py). An async save's
blocking part ends with handing the request over (`schedule`: megatron-core stages the state in this
process, then forks its writer; or queues it to the persistent writer, which stages it while this process
waits); its writer's part is write | fsync, its finalize's on this process `finalize`.

Integrity: right before SAVE_START each rank digests the state it is about to hand to the save
(the local data of every sharded tensor for torch_dist; the file's state dict for torch). An async
save snapshots the tensors before training resumes (megatron-core's preload step), so that digest
is of the bytes written. After a load, the same state dict is rebuilt from the loaded model and
optimizer and digested, so what is compared is what training would resume from.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from megatron.core import parallel_state
from megatron.core.dist_checkpointing.dict_utils import dict_list_map_outplace
from megatron.core.dist_checkpointing.mapping import LocalNonpersistentObject, ShardedBase
from megatron.core.dist_checkpointing.strategies.async_utils import AsyncRequest

from ckpt_bench.backends.megatron import megatron_log
from ckpt_bench.backends.megatron.formats import TorchDistFormat, TorchFormat, checkpoint_path, rank_written_bytes
from ckpt_bench.backends.megatron.global_checksums import global_checksums
from ckpt_bench.core import megatron_release, progress
from ckpt_bench.core.checkpoint_dir import ITER_DIR, TRACKER_FILE, iter_dir_name
from ckpt_bench.core.events import EventKind, EventRecorder, Phase
from ckpt_bench.worker import integrity
from ckpt_bench.worker.entry import WorkerContext, error_text, load_returned, save_returned, timed
from ckpt_bench.worker.megatron_phases import RecordWritten, mark_finalize
from ckpt_bench.worker.phases import PhaseClock

GLOBAL_MANIFEST = "global.json"  # per logical tensor, every rank's shards together (global_checksums)


def local_state_digests(state_dict: dict) -> dict[str, str]:
    """Digests of the tensors in a (sharded) state dict: for sharded entries, their local data."""

    def local_data(value):
        if isinstance(value, ShardedBase):
            return value.data
        if isinstance(value, LocalNonpersistentObject):
            return None  # never saved
        return value

    return integrity.state_digests(dict_list_map_outplace(local_data, state_dict))


class Checkpointer:
    def __init__(
        self,
        args: argparse.Namespace,
        checkpoint_format: TorchDistFormat | TorchFormat,
        events: EventRecorder,
        integrity_dir: str,
        context: WorkerContext,
        layout_independent: bool = False,
        local_path: Callable[[str], str | None] = lambda path: path,
        root: str | None = None,
        tier: str = "persistent",
    ):
        self.args = args
        self.local_path = local_path  # a checkpoint's folder on this host's disk (None: remote), for eviction
        # Where this tier's iteration folders and tracker go: --save, or Megatron-LM's non-persistent folder.
        self.root = root or args.save
        self.tier = tier
        self.deletions: list[dict] = []  # old checkpoints removed after a save (retention), timed
        # The load may use another layout than the save: check whole logical tensors (global_checksums).
        self.layout_independent = layout_independent
        self.format = checkpoint_format
        self.events = events
        self.integrity_dir = integrity_dir
        self.context = context
        self._async_queue = (megatron_release.async_calls_queue(args.async_strategy, args.use_persistent_ckpt_worker)
                             if args.async_save else None)
        self._in_flight: deque[int] = deque()  # iterations of scheduled, not yet finalized async saves
        self._finalizing = PhaseClock()  # an async save's finalize, run here by `maybe_finalize`
        self._position = (
            (parallel_state.get_tensor_model_parallel_rank(), args.tensor_model_parallel_size),
            (parallel_state.get_pipeline_model_parallel_rank(), args.pipeline_model_parallel_size),
        )

    def _event_fields(self, directory: str, **extra) -> dict:
        return {"path": directory, "extra": {"format": self.format.name, "async": bool(self.args.async_save),
                                             "tier": self.tier, **extra}}

    # ---- save -------------------------------------------------------------------------------

    def save(self, iteration: int) -> None:
        directory = os.path.join(self.root, iter_dir_name(iteration))
        if self.tier == "non_persistent_global":
            self._remove_older(keep=1)
        # Untimed, as in the bare call: the state dict the save consumes (digested first: reading its
        # local data changes nothing), and the folder.
        state_dict = self.format.state_dict(iteration)
        if self.format.writes:
            digests = local_state_digests(state_dict)
            integrity.write_manifest(self.integrity_dir, iteration, self.context.rank, digests)
        if self.layout_independent:  # applies the factories in place: a state dict of its own
            checksums = global_checksums(self.format.state_dict(iteration))
            if self.context.rank == 0:
                self._global_manifest(iteration).write_text(json.dumps(checksums, indent=1))
        megatron_log.print_rank_0(megatron_log.saving_line(iteration, self.root, self.format.name))
        self.format.prepare(directory)
        torch.distributed.barrier()
        progress.say_once(progress.FIRST_SAVE)

        with timed(self.events, EventKind.SAVE_START, EventKind.SAVE_END, iteration, phases=self.format.phases,
                   first=self.format.first_save_phase, **self._event_fields(directory)):
            request = self.format.save(directory, state_dict)
            if request is not None:
                self._schedule(request, iteration, directory)
        save_returned(self.events, iteration, directory,
                      (lambda: {"bytes": self.format.written_bytes(directory)}) if request is None else None,
                      phases=self.format.phases)
        if request is None:
            torch.distributed.barrier()  # every rank's part is written before the tracker names it
            self._finalize_iteration(iteration)
        else:
            megatron_log.print_rank_0(megatron_log.scheduled_line(iteration, self.root))

    def _schedule(self, request: AsyncRequest, iteration: int, directory: str) -> None:
        rank = self.context.rank
        if request.async_fn is None:  # this rank has no shard to write: its part is written now
            self.events.record(EventKind.SAVE_WRITTEN, iteration, path=directory, bytes=0)
        else:
            request = request._replace(async_fn=RecordWritten(request.async_fn, str(self.events.path.parent), rank,
                                                              iteration, directory,
                                                              partial(rank_written_bytes, directory, rank)))
        request = mark_finalize(request, self._finalizing)
        request.add_finalize_fn(partial(self._finalized, iteration, directory))
        self._in_flight.append(iteration)
        if self.args.use_persistent_ckpt_worker:
            # Queued to the writer process, which stages the state (after its previous save) while this
            # process waits: one phase here. A forked writer's staging runs here, marked by the format.
            self.format.phases.begin(Phase.SCHEDULE)
        self._async_queue.schedule_async_request(request)

    def _finalize_iteration(self, iteration: int) -> None:
        """Megatron-LM's `iter_finalize_fn`: the checkpoint is complete; name it in the tracker (a local
        checkpoint has none: its manager finds the latest). With `save_retain_interval`, the checkpoint the
        tracker named before is deleted unless its iteration is a multiple of it."""
        if self._in_flight and self._in_flight[0] == iteration:
            self._in_flight.popleft()
        if self.context.rank == 0 and self.format.tracked:
            previous = self.format.latest(self.root)
            (checkpoint_path(self.root) / TRACKER_FILE).write_text(str(iteration))
            retain = self.args.save_retain_interval
            if retain and previous is not None and 0 < previous != iteration and previous % retain:
                self._delete(previous, iteration, "save_retain_interval")
        megatron_log.print_rank_0(megatron_log.saved_line(iteration, self.root, *self._position))

    def _delete(self, old: int, iteration: int, why: str) -> None:
        """Rank 0 removes the checkpoint of iteration `old` after saving `iteration`, timed (a storage cost of
        that save; Megatron-LM does it in a background thread, as its retention and non-persistent clean-up do)."""
        folder = os.path.join(self.root, iter_dir_name(old))
        started = time.perf_counter()
        shutil.rmtree(folder)
        self.deletions.append({"after_save": iteration, "deleted": old, "tier": self.tier, "rule": why,
                               "seconds": round(time.perf_counter() - started, 6)})
        megatron_log.print_rank_0(f"  successfully deleted checkpoint from iteration {old:7d} at {self.root}")

    def _remove_older(self, keep: int) -> None:
        """Megatron-LM's `cleanup_old_non_persistent_checkpoint` before a non-persistent save: rank 0 removes
        every iteration folder of the tier but the newest `keep`."""
        if self.context.rank != 0 or not os.path.isdir(self.root):
            return
        iterations = sorted(int(match[1]) for name in os.listdir(self.root) if (match := ITER_DIR.match(name)))
        upcoming = iterations[-1] if iterations else None
        for old in iterations[:-keep]:
            self._delete(old, upcoming, "non-persistent clean-up (the newest kept)")

    def _finalized(self, iteration: int, directory: str) -> None:
        """An async save's last finalize function: the tracker names it, and it is complete (SAVE_END, with
        the phases of its finalize)."""
        self._finalize_iteration(iteration)
        done = self.events.now()
        # Its peak memory stays the one up to the block end: the training iterations since are not the save's.
        self.events.record(EventKind.SAVE_END, iteration, path=directory, at=done,
                           phases=self._finalizing.close(done[0]), peak_rss_bytes=None, peak_device_bytes=None)

    def maybe_finalize(self, blocking: bool = False) -> None:
        """Megatron-LM's `maybe_finalize_async_save`; call on every rank every iteration."""
        if self._async_queue is None:
            return
        try:
            self._async_queue.maybe_finalize_async_calls(blocking=blocking)
        except Exception as error:
            iteration = self._in_flight[0] if self._in_flight else None
            self.events.record(EventKind.SAVE_END, iteration, error=error_text(error))
            raise

    def close(self) -> None:
        if self._async_queue is not None:
            self.maybe_finalize(blocking=True)
            self._async_queue.close()

    # ---- load -------------------------------------------------------------------------------

    def latest(self) -> int | None:
        """The iteration of this tier's newest checkpoint, or None."""
        return self.format.latest(self.root)

    def load(self, warm: bool, reason: str | None = None) -> int:
        """Loads the latest checkpoint of this tier into the model and optimizer; returns its iteration. `reason`:
        why this tier's, recorded with the load (`tier_reason`)."""
        iteration = self.latest()
        if iteration is None:
            raise FileNotFoundError(f"no checkpoint with an iteration in {self.root}")
        directory = os.path.join(self.root, iter_dir_name(iteration))
        self.context.evict(self.local_path(directory if self.format.tracked else self.root), warm)
        torch.distributed.barrier()

        megatron_log.print_rank_0(megatron_log.loading_line(self.root, iteration, self.format.name))
        reasons = {} if reason is None else {"tier_reason": reason}
        if self.format.load_reads_what_save_wrote:
            reasons["reads_what_its_save_wrote"] = True
        with timed(self.events, EventKind.LOAD_START, EventKind.LOAD_END, iteration, phases=self.format.phases,
                   first=self.format.first_load_phase, **self._event_fields(directory, **reasons)):
            nbytes = self.format.load(directory, iteration)
        load_returned(self.events, iteration, directory, self.format.phases, bytes=nbytes)
        megatron_log.print_rank_0(megatron_log.loaded_line(self.root, iteration, *self._position))
        return iteration

    def verify(self, iteration: int) -> dict:
        """Compares the loaded state with what was saved and writes this rank's verdict: per shard with
        the manifest of the rank that saved it, or, after a load on another layout, per logical tensor.
        Collective: if any rank's state differs, every rank raises, naming the first."""
        if self.layout_independent:
            expected = json.loads(self._global_manifest(iteration).read_text())
            actual = global_checksums(self.format.state_dict(iteration))
        else:
            expected = integrity.read_manifest(self.integrity_dir, iteration, self.format.manifest_rank)
            actual = local_state_digests(self.format.state_dict(iteration))
        verdict = integrity.compare(expected, actual)
        return integrity.publish_verdict(self.integrity_dir, self.context.rank, iteration, verdict)

    def _global_manifest(self, iteration: int) -> Path:
        return integrity.manifest_path(self.integrity_dir, iteration, 0).with_name(GLOBAL_MANIFEST)
