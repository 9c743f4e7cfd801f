"""The contract between a backend's launcher side and its ranks: worker.json.

A backend's spec is one dataclass (a `WorkerSpec` subclass, torch-free) that its launcher builds and its
ranks read back field for field: its own fields under its `section` of worker.json, beside the paths of
the run that the lifecycle adds (`RunPaths`). A runner whose ranks need nothing of their own (the comms
sweep, a framework's script) plans no spec: its worker.json holds the run's paths alone.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, TypeVar

from ckpt_bench.core.checkpoint_dir import iter_dir_name

SpecT = TypeVar("SpecT", bound="WorkerSpec")


@dataclass(kw_only=True)
class RunPaths:
    """What the lifecycle adds to every worker.json once the run directory and checkpoint folder exist."""

    run_dir: str = ""
    """This run's directory (where a worker may leave what it measured beyond checkpoints)."""
    checkpoint_dir: str | None = None
    """This run's checkpoint folder or URL (s3://bucket/prefix, file://...); None: the run saves nothing."""
    events_dir: str = ""
    """Where each rank writes its events (events/rank-R.jsonl)."""
    integrity_dir: str = ""
    """Where ranks write their digests and verdicts."""
    warm_load: bool = False
    """Loads read from the page cache (--warm-load) instead of cold."""

    def to_json(self) -> dict:
        """worker.json (without the run id the lifecycle adds)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(RunPaths)}

    @classmethod
    def from_file(cls, path: str | Path) -> RunPaths:
        """The run's paths of a worker.json."""
        return RunPaths(**_paths(json.loads(Path(path).read_text())))

    def iteration_dir(self, iteration: int) -> str:
        """Where checkpoint `iteration` goes. A string, not a Path: `s3://` and other URLs keep their double
        slash."""
        if self.checkpoint_dir is None:
            raise ValueError("worker.json names no checkpoint folder: this run saves nothing")
        return f"{self.checkpoint_dir.rstrip('/')}/{iter_dir_name(iteration)}"


@dataclass(kw_only=True)
class WorkerSpec(RunPaths):
    """A backend's worker spec: subclasses add their fields and name their `section`."""

    section: ClassVar[str]

    def section_json(self) -> dict:
        """The backend's part of worker.json: every field but the run's paths."""
        paths = {f.name for f in dataclasses.fields(RunPaths)}
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in paths}

    def to_json(self) -> dict:
        return {self.section: self.section_json(), **super().to_json()}

    @classmethod
    def from_file(cls: type[SpecT], path: str | Path) -> SpecT:
        """The spec a rank reads: its section of worker.json and the run's paths."""
        data = json.loads(Path(path).read_text())
        return cls(**data[cls.section], **_paths(data))


def _paths(data: dict) -> dict:
    return {f.name: data[f.name] for f in dataclasses.fields(RunPaths) if f.name in data}
