"""The contract between a backend's launcher side and its ranks: worker.json.

A backend's spec is one dataclass (a `WorkerSpec` subclass, torch-free) that its launcher builds and its
ranks read back field for field: its own fields under its `section` of worker.json, beside the paths of
the run that the lifecycle adds (`RunPaths`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar


@dataclass(kw_only=True)
class RunPaths:
    """What the lifecycle adds to every worker.json once the run directory and checkpoint folder exist."""

    run_dir: str = ""
    """This run's directory (where a worker may leave what it measured beyond checkpoints)."""
    checkpoint_dir: str = ""
    """This run's checkpoint folder or URL (s3://bucket/prefix, file://...)."""
    events_dir: str = ""
    """Where each rank writes its events (events/rank-R.jsonl)."""
    integrity_dir: str = ""
    """Where ranks write their digests and verdicts."""
    warm_load: bool = False
    """Loads read from the page cache (--warm-load) instead of cold."""


@dataclass(kw_only=True)
class WorkerSpec(RunPaths):
    """A backend's worker spec: subclasses add their fields and name their `section`."""

    section: ClassVar[str]

    def to_json(self) -> dict:
        """The backend's part of worker.json (`Plan.spec[section]`): every field but the run's paths."""
        paths = {f.name for f in dataclasses.fields(RunPaths)}
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in paths}

    @classmethod
    def from_file(cls, path: str | Path):
        """The spec a rank reads: its section of worker.json and the run's paths."""
        data = json.loads(Path(path).read_text())
        paths = {f.name: data[f.name] for f in dataclasses.fields(RunPaths) if f.name in data}
        return cls(**data[cls.section], **paths)



