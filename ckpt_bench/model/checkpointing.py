"""How a Megatron job checkpoints: the settings of Megatron-LM's that decide what a save and a restart do, as
the job's experiment sets them, each with where its value came from.

    settings = CheckpointSettings.from_megatron_args(args, origin)   # origin(key): the file that sets it

The defaults are Megatron-LM's (core_v0.16.1 `megatron/training/training_config.py`: `ckpt_fully_parallel_save`
True at 436, `ckpt_fully_parallel_load` False at 449, `ckpt_assume_constant_structure` False at 452, `async_save`
False at 441, `use_persistent_ckpt_worker` False at 444, `auto_detect_ckpt_format` False at 418,
`save_retain_interval` None at 341), and Primus's module preset sets the same (`trainer_base.yaml` 146-157).
Megatron-LM turns an async save off without the persistent worker (`arguments.py` 1139-1143): `async_save` here
is what runs. megatron-core's torch_dist writer has no argument for its threads: 2 a rank
(`TorchDistSaveShardedStrategy`, strategies/torch.py 602), each writing a file of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ckpt_bench.core import megatron_release

__all__ = ["DEFAULT_SOURCE", "TORCH_DIST_COORDINATOR_FILES", "TORCH_DIST_WRITER_THREADS", "CheckpointSettings"]

#: megatron-core's torch_dist writer threads a rank (files a rank writes), not an argument of Megatron-LM's.
TORCH_DIST_WRITER_THREADS = 2
#: The files rank 0 writes beside its shards in a torch_dist checkpoint: DCP's index, the common state (a file of
#: its own up to megatron-core 0.16.1; inside the .distcp files from 0.19: `megatron_release`), the checkpoint's format.
TORCH_DIST_COORDINATOR_FILES = ((".metadata", "common.pt", "metadata.json")
                                if megatron_release.installed().writes_common_pt else (".metadata", "metadata.json"))
#: Where a setting no file sets comes from.
DEFAULT_SOURCE = "Megatron-LM's default"


@dataclass(frozen=True)
class CheckpointSettings:
    """The checkpoint settings a Megatron job runs with (Megatron-LM's argument names); `sources` says, for each,
    which file set it (the experiment, a preset, `--set`) or that it is Megatron-LM's default."""

    ckpt_fully_parallel_save: bool = True
    """Each data-parallel group's replicated shards written once, spread over its ranks (megatron-core's
    `FullyParallelSaveStrategyWrapper`); off: data-parallel rank 0 writes them all."""
    ckpt_fully_parallel_load: bool = False
    """Each replicated shard read once per data-parallel group and exchanged (`FullyParallelLoadStrategyWrapper`);
    off (the default): every rank reads every shard it holds, replicas included."""
    ckpt_assume_constant_structure: bool = False
    """Later saves of a process skip the sharding validation, reuse the distribution and, from the third, the
    global plan."""
    async_save: bool = False
    """What runs: asked for, with the persistent worker (Megatron-LM turns it off without one)."""
    async_save_asked: bool = False
    use_persistent_ckpt_worker: bool = False
    auto_detect_ckpt_format: bool = False
    """Every rank first loads rank 0's common state (the legacy format: its whole model file) to find the
    format (checkpointing.py 1507)."""
    save_interval: int | None = None
    save_retain_interval: int | None = None
    """Keep only the checkpoints at its multiples (and the latest); None: keep every one."""
    train_iters: int | None = None
    non_persistent_save_interval: int | None = None
    non_persistent_ckpt_type: str | None = None
    writer_threads: int = TORCH_DIST_WRITER_THREADS
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for name in ("save_interval", "save_retain_interval", "train_iters", "non_persistent_save_interval"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} {value}: must be a positive number of iterations")
        if self.writer_threads < 1:
            raise ValueError(f"writer_threads {self.writer_threads}: at least 1")

    @classmethod
    def from_megatron_args(cls, args: Mapping[str, Any],
                           origin: Callable[[str], str | None] = lambda key: None) -> CheckpointSettings:
        """The settings of `args` (a job's merged Megatron-LM arguments; a missing or null key is Megatron-LM's
        default); `origin(key)` names the file that set a key (None: the default)."""
        defaults = cls()
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for f in dataclasses.fields(cls):
            if f.name in ("sources", "async_save_asked", "writer_threads"):
                continue
            given = args.get(f.name)
            if given is None:
                values[f.name] = getattr(defaults, f.name)
                sources[f.name] = DEFAULT_SOURCE
            else:
                values[f.name] = bool(given) if isinstance(getattr(defaults, f.name), bool) else given
                sources[f.name] = origin(f.name) or "the experiment's arguments"
        values["async_save_asked"] = values["async_save"]
        values["async_save"] = bool(values["async_save"] and values["use_persistent_ckpt_worker"])
        if values["async_save_asked"] and not values["async_save"]:
            sources["async_save"] = (f"{sources['async_save']}, turned off: Megatron-LM runs an async save only "
                                     "with use_persistent_ckpt_worker (arguments.py 1139-1143)")
        sources["writer_threads"] = "megatron-core's torch_dist writer (strategies/torch.py 602; no argument)"
        return cls(**values, sources=sources)

    def replace(self, **changes: Any) -> CheckpointSettings:
        """These settings with `changes`, each sourced "what to change"."""
        sources = {**self.sources, **{name: "what to change: set here" for name in changes}}
        if "async_save" in changes:
            changes.setdefault("async_save_asked", changes["async_save"])
        return dataclasses.replace(self, **changes, sources=sources)

    def saves_per_run(self) -> int | None:
        """Persistent saves of a run of `train_iters` (Megatron-LM saves every `save_interval` and once more at
        the end of training when that is not one); None where either is unknown."""
        if not self.train_iters or not self.save_interval:
            return None
        return self.train_iters // self.save_interval + (1 if self.train_iters % self.save_interval else 0)

    def kept(self, saves: int) -> int:
        """Checkpoints on storage after `saves` saves: every one, or with `save_retain_interval` those at its
        multiples and the latest."""
        if self.save_retain_interval is None or not self.save_interval or not saves:
            return saves
        iterations = [self.save_interval * n for n in range(1, saves + 1)]
        return sum(1 for it in iterations[:-1] if it % self.save_retain_interval == 0) + 1

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckpointSettings:
        return cls(**data)

    def described(self) -> list[dict[str, Any]]:
        """Each setting with its value and source, for the report (async_save's source says where one asked for
        was turned off)."""
        return [{"name": name, "value": value, "source": self.sources.get(name, DEFAULT_SOURCE)}
                for name, value in self.as_dict().items() if name not in ("sources", "async_save_asked")]
