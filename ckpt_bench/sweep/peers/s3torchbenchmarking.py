"""s3torchbenchmarking's Hydra configs as ckpt-bench sweeps, and its result files.

Mirrored from awslabs/s3-connector-for-pytorch (s3torchbenchmarking/) at 611b0ff (Nov 2025): conf/
dcp_ddp_save.yaml, lightning_checkpointing.yaml, pytorch_checkpointing.yaml; at 58de12a (Jan 2025):
conf/dcp.yaml; the result files of src/s3torchbenchmarking/hydra_callback.py and constants.py; the
metrics of dcp_common.py, lightning_checkpointing/benchmark.py, pytorch_checkpointing/benchmark.py.

    ckpt_launch.py --sweep conf/dcp_ddp_save.yaml +path=./nvme/ s3.region=eu-west-1 s3.uri=s3://b/ \\
        hydra.sweep.dir=multirun/mine [--s3-endpoint URL ...]

A file is theirs when it has `hydra:` or `defaults:` or `+`-keys. Its jobs are Hydra's: the
`hydra.sweeper.params` and the command-line overrides, parsed with Hydra's own override grammar
(`OverridesParser`), the command line replacing a file's key, as Hydra's basic sweeper does; the
cartesian product in that order. Each job's config (the file's keys with the job's overrides, through
OmegaConf) becomes one ckpt-bench command line (`Scenario.options`):

    their key               DCP (dcp*.yaml)                  Lightning / PyTorch checkpointing
    +model                  --model (their names, MODELS)    --model, 1 rank, --set train_steps=0, no load
    +backend                --dist-backend                   -
    +world_size             --nproc-per-node                 -
    +thread_count           --thread-count                   -
    +checkpoint.storage     disk: --save-dir <path>; s3: --save-dir <s3.uri> --s3-region <s3.region>
    +checkpoint.sync_files  --sync-files (default off, as theirs)   -
    epochs                  --repeat N --save-calls 1 (fresh     --save-calls N (one process, as theirs)
                            processes per save, as their mp.spawn)
    save_one_in             -                                 recorded (their benchmarks train no step)

Results go to `hydra.sweep.dir` (its `${now:...}` and `${hydra.job.config_name}` resolved): each job's
folder `<num>/` holds our files and their `job_results.json` {config, metrics}; the folder holds their
`run_results.json` and `multirun.yaml`, and our own sweep results as `ckpt_bench_results.json`.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib import metadata
from pathlib import Path

from ckpt_bench.backends.dcp import models
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.events import event_files, read_event_files
from ckpt_bench.core.rundir import SWEEP_RESULTS_FILES, write_atomic
from ckpt_bench.core.units import MIB
from ckpt_bench.report.engine import rank_durations
from ckpt_bench.report.schema import Report
from ckpt_bench.report.sweep_results import JobRecord
from ckpt_bench.sweep.limits import DEFAULT_MAX_JOBS, check_job_count
from ckpt_bench.sweep.peers.outputs import Outputs

SAVED_KEY = "s3torchbenchmarking"  # sweep.yaml of a translated sweep: {s3torchbenchmarking: {...}}
JOB_RESULTS_FILE = "job_results.json"
RUN_RESULTS_FILE = "run_results.json"
MULTIRUN_FILE = "multirun.yaml"
OUR_RESULTS_FILE = SWEEP_RESULTS_FILES[0]  # their run_results.json takes our usual name
DEFAULT_SWEEP_DIR = "multirun/${hydra.job.config_name}/${now:%Y-%m-%d_%H-%M-%S}"  # Hydra's own default
MISSING = "???"

# Their model names -> ours (ckpt_bench.backends.dcp.models), with their parameter counts.
MODELS = {"vit-base": "vit-base-in21k", "clip-vit": "clip-vit", "whisper": "whisper", "T0_3B": "T0_3B",
          "T0pp": "T0pp", "L7b": "L7b", "L13b": "L13b", "L30b": "L30b", "L65b": "L65b", "L70b": "L70b"}
# `defaults:` entries and what becomes of them here.
DEFAULTS = {
    "hydra/callbacks/collate_results": "its result files are written by ckpt-bench, in its layout",
    "aws/dynamodb": "nothing is written to DynamoDB",
}
# Hydra's own settings that decide nothing here (the sweep dir is read; the rest is Hydra's machinery).
HYDRA_KEYS = ("mode", "sweep", "sweeper", "callbacks", "job", "run", "launcher", "verbose", "output_subdir")


@dataclass(frozen=True)
class Scenario:
    """One of their benchmarks: the keys its config may hold and how a job's config becomes our options."""

    name: str
    keys: Mapping[str, tuple[str, ...]]  # top-level key -> its sub-keys (empty: a value)
    metrics: str  # "ranks": per-rank DCP metrics; "rank0": single-process save times

    def options(self, job: dict) -> dict:
        storage = _value(job, "checkpoint.storage", ("disk", "s3"))
        model = _model(job)
        epochs = _positive(job, "epochs")
        if storage == "disk":
            where = {"save_dir": str(_value(job, "path"))}
        else:
            where = {"save_dir": str(_value(job, "s3.uri")), "s3_region": str(_value(job, "s3.region"))}
        if self.metrics == "ranks":
            options = {"backend": "dcp", "model": model, "dist_backend": _value(job, "backend", ("nccl", "gloo")),
                       "nproc_per_node": _positive(job, "world_size"), "thread_count": _positive(job, "thread_count"),
                       "save_calls": 1, "repeat": epochs}
            if storage == "disk":
                options["sync_files"] = bool((job.get("checkpoint") or {}).get("sync_files", False))
        else:
            options = {"backend": "lightning", "model": model, "nproc_per_node": 1, "save_calls": epochs,
                       "load_calls": 0, "set": ("train_steps=0",)}  # as theirs: no training step, no load
        return {**options, **where}


_STORAGE_KEYS = {"s3": ("region", "uri"), "path": (), "epochs": (), "model": (), "disambiguator": (),
                 "dynamodb": ("region", "table")}
DCP = Scenario("dcp", {**_STORAGE_KEYS, "backend": (), "world_size": (), "thread_count": (),
                       "checkpoint": ("storage", "sync_files")}, "ranks")
LIGHTNING = Scenario("lightning_checkpointing", {**_STORAGE_KEYS, "save_one_in": (), "checkpoint": ("storage",)},
                     "rank0")
PYTORCH = Scenario("pytorch_checkpointing", {**_STORAGE_KEYS, "save_one_in": (), "checkpoint": ("storage",)},
                   "rank0")


def recognises(definition) -> bool:
    """Theirs: a Hydra config (`hydra:`, `defaults:`, `+`-keys), or the sweep.yaml we saved of one."""
    return isinstance(definition, dict) and (
        "hydra" in definition or "defaults" in definition or SAVED_KEY in definition
        or any(str(key).startswith("+") for key in definition))


def _scenario(config_name: str, source: str, swept: Iterable[str]) -> Scenario:
    if config_name.startswith("dcp_fsdp"):
        raise ConfigError(f"{source}: s3torchbenchmarking's dcp_fsdp benchmarks save an FSDP-sharded LLaMA; "
                          "ckpt-bench's dcp backend saves a replicated state: run its dcp_ddp configs")
    if config_name.endswith("_load"):
        raise ConfigError(f"{source}: s3torchbenchmarking's load benchmarks read a checkpoint an earlier run left "
                          "(checkpoint.suffix); ckpt-bench loads back what each job saves: run the _save config")
    if config_name.startswith("dcp") or "thread_count" in swept:
        return DCP
    if config_name.startswith("lightning"):
        return LIGHTNING
    if config_name.startswith("pytorch_checkpointing"):
        return PYTORCH
    raise ConfigError(f"{source}: not one of s3torchbenchmarking's checkpoint configs (dcp*.yaml, "
                      "lightning_checkpointing.yaml, pytorch_checkpointing.yaml); its name says which benchmark runs")


def _get(job: dict, dotted: str):
    value = job
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _value(job: dict, dotted: str, choices: tuple[str, ...] = ()):
    value = _get(job, dotted)
    plus = "+" if dotted.split(".")[0] not in ("s3", "epochs") else ""
    if value is None or value == MISSING:
        raise ConfigError(f"{dotted} is not set (it is {value if value else 'missing'}): pass {plus}{dotted}=VALUE")
    if choices and value not in choices:
        raise ConfigError(f"{dotted}={value!r}: use one of {', '.join(choices)}")
    return value


def _positive(job: dict, dotted: str) -> int:
    value = _value(job, dotted)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{dotted}={value!r}: must be a positive integer")
    return value


def _model(job: dict) -> str:
    name = str(_value(job, "model"))
    if name in MODELS:
        return MODELS[name]
    if name in models.MODELS:  # one of ours (e.g. `tiny` for a smoke run): said in the notes
        return name
    raise ConfigError(f"+model={name!r} is not an s3torchbenchmarking model: use one of {', '.join(MODELS)} "
                      f"(or one of ckpt-bench's: {', '.join(m for m in models.MODELS if m not in MODELS.values())})")


def _check_keys(job: dict, scenario: Scenario) -> None:
    for key, value in job.items():
        if key not in scenario.keys:
            raise ConfigError(f"{key!r} is not a key of s3torchbenchmarking's {scenario.name} config "
                              f"(known: {', '.join(scenario.keys)})")
        sub = scenario.keys[key]
        for inner in (value if isinstance(value, dict) else {}):
            if inner not in sub:
                raise ConfigError(f"{key}.{inner!r} is not a key of s3torchbenchmarking's {scenario.name} config "
                                  f"(known: {', '.join(f'{key}.{s}' for s in sub)})")


def _parse(texts: Sequence[str], source: str) -> list:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_overrides(list(texts))
    except HydraException as error:
        raise ConfigError(f"{source}: {str(error).splitlines()[0]}") from None


def _values(override) -> list:
    return list(override.sweep_iterator()) if override.is_sweep_override() else [override.value()]


def _resolve_sweep_dir(text: str, config_name: str) -> Path:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("now"):
        OmegaConf.register_new_resolver("now", lambda pattern: datetime.now().strftime(pattern), use_cache=True)
    tree = OmegaConf.create({"hydra": {"job": {"config_name": config_name}, "sweep": {"dir": text}}})
    return Path(str(tree.hydra.sweep.dir))


@dataclass
class Translation(Outputs):
    """Their file as our jobs, and the writer of their result files. `ckpt_bench.sweep.run` reads `name`,
    `lists`, `jobs`, `root`, `notes`, `saved` and calls `job_done` / `sweep_done`."""

    name: str  # their config name (the file's stem): run_results.json's `scenario`
    scenario: Scenario
    lists: dict  # swept key (theirs, without `+`) -> values: the columns of results.csv
    jobs: list[tuple[dict, dict]]  # per job: (its swept values, our options)
    configs: list[dict]  # per job: its config as Hydra would give it to their benchmark
    root: Path  # hydra.sweep.dir
    multirun: dict  # the composed config with its hydra section (multirun.yaml)
    saved: dict  # sweep.yaml: enough to translate the same sweep again (--resume)
    notes: list[str] = field(default_factory=list)
    results_file: str = OUR_RESULTS_FILE
    started: float = field(default_factory=time.perf_counter)

    def job_done(self, job_dir: Path, record: JobRecord) -> None:
        """`<job>/job_results.json` for a job that left a report (their callback writes it at job end)."""
        if record.report is None:
            return
        metrics = job_metrics(record.report, self.scenario)
        write_atomic(job_dir / JOB_RESULTS_FILE,
                     json.dumps({"config": self.configs[record.index], "metrics": metrics}, indent=2) + "\n")

    def sweep_done(self, root: Path) -> None:
        """run_results.json (their fields, the job_results of every job with one) and multirun.yaml."""
        import yaml

        job_results = [json.loads(path.read_text()) for index in range(len(self.jobs))
                       if (path := root / str(index) / JOB_RESULTS_FILE).is_file()]
        run_results = {
            "s3torchconnector_version": _version("s3torchconnector"),
            "timestamp_utc": time.time(),
            "scenario": self.name,
            "disambiguator": self.configs[0].get("disambiguator") if self.configs else None,
            "run_elapsed_time_s": time.perf_counter() - self.started,
            "versions": {"python": sys.version, "pytorch": _version("torch"), "hydra": _version("hydra-core")},
            "ec2_metadata": None,  # not queried: IMDS is EC2's, and off EC2 it costs a timeout
            "job_results": job_results,
        }
        write_atomic(root / RUN_RESULTS_FILE, json.dumps(run_results, indent=2) + "\n")
        write_atomic(root / MULTIRUN_FILE, yaml.safe_dump(self.multirun, sort_keys=False))


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def translate(definition: dict, source: str, overrides: Sequence[str], options: dict,
              max_jobs: int | None = DEFAULT_MAX_JOBS) -> Translation:
    """Their config (or the sweep.yaml saved of one) with Hydra `overrides` and our command-line
    `options` (fixed settings of every job) as a translation, of at most `max_jobs` jobs (counted before
    any is built); ConfigError (one line) for a mistake."""
    if SAVED_KEY in definition:
        saved = definition[SAVED_KEY]
        definition, source, overrides, options = saved["config"], saved["source"], saved["overrides"], {
            **saved["options"], **options}
    config = dict(definition)
    config_name = Path(source).stem
    notes = []
    for entry in config.pop("defaults", None) or []:
        name = entry if isinstance(entry, str) else next(iter(entry), "") if isinstance(entry, dict) else str(entry)
        if name != "_self_":
            notes.append(f"defaults: {name} ignored: {DEFAULTS.get(name, 'ckpt-bench has no such group')}")
    hydra = dict(config.pop("hydra", None) or {})
    for key in hydra:
        if key not in HYDRA_KEYS:
            raise ConfigError(f"{source}: hydra.{key!r} is not a Hydra setting ckpt-bench reads "
                              f"(known: {', '.join('hydra.' + k for k in HYDRA_KEYS)})")
    params = ((hydra.get("sweeper") or {}).get("params")) or {}
    file_overrides = [*(f"{key}={value}" for key, value in params.items()),
                      *(f"+{key[1:]}={value}" for key, value in config.items() if str(key).startswith("+"))]
    config = {key: value for key, value in config.items() if not str(key).startswith("+")}
    sweep_dir = str((hydra.get("sweep") or {}).get("dir") or DEFAULT_SWEEP_DIR)

    ordered: dict[str, list] = {}  # Hydra's basic sweeper: one entry per key, the later override replacing
    swept: list[str] = []
    for index, override in enumerate(_parse([*file_overrides, *overrides], source)):
        key = override.key_or_group
        if key.startswith("hydra."):
            if key == "hydra.sweep.dir":
                sweep_dir = str(override.value())
            else:
                notes.append(f"{override.input_line} ignored: a Hydra setting that decides nothing here")
            continue
        if override.is_delete():
            ordered.pop(key, None)
            config.pop(key, None)
            continue
        ordered[key] = _values(override)
        # Swept: the sweeper's params (the first overrides) and any comma list; a key stays swept when
        # the command line replaces it.
        if (index < len(params) or override.is_sweep_override()) and key not in swept:
            swept.append(key)
    scenario = _scenario(config_name, source, ordered)
    lists = {key: ordered[key] for key in ordered if key in swept}
    fixed_keys = [key for key in ordered if key not in swept]
    mapped = {"model", "dist_backend", "nproc_per_node", "thread_count", "save_calls", "repeat", "save_dir",
              "sync_files", "backend", "load_calls"}
    clash = sorted(set(options) & mapped)
    if clash:
        raise ConfigError(f"--{clash[0].replace('_', '-')}: set by {source} (an s3torchbenchmarking config); "
                          "change it with a Hydra override, e.g. +model=NAME or epochs=N")

    from omegaconf import OmegaConf

    check_job_count((len(ordered[key]) for key in [*fixed_keys, *lists]), source, max_jobs)
    jobs, configs = [], []
    for values in itertools.product(*(ordered[key] for key in [*fixed_keys, *lists])):
        job = OmegaConf.create(config)
        for key, value in zip([*fixed_keys, *lists], values, strict=True):
            OmegaConf.update(job, key, value, merge=True, force_add=True)
        job_config = OmegaConf.to_container(job)
        job_params = {key: _get(job_config, key) for key in lists}
        try:
            _check_keys(job_config, scenario)
            job_options = scenario.options(job_config)
        except ConfigError as error:
            described = ", ".join(f"{k}={v}" for k, v in job_params.items())
            raise ConfigError(f"{source}: job {len(jobs)} ({described}): {error}") from None
        jobs.append((job_params, {**job_options, **options}))
        configs.append(job_config)
    ours = sorted({str(_get(c, "model")) for c in configs} - set(MODELS))
    if ours:
        notes.append(f"+model={', '.join(ours)}: ckpt-bench's own model(s), not s3torchbenchmarking's")
    if scenario is not DCP:
        notes.append(f"{scenario.name} runs on the Lightning backend: one rank, no training step, "
                     f"{'as theirs' if scenario is LIGHTNING else 'a Lightning checkpoint around the state dict'}")
    if any("save_one_in" in c for c in configs):
        notes.append("save_one_in recorded, unused: their checkpoint benchmarks train no step between saves")
    root = _resolve_sweep_dir(sweep_dir, config_name)
    multirun = {**config, "hydra": {**hydra, "sweep": {**(hydra.get("sweep") or {}), "dir": str(root)},
                                    "overrides": {"task": list(overrides)}}}
    saved = {SAVED_KEY: {"source": source, "config": definition, "overrides": list(overrides), "options": options}}
    return Translation(config_name, scenario, lists, jobs, configs, root, multirun, saved, notes)


# --- their metrics, from our runs ------------------------------------------------------------------


def _rank_saves(run_dir: Path) -> dict[int, list[float]]:
    """Each rank's save durations (SAVE_START to SAVE_END, what their timers enclose), in order."""
    events = read_event_files(event_files(run_dir / "events"))
    return rank_durations(events, "save", "total")


def _run_dirs(report: Report) -> list[Path]:
    return [Path(d) for d in report.run.repetitions or [report.run.dir]]


def job_metrics(report: Report, scenario: Scenario) -> dict:
    """Their `metrics` with their meanings, from the job's runs (every repetition of a DCP job), and
    ours beside them under names that say what they are."""
    model_mib = report.config["model_state_bytes"] / MIB
    written: list[float] = []
    per_run = []
    for run_dir in _run_dirs(report):
        run_report = Report.from_json(json.loads((run_dir / "report.json").read_text()))
        written += [save.bandwidth for save in run_report.saves or [] if save.bandwidth]
        per_run.append(_rank_saves(run_dir))
    ours = {"model_mib": model_mib, "written_bytes_bandwidth_mibs": written}
    if scenario.metrics == "rank0":
        times = [d for durations in per_run for d in durations.get(0, [])]
        return {"throughput_mibs": [model_mib / t for t in times], "save_times_s": times, "utilization": {}, **ours}
    durations = [d for run in per_run for rank in sorted(run) for d in run[rank]]
    # Theirs: each epoch's whole mp.spawn (start-up, model build, save); ours: each epoch's slowest rank's save.
    processing = [max(d for rank in run.values() for d in rank) for run in per_run if run]
    return {"throughput_mibs": [model_mib / d for d in durations], "corrected_save_durations_s": durations,
            "processing_durations_s": processing, **ours}
