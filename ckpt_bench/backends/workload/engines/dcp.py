"""`--engine dcp`: PyTorch Distributed Checkpoint of DLIO's tensors.

Every tensor keeps a name unique across the job (its DLIO file and key), so each rank writes exactly its
own share, as a sharded FSDP state is written: `thread_count` writer threads per rank, one `.distcp`
file per thread, and the coordinator's `.metadata`. Loads read in place into the rank's tensors.
"""

from __future__ import annotations

import torch
import torch.distributed.checkpoint as dcp

from ckpt_bench.backends.dcp.phases import mark_load, mark_save
from ckpt_bench.backends.workload.engines.base import Engine, Pending, RankState


class DcpEngine(Engine):
    def prepare(self, state: RankState, location: str) -> None:
        # Untimed, as s3torchbenchmarking does: building a writer or reader creates the S3 client.
        self._writer = self.storage.dcp_writer(location, self.spec.thread_count, self.spec.sync_files)
        self._reader = self.storage.dcp_reader(location)
        background = self.background if self.spec.async_save else self.phases
        self._save_planner = mark_save(self._writer, self.spec.sync_files, self.phases, background)
        self._load_planner = mark_load(self._reader, self.phases)

    def save(self, state: RankState, location: str) -> Pending | None:
        if not self.spec.async_save:
            dcp.save(state.tensors, storage_writer=self._writer, planner=self._save_planner)
            return None
        return dcp.async_save(state.tensors, storage_writer=self._writer, planner=self._save_planner).result

    def load(self, state: RankState, location: str) -> dict[str, torch.Tensor]:
        dcp.load(state.tensors, storage_reader=self._reader, planner=self._load_planner)
        return state.tensors


ENGINE = DcpEngine
