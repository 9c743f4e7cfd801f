"""`--framework megatron-lm --megatron-path DIR`: Megatron-LM's own `pretrain_gpt.py` under our torchrun
runner (per-rank logs, the failing rank named), the resolved experiment as Megatron-LM flags, mock
data unless the experiment names `data_path`. See `ckpt_bench.backends.frameworks.common`.

torchrun starts `ckpt_bench.backends.frameworks.megatron_lm_bootstrap` with the script: on ranks without
CUDA it installs the CPU layer before any of Megatron-LM's code runs, elsewhere it runs the script as it is.
The flags are written from this checkout's own argument parser; after the passes, the iterations the log
says were saved are checked against the checkpoint folder."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from ckpt_bench.backends.frameworks.common import (
    FrameworkConfig,
    framework_plan,
    pass_args,
    record_events,
    resolve_for_framework,
)
from ckpt_bench.backends.megatron import rules
from ckpt_bench.backends.megatron.launcher import checkpoint_parent, msc_note, preview
from ckpt_bench.core import megatron_release
from ckpt_bench.core.cache import cache_dir, key_of, read_json, write_json
from ckpt_bench.core.checkpoint_dir import latest_iteration
from ckpt_bench.core.environment import gpu_count, gpu_stack, megatron_core_version, package_versions
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.events import EventKind, event_files, read_event_files
from ckpt_bench.core.options import Flag
from ckpt_bench.core.rundir import RunDir
from ckpt_bench.launcher import nodes
from ckpt_bench.launcher.base import Backend, Plan, WorkerPass
from ckpt_bench.launcher.config import LaunchConfig
from ckpt_bench.report.parsers.megatron import (
    LOAD_START,
    LOAD_TIMER,
    SAVE_DONE,
    SAVE_SCHEDULED,
    SAVE_START,
    SAVE_TIMERS,
    TIMER_ENTRY,
    TIMER_HEADER,
    TIMER_NAME,
    TIMER_RANK,
)
from ckpt_bench.storage import CheckpointStorage, storage_for
from ckpt_bench.storage.msc import msc_available

# torchrun's --tee prefix on a rank's line in console.log.
_TEE = re.compile(r"^\[default(?P<rank>\d+)\]:(?P<text>.*)$", re.DOTALL)
BOOTSTRAP = "ckpt_bench.backends.frameworks.megatron_lm_bootstrap"


@dataclass
class MegatronLMConfig(FrameworkConfig):
    """The Megatron experiment's options and Megatron-LM's checkout."""

    megatron_path: str | None = Flag(("--megatron-path",), "Megatron-LM checkout.").field()

    def __post_init__(self) -> None:
        super().__post_init__()
        self.root = self.checkout("megatron_path", "pretrain_gpt.py", MegatronLMBackend.name)


def _rank_env(root: Path) -> dict[str, str]:
    """The ranks' environment: the checkout's `megatron` package first (it shadows the installed megatron-core),
    and this interpreter's folder first on PATH: Megatron-LM builds its dataset helpers with `make`, which
    asks `python3` for pybind11's include path."""
    return {
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p),
        "PATH": os.pathsep.join(p for p in (str(Path(sys.executable).parent), os.environ.get("PATH", "")) if p),
    }


@dataclass
class ParserFlags:
    """A Megatron-LM checkout's own argument parser, as the flags we write need it. A name is an argument's
    `dest` or one of its flags spelled with underscores (`disable_bias_linear` as well as `add_bias_linear`)."""

    value_flag: dict[str, str] = field(default_factory=dict)  # name -> the flag that takes its value
    switch: dict[tuple[str, bool], str] = field(default_factory=dict)  # (name, value) -> the flag setting it
    default: dict[str, bool | str] = field(default_factory=dict)  # a switch's or a string's value when not given

    @classmethod
    def of(cls, described: list[dict]) -> ParserFlags:
        """From `megatron_lm_bootstrap.describe_parser`. A dest wins over a flag's spelling of the same name."""
        parser = cls()
        for argument in described:
            dest = argument["dest"]
            if argument["takes_value"]:
                parser.value_flag[dest] = argument["flags"][0]
            for flag, value in argument["sets"]:
                parser.switch.setdefault((dest, value), flag)
            if argument["default"] is not None:
                parser.default[dest] = argument["default"]
        for argument in described:
            for flag in argument["flags"]:
                name = flag[2:].replace("-", "_")
                if argument["takes_value"]:
                    parser.value_flag.setdefault(name, flag)
                elif argument["sets"]:  # a switch named by its own flag: given means true
                    parser.switch.setdefault((name, True), flag)
                    parser.default.setdefault(name, False)
        return parser

    def argv(self, args: dict) -> tuple[list[str], list[str]]:
        """Megatron-LM flags for trainer arguments, and the names left out because this parser has no flag
        for them (another version's arguments, Primus-only settings). A boolean at the parser's default
        needs no flag."""
        argv: list[str] = []
        left_out: list[str] = []
        for key, value in args.items():
            if value is None:
                continue
            if isinstance(value, bool):
                if self.default.get(key) == value:
                    continue
                if (key, value) in self.switch:
                    argv.append(self.switch[key, value])
                else:
                    left_out.append(key)
            elif key in self.value_flag:
                values = value if isinstance(value, list) else [value]
                argv += [self.value_flag[key], *(str(item) for item in values)]
            else:
                left_out.append(key)
        return argv, left_out


def parser_flags(root: Path) -> ParserFlags:
    """The checkout's own argument parser. Megatron-LM generates many of its arguments from megatron-core's
    config dataclasses, so no scan of its source finds them all: the parser is built in a subprocess run in the
    checkout (its `megatron` first on the path, whatever folder the launch is run from), the CPU layer installed
    where CUDA is absent. That takes seconds (torch and megatron.training imported: 6 s here, 11 s on the GPU
    machine), so what it gives is cached, keyed by `_parser_facts`."""
    path = cache_dir("megatron-lm-parsers") / f"{key_of(_parser_facts(root))}.json"
    try:
        return ParserFlags.of(read_json(path))
    except (TypeError, KeyError, IndexError, ValueError):  # none cached yet, or an entry not of this shape
        pass
    result = subprocess.run([sys.executable, "-m", BOOTSTRAP, "--describe-parser"], cwd=root,
                            env={**os.environ, **_rank_env(root)}, capture_output=True, text=True, check=False)
    lines = result.stdout.strip().splitlines()
    if result.returncode or not lines:
        raise parser_failure(root, (result.stderr.strip().splitlines() or ["no output"])[-1])
    described = json.loads(lines[-1])
    write_json(path, described)
    return ParserFlags.of(described)


#: ckpt-bench's files the parser's description runs: the bootstrap and the CPU layer it installs.
_DESCRIBING_FILES = ("backends/frameworks/megatron_lm_bootstrap.py", "worker/cpu_compat.py",
                     "backends/megatron/training.py")


def _parser_facts(root: Path) -> dict:
    """What the checkout's parser depends on: the content of the checkout's `megatron` sources and of our files
    that describe it, the Python and packages it is built with, and whether the CPU layer is installed (no GPU)."""
    package = Path(__file__).resolve().parents[2]  # ckpt_bench/
    sources = hashlib.sha256()
    files = [*sorted((root / "megatron").rglob("*.py")), *(package / name for name in _DESCRIBING_FILES)]
    for path in files:
        try:
            content = path.read_bytes()
        except OSError as error:  # a broken link, a file removed meanwhile: its absence is the fact
            content = type(error).__name__.encode()
        sources.update(f"{path}\0{len(content)}\0".encode() + hashlib.sha256(content).digest())
    return {"checkout": str(root.resolve()), "sources": sources.hexdigest(), "python": [sys.executable, sys.version],
            "packages": {**package_versions(("torch",)), **gpu_stack()}, "gpu": gpu_count() > 0,
            "path": os.environ.get("PYTHONPATH", "")}


#: Import names whose package is named otherwise, among what Megatron-LM's training imports.
_PACKAGE_OF_MODULE = {"yaml": "pyyaml"}


def parser_failure(root: Path, last: str) -> ConfigError:
    """Why the checkout's parser could not be built, from the last line its process printed: a module this Python
    lacks, such as one of Megatron-LM's own requirements that megatron-core does not bring (core_v0.16.1's
    megatron/training/training.py:67 imports megatron.rl, whose __init__ imports pydantic: seen on the GPU machine's
    image), or else a checkout too old to have the parser."""
    missing = re.fullmatch(r"ModuleNotFoundError: No module named '([\w.]+)'", last)
    if missing and missing[1].split(".")[0] != "megatron":
        top = missing[1].split(".")[0]
        return ConfigError(f"--megatron-path {root}: building its argument parser imports {missing[1]}, which "
                           f"{sys.executable} lacks: install the package that provides it (pip install "
                           f"{_PACKAGE_OF_MODULE.get(top, top)}), as Megatron-LM's own requirements must be there")
    return ConfigError(f"--megatron-path {root}: its argument parser could not be built ({last}); give a "
                       "Megatron-LM checkout of 2025 or later (megatron/training/arguments.py with "
                       "add_megatron_arguments)")


def check_dataset_helpers(root: Path) -> None:
    """Megatron-LM builds its dataset helpers (megatron/core/datasets/helpers.cpp) with `make` when a rank starts,
    unless they are built: `make`, a C++ compiler and pybind11 for the ranks' python3. Without them every rank
    stops at start-up; say so before anything starts."""
    datasets = root / "megatron" / "core" / "datasets"
    if any(datasets.glob("helpers_cpp*")):
        return
    # Its Makefile names the library by `python3-config --extension-suffix` (Debian's python3-dev).
    missing = [name for name, found in (("make", shutil.which("make")), ("a C++ compiler (g++)", shutil.which("g++")),
                                        ("python3-config", shutil.which("python3-config")),
                                        ("pybind11", importlib.util.find_spec("pybind11"))) if not found]
    if missing:
        raise ConfigError(f"--megatron-path {root}: Megatron-LM builds its dataset helpers in {datasets} when it "
                          f"starts, which needs {', '.join(missing)} (pip install pybind11; apt-get install make g++ "
                          "python3-dev)")


def check_gpu_extensions(settings: dict, root: Path) -> None:
    """On GPUs the script runs as it is: what its settings need of Transformer Engine and Apex's CUDA extensions
    must be installed, or every rank stops at its first step. `settings`: the experiment's arguments over the
    checkout's defaults. Said before anything starts, with what would do instead."""
    if not gpu_count():
        return
    has_te = importlib.util.find_spec("transformer_engine") is not None
    missing = []
    if settings.get("transformer_impl") == "transformer_engine" and not has_te:
        missing.append("transformer_impl is transformer_engine (Megatron-LM's default) and Transformer Engine is "
                       "not installed: install it, or --set transformer_impl=local")
    apex_fusion = importlib.util.find_spec("fused_weight_gradient_mlp_cuda") is not None
    if settings.get("gradient_accumulation_fusion") and not apex_fusion:
        missing.append("gradient_accumulation_fusion is on (Megatron-LM's default) and Apex's CUDA extension "
                       "fused_weight_gradient_mlp_cuda is not installed: install Apex with --cuda_ext, or --set "
                       "gradient_accumulation_fusion=false")
    router = root / "megatron" / "core" / "transformer" / "moe" / "moe_utils.py"
    if settings.get("num_experts") and not has_te and _names_te_gemm_only_with_te(router):
        missing.append(f"num_experts: this checkout's MoE router ({router.relative_to(root)}) calls te_general_gemm, "
                       "a name bound only when Transformer Engine imports (a NameError at the first step "
                       "without it, megatron-core 0.16.1): install Transformer Engine")
    if missing:
        raise ConfigError(f"--framework megatron-lm on GPUs: {'; '.join(missing)}")


def _names_te_gemm_only_with_te(module: Path) -> bool:
    """Whether megatron-core's MoE utilities test `te_general_gemm` without binding it when TE is absent."""
    try:
        source = module.read_text()
    except OSError:
        return False
    return "te_general_gemm is not None" in source and not re.search(r"^\s*te_general_gemm\s*=\s*None", source, re.M)


def saved_iterations_check(log_events_dir: Path, storage: CheckpointStorage) -> list[str]:
    """The iterations Megatron-LM's log says it saved, against the checkpoint folder: an `iter_NNNNNNN` folder
    for each and, where the folder is on this host's disk, `latest_checkpointed_iteration.txt` naming the last.
    Returns the report's note."""
    if storage.location is None:
        return []
    logged = sorted({event.iteration for event in read_event_files(event_files(log_events_dir))
                     if event.kind == EventKind.SAVE_END and event.error is None and event.iteration is not None})
    folders = sorted(storage.iteration_sizes())
    local = storage.worker(storage.describe()).local_path(storage.location)
    latest = latest_iteration(local) if local else None
    if logged and logged == folders and (not local or latest == logged[-1]):
        tracker = f", latest_checkpointed_iteration.txt {latest}" if local else ""
        return [f"the checkpoint folder holds what the log says was saved: iterations {_listed(logged)}{tracker}"]
    tracker = (f" and latest_checkpointed_iteration.txt says {latest if latest is not None else 'nothing'}"
               if local else "")
    return [f"the checkpoint folder differs from the log: the log says iterations {_listed(logged) or 'none'} were "
            f"saved, the folder holds iter_* folders of {_listed(folders) or 'none'}{tracker}"]


def checkout_version(root: Path) -> str:
    """The checkout's megatron-core version (`megatron/core/package_info.py`), for messages."""
    if not (root / "megatron" / "core" / "package_info.py").is_file():
        return "a version without megatron/core/package_info.py"
    version = megatron_core_version(root)
    return f"megatron-core {version}" if version else "an unknown version"


def release_settings(root: Path, args: dict, settings: dict) -> list[str]:
    """The checkout's megatron-core checked against this Python (a release we know breaks refused in one line) and,
    on 0.17+, the async strategy its saves take: Megatron-LM's default nvrx unless nvidia-resiliency-ext cannot run
    it here, then megatron-core's own (`--async-strategy mcore`, put into `args`). Returns the notes."""
    asked, async_save = args.get("async_strategy"), bool(settings.get("async_save"))
    strategy, notes = megatron_release.settle(asked, async_save, megatron_release.Release(megatron_core_version(root)))
    if async_save and asked is None and strategy == "mcore":  # not Megatron-LM's default: passed on
        args["async_strategy"] = settings["async_strategy"] = strategy
    return notes


def check_given_arguments(settings: dict, parser: ParserFlags, root: Path) -> None:
    """A `--set` argument this checkout's parser does not define (one of a later release, `async_strategy`,
    `enable_msc` before 0.18, ...) is refused in one line naming the checkout's version: passed on it would be
    lost, and the run would measure something else than asked."""
    _argv, missing = parser.argv(settings)
    if missing:
        raise ConfigError(f"--set {missing[0]}={settings[missing[0]]}: not an argument of the Megatron-LM checkout "
                          f"{root} ({checkout_version(root)}); a Megatron-LM that defines it takes it")


def takes_msc(root: Path, settings: dict, storage: CheckpointStorage) -> bool:
    """Whether the checkout's megatron-core will save and load through multi-storage-client: it has MSC
    (megatron/core/msc_utils.py), the ranks' Python imports multistorageclient, and MSC is on (`enable_msc`:
    the default until 0.18's opt-in --enable-msc; --disable-msc turns it off), as it must be for msc://."""
    has_msc = (root / "megatron" / "core" / "msc_utils.py").is_file()
    if storage.kind == "msc" and not (has_msc and settings.get("enable_msc")):
        raise ConfigError(f"--save-dir {storage.url}: the Megatron-LM checkout {root} ({checkout_version(root)}) "
                          + ("has no multi-storage-client support" if not has_msc
                             else "has MSC turned off (enable_msc false); drop --set enable_msc=false"))
    return has_msc and msc_available() and bool(settings.get("enable_msc"))


def megatron_stdout(console_lines: Iterable[str]) -> Iterator[str]:
    """Megatron-LM's stdout out of torchrun's console (`--tee`: every rank's lines, prefixed), as one process
    writing it in time order would give it to the log parser. Megatron-LM prints its save and load lines on rank
    0 and its timers on the last rank, one message of several lines, after a collective that rank 0 reaches
    once its own line is out. torchrun reads each rank's output on its own, so in the console another rank's
    lines can split a timer block, and the last rank's block can come before the rank 0 line it follows. Here a
    timer block is whole again; a `save-checkpoint` block waits for rank 0's line saying that save returned
    (`successfully saved`, or `scheduled an async checkpoint save`), a `load-checkpoint` block for the line
    starting that load."""
    saves: list[int] = []  # iterations of rank 0's saves, in order
    returned: set[int] = set()  # iterations whose save returned
    loads = 0
    timed = {"save": 0, "load": 0}  # timer blocks of each so far
    waiting: deque[tuple[str, int, list[str]]] = deque()

    def ready(operation: str, count: int) -> bool:
        if operation == "load":
            return loads >= count
        return len(saves) >= count and saves[count - 1] in returned

    for lines in _messages(console_lines):
        operation = _timed_operation(lines)
        if operation is not None:
            timed[operation] += 1
            waiting.append((operation, timed[operation], lines))
        else:
            yield from lines
            for line in lines:
                if match := SAVE_START.search(line):
                    saves.append(int(match["iteration"]))
                elif match := SAVE_SCHEDULED.search(line) or SAVE_DONE.search(line):
                    returned.add(int(match["iteration"]))
                elif LOAD_START.search(line):
                    loads += 1
        while waiting and ready(*waiting[0][:2]):
            yield from waiting.popleft()[2]
    for _, _, lines in waiting:  # a timer of nothing the log shows (a load-checkpoint timer with no checkpoint)
        yield from lines


def _messages(console_lines: Iterable[str]) -> list[list[str]]:
    """The console's lines in its order, prefixes removed, a rank's timer block (header and entries) one item."""
    messages: list[list[str]] = []
    open_block: dict[str | None, list[str]] = {}  # rank -> its timer block still taking entries
    for line in console_lines:
        match = _TEE.match(line)
        rank, text = (match["rank"], match["text"]) if match else (None, line)
        if rank in open_block and (TIMER_ENTRY.match(text) or TIMER_NAME.match(text) or TIMER_RANK.match(text)):
            open_block[rank].append(text)
            continue
        open_block.pop(rank, None)
        messages.append([text])
        if TIMER_HEADER.search(text):
            open_block[rank] = messages[-1]
    return messages


def _timed_operation(lines: list[str]) -> str | None:
    """'save' or 'load' for a timer block timing a checkpoint save or load, else None."""
    if not TIMER_HEADER.search(lines[0]):
        return None
    names = {match["name"] for line in lines[1:] if (match := TIMER_ENTRY.match(line) or TIMER_NAME.match(line))}
    if names & set(SAVE_TIMERS):
        return "save"
    return "load" if LOAD_TIMER in names else None


def _listed(iterations: list[int]) -> str:
    return ", ".join(str(i) for i in iterations)


class MegatronLMBackend(Backend[MegatronLMConfig]):
    name = "megatron-lm"
    title = "Megatron-LM (--framework megatron-lm): the real pretrain_gpt.py, timed from its logs"
    Config = MegatronLMConfig
    framework = True

    def preview(self, launch: LaunchConfig[MegatronLMConfig]) -> dict:
        return preview(*resolve_for_framework(launch, "--framework megatron-lm"), launch)

    def plan(self, launch: LaunchConfig[MegatronLMConfig]) -> Plan:
        config = launch.options
        root = config.root
        experiment, args, sizes = resolve_for_framework(launch, "--framework megatron-lm")
        # Megatron-LM sizes its validation set as train_iters // eval_interval (core_v0.16.1 has no default for
        # it); the benchmark evaluates nothing unless the experiment asks.
        args.setdefault("eval_iters", 0)
        args.setdefault("eval_interval", args["train_iters"])
        check_dataset_helpers(root)
        parser = parser_flags(root)
        check_given_arguments(config.settings, parser, root)
        storage = storage_for(checkpoint_parent(config, args), config)
        if storage.kind == "msc" and "enable_msc" in parser.value_flag.keys() | {k for k, _ in parser.switch}:
            args.setdefault("enable_msc", True)  # 0.18's opt-in; 0.16.1's default
        settings = {**parser.default, **args}
        release_notes = release_settings(root, args, settings)
        msc = takes_msc(root, settings, storage)
        check_gpu_extensions(settings, root)
        if not gpu_count() or settings.get("transformer_impl") == "local":  # CPU ranks run the local spec
            rules.check_local_experts(settings)
        if not gpu_count() and (refused := rules.fsdp_on_cpu_refusal(settings)):
            raise ConfigError(f"--framework megatron-lm on CPU ranks: {refused}")
        script = str(root / "pretrain_gpt.py")
        # The load reads a cold checkpoint, as ours do: the lifecycle evicts it first.
        passes = [WorkerPass(phase, [], spec=False, evict_before=phase == "load", env=_rank_env(root))
                  for phase in ("save", "load")]
        notes: list[str] = []

        def bind(run: RunDir, checkpoint_dir: str | None) -> None:
            skipped: set[str] = set()
            for worker_pass in passes:
                flags, left_out = parser.argv(pass_args(args, checkpoint_dir, worker_pass.name))
                worker_pass.args = [script, *flags]
                skipped.update(left_out)
            if skipped:
                notes[:] = [f"not arguments of this Megatron-LM checkout, left out: {', '.join(sorted(skipped))}"]

        def collect(run: RunDir) -> list[str]:
            # Megatron-LM's stdout as a user sees it: node 0's ranks' lines (megatron_stdout).
            logs = []
            node0 = replace(launch.topology, node_rank=0)
            for worker_pass in passes:
                console = nodes.log_dir(run, worker_pass.name, node0) / "console.log"
                if console.is_file():
                    log = console.with_name("megatron.log")
                    with open(console, encoding="utf-8", errors="replace") as lines:
                        log.write_text("".join(megatron_stdout(lines)))
                    logs.append(log)
            events = record_events(run, logs)
            # The environment names the megatron-core this Python imports; the ranks imported the checkout's.
            ranks = f"the ranks ran this checkout's megatron-core {megatron_core_version(root)} ({root})"
            return [ranks, *notes, *events, *saved_iterations_check(run.events_dir, storage)]

        why = ("an msc:// save dir" if storage.kind == "msc" else
               "this checkout's megatron-core turns it on whenever multistorageclient imports unless --set "
               "enable_msc=false (Megatron-LM's --disable-msc)" if msc else
               "MSC is off for this checkout (enable_msc false, or no MSC in it)")
        return framework_plan(launch, experiment, args, sizes, passes, bind, collect, worker_module=BOOTSTRAP,
                              storage=storage, msc=msc, notes=[*release_notes, *msc_note(msc, storage, why)])
