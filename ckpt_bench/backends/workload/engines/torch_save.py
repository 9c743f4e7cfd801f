"""`--engine torch-save`: DLIO's own checkpointing, as MLPerf Storage runs it.

Each rank `torch.save`s each of its files (DLIO's names and dict structure) one after the other, fsynced
when `sync_files` is on (DLIO itself never fsyncs: workload.DLIO_APPLIES_FSYNC), and `torch.load`s them.
"""

from __future__ import annotations

import torch

from ckpt_bench.backends.workload.engines.base import Engine, RankState
from ckpt_bench.core.events import Phase
from ckpt_bench.layout.dlio_layout import dlio_tensor_name
from ckpt_bench.worker.integrity import iter_tensors


class TorchSaveEngine(Engine):
    # Phases, per file: write (torch.save serializing into the storage's stream), fsync (the stream's close,
    # with sync_files); a load's read (torch.load).
    first_save_phase = Phase.WRITE
    first_load_phase = Phase.READ

    def allocate_for_load(self) -> RankState:
        """Only the file list: `torch.load` allocates what it reads, as DLIO's loads do."""
        return RankState({}, [(file, {}) for file in self.share.files])

    def save(self, state: RankState, location: str) -> None:
        for file, tree in state.files:
            with self.storage.file_writer(f"{location}/{file.name}", self.spec.sync_files) as stream:
                self.phases.begin(Phase.WRITE)
                torch.save(tree, stream)
                if self.spec.sync_files:
                    self.phases.begin(Phase.FSYNC)

    def load(self, state: RankState, location: str) -> dict[str, torch.Tensor]:
        loaded: dict[str, torch.Tensor] = {}
        for file, _ in state.files:
            with self.storage.file_reader(f"{location}/{file.name}") as stream:
                tree = torch.load(stream, map_location=self.context.device, weights_only=True)
            loaded.update((dlio_tensor_name(file, name), tensor) for name, tensor in iter_tensors(tree))
        return loaded


ENGINE = TorchSaveEngine
