"""The megatron-core releases ckpt-bench runs on, and the one place where their checkpoint APIs differ.

    TESTED   0.16.x on Python 3.10-3.11 (0.16.1, this machine's stack: `make test`) and 0.19.x on Python 3.12+
             (0.19.2 installed, and Megatron-LM core_v0.19.0's own 0.19.1: tools/today_stack.sh, `make test-today`).
             Another release from 0.12 on runs with one warning line; one we know breaks is refused in one line
             (`check`).

Where 0.16.1 and 0.17+ (0.19.x) differ, for what we call:

    async_strategy   0.17 added it to `dist_checkpointing.save` and to the save strategies' `async_save`
                     (0.19 `serialization.py` 359, `strategies/torch.py` 735): "nvrx" (nvidia-resiliency-ext's
                     async checkpointing, Megatron-LM's default, `training_config.py` 519) or "mcore"
                     (megatron-core's own, deprecated); a synchronous save always takes "mcore"
                     (`torch.py` 727, `arguments.py` 1749). 0.16.1 has megatron-core's own only and no
                     such argument: `save_arguments` passes it only where the release takes it.
    AsyncCallsQueue  an "nvrx" request goes to nvidia-resiliency-ext's queue, an "mcore" one to megatron-core's
                     (0.19 `training/async_utils.py` 49): `async_calls_queue`.
    get_pg_size      the fully parallel distribution reads its group's size through `exchange_utils.get_pg_size` in
                     0.16.1 (imported at module level) and `megatron.core.utils.get_pg_size` in 0.19 (imported at
                     the call, `exchange_utils.py` 199): the projection answers both (`group_size_readers`).
    common.pt        0.16.1 writes the common state to rank 0's `common.pt`; 0.19 saves it inside the .distcp files
                     as the ShardedObject `common_state` (`serialization.py` 438): `Release.writes_common_pt`.
    arguments        Megatron-LM's parser at core_v0.19.0 takes choices core_v0.16.1's refuses (`optimizer lion`,
                     `position_embedding_type yarn`, ...): the arguments table is read at the installed release
                     (`Release.argument_types_of`).
    current_stream   0.19's gradient sync takes `torch.cuda.current_stream()` (`param_and_grad_buffer.py` 632),
                     which ckpt_bench.worker.cpu_compat answers on a CPU.

No megatron-core import at module level: the launcher decides before any rank starts.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass

from ckpt_bench.core.environment import megatron_core_version, package_versions
from ckpt_bench.core.errors import ConfigError

TESTED = ("0.16", "0.19")  # series: 0.16.1, 0.19.1 and 0.19.2 were run
OLDEST = (0, 12)  # pyproject's floor
ASYNC_STRATEGY_FROM = (0, 17)
ASYNC_STRATEGIES = ("nvrx", "mcore")


def _parts(version: str) -> tuple[int, ...]:
    """(major, minor[, patch]) of a version such as 0.19.2, 0.17.0rc1 or 0.16.1+git."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    return tuple(int(part) for part in match.groups() if part is not None) if match else ()


@dataclass(frozen=True)
class Release:
    """The installed megatron-core: its version and what its checkpoint API takes."""

    version: str | None

    @property
    def has_async_strategy(self) -> bool:
        return self.version is not None and _parts(self.version) >= ASYNC_STRATEGY_FROM

    @property
    def writes_common_pt(self) -> bool:
        """Whether a torch_dist save writes the common state to rank 0's `common.pt` (0.16.1), or as a ShardedObject
        in the .distcp files (0.19: `serialization.save` 438-445, and `common.pt` is read only from older
        checkpoints). Without megatron-core: 0.16.1's."""
        return self.version is None or _parts(self.version)[:2] < (0, 19)

    @property
    def argument_types_of(self) -> tuple[int, int]:
        """The Megatron-LM release whose parser types our arguments table holds for this one: 0.19's from 0.19,
        0.16.1's before (and without megatron-core)."""
        return (0, 19) if self.version is not None and _parts(self.version)[:2] >= (0, 19) else (0, 16)

    @property
    def tested(self) -> bool:
        return self.version is not None and ".".join(map(str, _parts(self.version)[:2])) in TESTED


def installed() -> Release:
    return Release(megatron_core_version())


def check(release: Release | None = None, python: tuple[int, int] | None = None) -> str | None:
    """Refuse a megatron-core we know breaks (ConfigError, one line); the warning line for one outside what is
    tested, or None."""
    release = release or installed()
    python = python or sys.version_info[:2]
    if release.version is None:
        return None  # no megatron-core: the backends that need it say so
    parts = _parts(release.version)
    if parts[:2] < OLDEST:
        raise ConfigError(f"megatron-core {release.version}: ckpt-bench needs 0.12 or newer (tested: "
                          "0.16.x, 0.19.x); pip install 'megatron-core==0.16.1' (Python 3.10-3.11) or 0.19.2")
    if release.has_async_strategy and python < (3, 12):
        # Its wheels require Python 3.12; unpacked onto 3.11 beside nvidia-resiliency-ext 0.4.1 it fails at import
        # (nvidia_resiliency_ext has no __version__), seen here.
        raise ConfigError(f"megatron-core {release.version} on Python {python[0]}.{python[1]}: 0.17 and newer need "
                          "Python 3.12+ (beside nvidia-resiliency-ext 0.4.1 it fails at import); use megatron-core "
                          "0.16.1 on this Python, or Python 3.12+ (tools/today_stack.sh builds one)")
    if not release.tested:
        return (f"megatron-core {release.version} is not a release ckpt-bench was tested on "
                f"({', '.join(v + '.x' for v in TESTED)}): "
                "its saves are measured as they run; the phases and the projection follow the tested releases' code")
    return None


NVRX_PARTS = {"async_ckpt": "async checkpointing", "local": "local checkpointing"}
# The modules megatron-core 0.19's `get_async_strategy("nvrx")` imports (strategies/torch.py 1131-1148), and the
# local checkpoint manager Megatron-LM's local tier builds.
NVRX_MODULES = {
    "async_ckpt": ("core", "filesystem_async", "state_dict_saver", "cached_metadata_filesystem_reader"),
    "local": ("ckpt_managers.local_manager",),
}


def nvrx_missing(part: str = "async_ckpt") -> str | None:
    """Why nvidia-resiliency-ext's `part` (NVRX_PARTS: its async checkpointing, which megatron-core 0.17+'s nvrx
    strategy runs; its local checkpoints, which Megatron-LM's non-persistent `local` tier is) cannot run here, or
    None when it can. Found without importing the modules themselves."""
    version = package_versions(("nvidia-resiliency-ext",))["nvidia-resiliency-ext"]
    try:  # finding a module imports its packages (nvidia_resiliency_ext's own __init__ files), not the module
        found = all(importlib.util.find_spec(f"nvidia_resiliency_ext.checkpointing.{part}.{module}") is not None
                    for module in NVRX_MODULES[part])
    except Exception:  # a broken install: whatever its packages raise on import
        found = False
    if found:
        return None
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if version is None:
        return f"nvidia-resiliency-ext is not installed (pip install nvidia-resiliency-ext) on Python {python}"
    return (f"nvidia-resiliency-ext {version} on Python {python} has no {NVRX_PARTS[part]} (the package index has "
            "no release of it for this Python, only a placeholder)")


def async_strategy(asked: str | None, async_save: bool,
                   release: Release | None = None) -> tuple[str | None, str | None]:
    """The async strategy a save runs with, as Megatron-LM picks it, and a note when it is not what was asked:
    None on a release without the argument; "mcore" for synchronous saves; `asked` (default "nvrx") for async
    ones, "mcore" when nvidia-resiliency-ext cannot run it and it was not asked for by name."""
    release = release or installed()
    if release.version is None:
        return asked, None  # a release whose version is unknown (a checkout without package_info): as asked
    if not release.has_async_strategy:
        if asked is not None:
            raise ConfigError(f"async_strategy {asked}: megatron-core {release.version} has no such setting (it "
                              "came in 0.17); its async save is megatron-core's own")
        return None, None
    if asked is not None and asked not in ASYNC_STRATEGIES:
        raise ConfigError(f"async_strategy {asked!r}: megatron-core {release.version} takes "
                          f"{' or '.join(ASYNC_STRATEGIES)}")
    if not async_save:
        return "mcore", None
    strategy = asked or "nvrx"
    why_not = nvrx_missing() if strategy == "nvrx" else None
    if why_not is None:
        return strategy, None
    if asked == "nvrx":
        raise ConfigError(f"async_strategy nvrx: {why_not}; use --set async_strategy=mcore for megatron-core's own")
    return "mcore", (f"async saves ran megatron-core's own async strategy (mcore), not Megatron-LM's default nvrx: "
                     f"{why_not}")


def settle(asked: str | None, async_save: bool, release: Release | None = None) -> tuple[str | None, list[str]]:
    """What a launcher asks of the release before any rank starts: `check` (one we know breaks refused in one line)
    and `async_strategy`, each line said on stderr too (`warning:` an untested release, `note:` a strategy other
    than Megatron-LM's default). Returns the strategy and the notes for the report."""
    release = release or installed()
    warning = check(release)
    strategy, why = async_strategy(asked, async_save, release)
    for prefix, line in (("warning", warning), ("note", why)):
        if line is not None:
            print(f"{prefix}: {line}", file=sys.stderr, flush=True)
    return strategy, [line for line in (warning, why) if line is not None]


def save_arguments(strategy: str | None) -> dict:
    """`dist_checkpointing.save`'s keyword for the async strategy, where the release takes one."""
    return {} if strategy is None else {"async_strategy": strategy}


def async_calls_queue(strategy: str | None, persistent: bool):
    """The queue that runs `strategy`'s requests: nvidia-resiliency-ext's for "nvrx", megatron-core's otherwise."""
    if strategy == "nvrx":
        from megatron.core.dist_checkpointing.strategies.torch import get_async_strategy

        return get_async_strategy("nvrx")[1]["AsyncCallsQueue"](persistent=persistent)
    from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue

    return AsyncCallsQueue(persistent=persistent)


def group_size_readers() -> list:
    """The modules whose `get_pg_size` megatron-core's `determine_main_replica_uniform_distribution` calls: in 0.16.1
    `exchange_utils`'s own (bound at its import), in 0.17+ `megatron.core.utils`'s (imported at the call)."""
    from megatron.core import utils
    from megatron.core.dist_checkpointing import exchange_utils

    return [module for module in (exchange_utils, utils) if hasattr(module, "get_pg_size")]
