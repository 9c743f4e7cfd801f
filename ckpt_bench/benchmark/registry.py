"""The one registry of what can run, and the one function that picks it.

    RUNNERS      every backend (--backend) and framework mode (--framework), by name
    sections()   every option, grouped for --help: common, checkpoints, storage, then one per runner
    build_launch(values, given, environ) -> LaunchConfig
                 picks the runner, fills options from its environment variables, refuses options it
                 does not read, and builds the typed configs (their checks run there)

The CLI, sweeps and `--emit` all go through `build_launch`, so a sweep's `framework:` runs the
framework, and `--backend dcp --tp 2` is refused everywhere alike. A new backend is one package
(`ckpt_bench.backends.<name>`: launcher.py, spec.py, worker.py) and one line in `RUNNERS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from ckpt_bench.backends.comms.launcher import CommsBackend, PreflightOptions
from ckpt_bench.backends.dcp.launcher import DcpBackend
from ckpt_bench.backends.frameworks.megatron_lm import MegatronLMBackend
from ckpt_bench.backends.frameworks.primus import PrimusBackend
from ckpt_bench.backends.lightning.launcher import LightningBackend
from ckpt_bench.backends.megatron.launcher import MegatronBackend
from ckpt_bench.backends.workload.launcher import WorkloadBackend
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.options import Flag, Options
from ckpt_bench.launcher.base import Backend, CheckpointOptions
from ckpt_bench.launcher.config import CommonOptions, EmitOptions, LaunchConfig
from ckpt_bench.projection import ProjectionOptions
from ckpt_bench.report.advice import AdviceOptions
from ckpt_bench.storage import StorageOptions

RUNNERS: dict[str, type[Backend]] = {
    runner.name: runner
    for runner in (MegatronBackend, DcpBackend, LightningBackend, CommsBackend, WorkloadBackend, PrimusBackend,
                   MegatronLMBackend)
}
BACKENDS = tuple(name for name, runner in RUNNERS.items() if not runner.framework)
FRAMEWORKS = tuple(name for name, runner in RUNNERS.items() if runner.framework)


@dataclass
class RunnerChoice(Options):
    """Which runner: a backend, or a real framework instead of the built-in Megatron worker."""

    section: ClassVar[str] = CommonOptions.section

    backend: str = Flag(("--backend",), "What runs the benchmark.", choices=BACKENDS, default="megatron",
                        show_default=True).field()
    framework: str | None = Flag(("--framework",), "Run the Megatron experiment with the real framework instead "
                                 "of the built-in worker.", choices=FRAMEWORKS).field()

    def __post_init__(self) -> None:
        if self.framework and self.backend != "megatron":
            raise ConfigError(f"--framework {self.framework} runs a Megatron experiment: it cannot be combined with "
                              f"--backend {self.backend}")

    @property
    def runner(self) -> type[Backend]:
        return RUNNERS[self.framework or self.backend]


def sections() -> list[tuple[str, dict[str, Flag], dict[str, tuple[str, ...]]]]:
    """Every option once, in --help order: (section title, {name: flag}, {name: runners that read it}).

    An option read by several runners is shown in the first section that declares it and lists its
    readers; the shared checkpoint and storage options have sections of their own."""
    readers: dict[str, list[str]] = {}
    for name, runner in RUNNERS.items():
        for option in [*runner.Config.flags(), *(AdviceOptions.flags() if _saves(runner) else ())]:
            readers.setdefault(option, []).append(name)
    groups: list[tuple[str, type[Options]]] = [
        (CommonOptions.section, RunnerChoice), (CommonOptions.section, CommonOptions),
        (AdviceOptions.section, AdviceOptions),
        (CheckpointOptions.section, CheckpointOptions), (PreflightOptions.section, PreflightOptions),
        (StorageOptions.section, StorageOptions), (ProjectionOptions.section, ProjectionOptions),
        *((runner.title, runner.Config) for runner in RUNNERS.values()),
        (EmitOptions.section, EmitOptions),
    ]
    placed: set[str] = set()
    result: list[tuple[str, dict[str, Flag], dict[str, tuple[str, ...]]]] = []
    for title, config in groups:
        flags = {name: flag for name, flag in config.flags().items() if name not in placed}
        placed.update(flags)
        if not flags:
            continue
        if result and result[-1][0] == title:
            result[-1][1].update(flags)
        else:
            result.append((title, flags, {}))
        result[-1][2].update({name: tuple(readers.get(name, ())) for name in flags})
    return result


def all_flags() -> dict[str, Flag]:
    """Every option's flag, by name (one Flag per name: shared options share their Flag)."""
    return {name: flag for _title, flags, _readers in sections() for name, flag in flags.items()}


def _saves(runner: type[Backend]) -> bool:
    """Whether the runner saves checkpoints (and so reads the advice options)."""
    return issubclass(runner.Config, CheckpointOptions)


def _megatron_argument(flag) -> str | None:
    """The Megatron-LM argument a flag spells out (`--tp`'s alias `--tensor-model-parallel-size`), if it has one."""
    spelled = [decl for decl in flag.decls[1:] if decl.startswith("--") and decl.count("-") > 3]
    return spelled[0].removeprefix("--").replace("-", "_") if spelled else None


def _refuse_unread(given: set[str], runner: type[Backend], emitting: bool, values: Mapping | None = None) -> None:
    read = {*RunnerChoice.flags(), *CommonOptions.flags(), *runner.Config.flags()}
    if _saves(runner):
        read |= set(AdviceOptions.flags())
    if emitting:
        read |= set(EmitOptions.flags())
    flags = all_flags()
    for name in sorted(given - read, key=list(flags).index):
        if name in EmitOptions.flags():
            raise ConfigError(f"{flags[name].canonical} applies to --emit slurm|k8s only")
        if name in AdviceOptions.flags():
            raise ConfigError(f"{flags[name].canonical} advises a checkpoint interval: the {runner.name} backend "
                              "saves no checkpoint")
        users = [n for n, r in RUNNERS.items() if name in r.Config.flags()]
        kind = "framework mode" if runner.framework else "backend"
        argument = _megatron_argument(flags[name])
        hint = ""
        if argument and "set" in runner.Config.flags():  # the runner reads Megatron arguments through --set
            value = (values or {}).get(name)
            hint = f"; here: --set {argument}={'N' if value is None else value}"
        raise ConfigError(f"{flags[name].canonical} is not read by the {runner.name} {kind}{hint}; it applies to: "
                          + ", ".join(("--framework " if RUNNERS[u].framework else "--backend ") + u for u in users))


def _select_runner(values: Mapping, given: set[str]) -> Mapping:
    """An option of a runner's own (`Backend.selected_by`: --workload) chooses it when neither --backend nor
    --framework is given."""
    if given & {"backend", "framework"}:
        return values
    chosen = [name for name, runner in RUNNERS.items() if runner.selected_by in given]
    return {**values, "backend": chosen[0]} if chosen else values


def build_launch(values: Mapping, given: set[str], environ: Mapping[str, str]) -> tuple[LaunchConfig, EmitOptions]:
    """The typed launch of command-line `values` (option name -> value, None when not given), `given`
    naming the options set explicitly. Raises ConfigError (one line) for any mistake."""
    values = _select_runner(values, set(given))
    choice = RunnerChoice.from_values(values)
    runner = choice.runner
    emit = EmitOptions.from_values(values)
    _refuse_unread(set(given), runner, emitting=emit.emit is not None, values=values)
    values = runner.environment_options(values, environ, set(given))
    options = runner.Config.from_values(values)
    launch = LaunchConfig.from_values(values, runner=runner.name, options=options)
    return launch, emit


def runner_for(launch: LaunchConfig) -> Backend:
    return RUNNERS[launch.runner]()
