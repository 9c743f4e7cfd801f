"""run.json: what a run recorded besides its events, from which its report can be rebuilt at any time
(`ckpt_bench.report.assembly.run_report`). The lifecycle fills it step by step; every reader gets it typed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunFacts:
    """One run's facts. Field defaults are what a run.json without the key means."""

    backend: str | None = None
    """The runner (`--backend` or `--framework` name)."""
    checkpoints: bool = True
    """Whether its passes save checkpoints (the comms preflight does not: its report is its measurements)."""
    verifies: bool = True
    """Whether its load pass checks what it loaded (a framework's does not)."""
    run_info: dict[str, Any] = field(default_factory=dict)
    """The report's configuration keys and the backend's own (`launcher.run_info.RunInfo.to_json()`, `save`
    filled in)."""
    checkpoint_dir: str | None = None
    """The run's checkpoint folder or URL, once created."""
    storage: dict[str, Any] | None = None
    """`CheckpointStorage.describe()`: how to reach the checkpoints again (a resumed sweep removes those of
    a killed attempt)."""
    load_cache: str | None = None
    """"cold" or "warm": how the loads read."""
    environment: dict[str, Any] | None = None
    """The host and software versions (`core.environment`)."""
    passes: list[dict[str, Any]] = field(default_factory=list)
    """Every node's pass results, in order (`launcher.torchrun.PassSummary.to_json()`)."""
    notes: list[str] = field(default_factory=list)
    """What the report should say about the run."""
    launcher: dict[str, Any] = field(default_factory=dict)
    """{pid, host, finished}: finished stays False in a run.json whose launcher never completed it."""
    interrupted: dict[str, Any] | None = None
    """{signal, exit_code, pass} after Ctrl-C or SIGTERM."""
    folder_sizes: dict[int, int] | None = None
    """Iteration -> bytes written, measured before anything was removed; None when it could not be."""
    storage_baseline_asked: bool = False
    """--storage-baseline was given: the report says whether and what it measured."""
    storage_baseline: dict[str, Any] | None = None
    """The storage's own peak with the checkpoint's I/O shape, None when not measured."""
    not_cleaned_up: list[str] | None = None
    """Checkpoint folders the run created and could not remove."""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> RunFacts:
        """A run.json, of this version or an earlier one (keys it lacks take their defaults)."""
        known = {f.name for f in dataclasses.fields(cls)}
        facts = cls(**{key: value for key, value in data.items() if key in known})
        facts.storage_baseline_asked = data.get("storage_baseline_asked", "storage_baseline" in data)
        if facts.folder_sizes is not None:
            facts.folder_sizes = {int(iteration): size for iteration, size in facts.folder_sizes.items()}
        return facts


def stated(facts) -> dict[str, Any]:
    """A facts dataclass's fields by name, as run.json and the report write them: an optional one (None by
    default) is left out while None, a fact its writer does not know."""
    return {f.name: getattr(facts, f.name) for f in dataclasses.fields(facts)
            if not (f.default is None and getattr(facts, f.name) is None)}
