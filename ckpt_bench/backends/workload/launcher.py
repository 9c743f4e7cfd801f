"""The workload backend (`--workload NAME|FILE`), launcher side: checkpoints at the size of a real job,
without its GPUs and without training.

Each rank allocates exactly its share of the job's checkpoint state once (`dlio_layout.layout`: DLIO's
formulas) and saves and loads it through a real engine (`engines`): DLIO's own `torch.save` files,
megatron-core's torch_dist, or PyTorch DCP, on disk, S3 or fsspec URLs. The whole job runs on as many
ranks as it has (multi-node torchrun, `--emit slurm|k8s`), or `--subset` runs its first N ranks on this
host, each writing its real share (MLPerf Storage's subset mode).

Everything that can be refused is refused here, before anything starts: an unknown workload or engine,
a DLIO key we do not read, a layout the world size cannot hold, a subset larger than the job, options the
engine does not read, a host without the memory for its ranks' shares, a disk without room for the saves.
`--plan` prints the layout and does nothing else.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ckpt_bench.backends.workload.engines import ENGINES, EngineInfo, saved_state, state_layout
from ckpt_bench.backends.workload.spec import SECTION, WorkloadSpec
from ckpt_bench.core import megatron_release
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.experiment import experiment_label, name_mismatch, parse_assignment
from ckpt_bench.core.options import Flag
from ckpt_bench.core.rundir import RunDir
from ckpt_bench.core.units import GIB
from ckpt_bench.launcher.base import (
    ASYNC_SAVE,
    DIST_BACKEND,
    LOAD_CALLS,
    PRIMUS_PATH,
    SAVE_CALLS,
    SET,
    SYNC_FILES,
    THREAD_COUNT,
    Backend,
    CheckpointOptions,
    Plan,
    WorkerPass,
)
from ckpt_bench.launcher.config import LaunchConfig
from ckpt_bench.launcher.resources import RANK_BASE_BYTES, check_host_memory, default_dist_backend
from ckpt_bench.launcher.run_info import Ranks, RunInfo, SaveConfig, fsynced
from ckpt_bench.layout.checkpoint_layout import Layout
from ckpt_bench.layout.megatron_shapes import MegatronGPT, fully_parallel_bytes, host_held_bytes
from ckpt_bench.layout.sources import resolve_workload
from ckpt_bench.layout.workload import DLIO_APPLIES_FSYNC, Workload
from ckpt_bench.model.checkpointing import CheckpointSettings
from ckpt_bench.model.job import TrainingJob
from ckpt_bench.projection import JobCheckpoint, ProjectionOptions, projection, projection_inputs
from ckpt_bench.storage import StorageOptions, storage_for

WORKER = "ckpt_bench.backends.workload.worker"
SUBSET_HOSTS = ("first", "busiest")
_PROGRESS = re.compile(r"^(saving|saved|loading|loaded) checkpoint|GiB on rank 0")


@dataclass
class WorkloadConfig(CheckpointOptions, StorageOptions, ProjectionOptions):
    """The workload backend's options."""

    workload: str | None = Flag(
        ("--workload",), "A real job's checkpoint, without training: a name (llama3-8b, llama3-70b, llama3-405b, "
        "llama3-1t: MLPerf Storage's; llama2-7b, llama2-70b), a DLIO workload YAML, or a Primus/Megatron "
        "experiment YAML (the Megatron job it describes: dense or MoE, MLA, MTP, its parallel layout).",
        metavar="NAME|FILE").field()
    engine: str | None = Flag(("--engine",), "How the workload's checkpoints are written: " + "; ".join(
        f"{name}: {info.writes}" for name, info in ENGINES.items()) + ". Default: a Megatron experiment's own "
        "ckpt_format, else torch-save.", choices=tuple(ENGINES)).field()
    set: tuple[str, ...] = SET.field(())
    primus_path: str | None = PRIMUS_PATH.field()
    overrides: dict = field(init=False)  # an experiment's Megatron-LM arguments set with --set
    subset: bool = Flag(("--subset",), "Run only N ranks of the workload's job (N = --nnodes x --nproc-per-node), "
                        "each writing its real share: its first N (MLPerf Storage's subset mode), or whole hosts "
                        "(--subset-hosts).",
                        type=bool).field(False)
    subset_hosts: str = Flag(("--subset-hosts",), "Which of the job's hosts a --subset runs: first (its first N "
                             "ranks, MLPerf Storage's subset mode) or busiest (whole hosts of --nproc-per-node ranks "
                             "each, the job's hosts that write the most first: the client figures a projection of "
                             "the whole job needs).", choices=SUBSET_HOSTS, default="first",
                             show_default=True).field("first")
    job_ranks: int | None = Flag(("--job-ranks",), "Ranks of the whole job, for a workload that names none (a "
                                 "Primus/Megatron experiment; DLIO without subset mode): --plan lays it out, "
                                 "--subset runs its first ranks (default: the ranks that run).", type=int, min=1,
                                 metavar="N").field()
    save_calls: int | None = SAVE_CALLS.field()
    load_calls: int | None = LOAD_CALLS.field()
    time_between_checkpoints: float | None = Flag(
        ("--time-between-checkpoints",), "Seconds every rank waits before each save and load (default: the "
        "workload's; DLIO's compute time between checkpoints).", type=float, min=0, metavar="S").field()
    sync_files: bool | None = SYNC_FILES.field()
    async_save: bool = ASYNC_SAVE.field(False)
    thread_count: int | None = THREAD_COUNT.field()
    dist_backend: str | None = DIST_BACKEND.field()

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.workload:
            raise ConfigError("--backend workload needs --workload NAME|FILE (e.g. --workload llama3-8b)")
        self.overrides = dict(parse_assignment(text) for text in self.set)

    def check_engine(self, engine: str) -> EngineInfo:
        """The engine's description, once the options it does not read are refused."""
        info = ENGINES[engine]
        if self.async_save and not info.async_save:
            raise ConfigError(f"--async-save: the {engine} engine has no asynchronous save; use --engine "
                              f"{' or '.join(name for name, other in ENGINES.items() if other.async_save)}")
        if self.sync_files is False and info.always_fsyncs:
            raise ConfigError(f"--no-sync-files: the {engine} engine's writer always fsyncs its files; use "
                              "--engine torch-save or dcp to write without fsync")
        if self.thread_count is not None and info.default_threads is None:
            raise ConfigError(f"--thread-count: the {engine} engine writes each rank's files one after the "
                              "other; writer threads apply to --engine dcp and torch_dist")
        return info


@dataclass(frozen=True)
class WorkloadRun:
    """A workload resolved against the ranks that run: everything `plan` and `--plan` report."""

    workload: Workload
    engine: str
    """The engine that writes it: --engine, else a Megatron experiment's own ckpt_format, else torch-save."""
    info: EngineInfo
    state: str
    """Whose tensors the engine saves (`engines.saved_state`): "dlio" or "megatron"."""
    layout: Layout
    """What the ranks that run write (`layout.ranks`); its per-rank bytes cover the whole job."""
    job_layout: Layout | None
    """Every rank of the job's share, where it was laid out to pick the ranks that run (`layout` itself where all
    of them run); None: the projection lays it out when it needs it."""
    ranks: int
    save_calls: int
    load_calls: int
    time_between: float
    experiment: Path | None = None
    """The experiment file a Megatron workload was read from (its name is the file's exp_name)."""

    @property
    def label(self) -> str | None:
        """`exp_name (file.yaml)` of an experiment's workload (`core.experiment.experiment_label`)."""
        return experiment_label(self.workload.name, self.experiment) if self.experiment else None

    @property
    def checkpoint_settings(self) -> CheckpointSettings | None:
        """A Megatron experiment's checkpoint settings, each with its source; None for another workload."""
        return TrainingJob.from_dict(self.workload.megatron).checkpointing if self.workload.megatron else None

    @property
    def name_notes(self) -> list[str]:
        note = name_mismatch(self.workload.name, self.experiment) if self.experiment else None
        return [note] if note else []


def default_engine(workload: Workload) -> str:
    """A Megatron experiment saves in its own `ckpt_format`; DLIO's workloads through DLIO's torch.save."""
    if workload.megatron is not None:
        return TrainingJob.from_dict(workload.megatron).ckpt_format
    return "torch-save"


def resolve(config: WorkloadConfig, launch: LaunchConfig) -> WorkloadRun:
    """The workload, its layout on the ranks that run, and its counts; raises ConfigError."""
    workload = resolve_workload(config.workload, config.overrides, config.primus_path)
    engine = config.engine or default_engine(workload)
    if engine not in ENGINES:
        raise ConfigError(f"--workload {config.workload}: its ckpt_format {engine!r} has no engine here; give "
                          f"--engine ({', '.join(ENGINES)})")
    info = config.check_engine(engine)
    ranks = launch.topology.world_size
    subset = config.subset or workload.subset
    job = workload.world_size
    if config.job_ranks is not None:
        if job is not None and job != config.job_ranks:
            raise ConfigError(f"--job-ranks {config.job_ranks}: workload {workload.name!r} is a job of {job} ranks")
        job = config.job_ranks
    if launch.plan_only and not subset and job is not None:
        ranks = job  # --plan alone: the whole job's layout, whatever would run here
    if job is None:  # a DLIO YAML without subset mode: the job is what runs (DLIO: mpirun -np)
        if config.subset:
            raise ConfigError(f"--subset: workload {workload.name!r} names no job size: give it with --job-ranks N "
                              "(a DLIO YAML can also set checkpoint.mode: subset and model.parallelism.data); "
                              f"without it the job is the {ranks} rank(s) that run")
        job, subset = ranks, False
    if ranks > job:
        raise ConfigError(f"{ranks} ranks (--nnodes x --nproc-per-node) exceed workload {workload.name!r}, a job of "
                          f"{job} ranks: run at most {job}")
    if ranks < job and not subset:
        raise ConfigError(f"workload {workload.name!r} is a job of {job} ranks and {ranks} would run: run all "
                          f"{job} (--nnodes x --nproc-per-node, or --emit slurm|k8s), or add --subset to run its "
                          f"first {ranks}, each writing its real share")
    if config.subset_hosts != "first" and ranks >= job:
        raise ConfigError(f"--subset-hosts {config.subset_hosts}: picks the hosts of a --subset run, and all {job} "
                          "ranks of the job would run")
    try:
        job_layout = (state_layout(info, workload, job) if ranks == job or config.subset_hosts == "busiest"
                      else None)
        if ranks == job:
            layout = job_layout
        else:
            layout = state_layout(info, workload, job, range(ranks) if job_layout is None else busiest_hosts(
                job_layout.job_rank_bytes, ranks, launch.topology.nproc_per_node))
    except ValueError as error:
        raise ConfigError(f"--workload {config.workload}: {error}") from None
    if workload.state == "megatron_fsdp2" and not launch.plan_only:
        raise ConfigError(f"--workload {config.workload}: use_torch_fsdp2 is sized by --plan (each rank's share of "
                          "every parameter and its optimizer state); the engines allocate megatron-core DDP's state, "
                          "so a run would write another checkpoint than the job's: add --plan")
    save_calls = config.save_calls or max(workload.num_checkpoints_write, 0)
    if not save_calls:
        raise ConfigError(f"workload {workload.name!r} writes no checkpoint (num_checkpoints_write "
                          f"{workload.num_checkpoints_write}): give --save-calls N")
    load_calls = config.load_calls if config.load_calls is not None else max(workload.num_checkpoints_read, 0)
    if load_calls > save_calls:
        raise ConfigError(f"--load-calls {load_calls}: loads read back saves 1..N, and only {save_calls} are "
                          "written; use at most that")
    time_between = (config.time_between_checkpoints if config.time_between_checkpoints is not None
                    else abs(workload.time_between_checkpoints))  # DLIO sleeps the absolute value
    experiment = Path(config.workload).expanduser() if workload.megatron is not None else None
    return WorkloadRun(workload, engine, info, saved_state(info, workload), layout, job_layout, ranks, save_calls,
                       load_calls, time_between,
                       experiment if experiment is not None and experiment.is_file() else None)


def busiest_hosts(rank_bytes: Sequence[int], ranks: int, per_host: int) -> list[int]:
    """The job ranks `ranks` running ranks play as whole hosts of `per_host` ranks, the job's hosts (ranks
    `h * per_host ...`) that write the most bytes first (the lowest host first among equals): running host i
    plays the i-th busiest. Raises ConfigError where the job or the run is not whole hosts."""
    job = len(rank_bytes)
    if job % per_host or ranks % per_host:
        raise ConfigError(f"--subset-hosts busiest runs whole hosts of --nproc-per-node {per_host} ranks: the job's "
                          f"{job} ranks and the {ranks} that run must both be multiples of it")
    hosts = sorted(range(job // per_host), key=lambda h: (-sum(rank_bytes[h * per_host:(h + 1) * per_host]), h))
    return [host * per_host + local for host in hosts[:ranks // per_host] for local in range(per_host)]


def saves_async(config: WorkloadConfig, run: WorkloadRun) -> bool:
    """--async-save, or the experiment's own async save (with its persistent worker) where the engine has one."""
    settings = run.checkpoint_settings
    return config.async_save or bool(settings and settings.async_save and run.info.async_save)


def _megatron_bytes(run: WorkloadRun, full: Layout, per_host: int,
                    file_system: bool) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None] | None:
    """(written under torch_dist's fully parallel save, held) tensor bytes per rank of a Megatron job, whatever
    its engine, and on a `file_system` each host's held bytes with its ranks' shared replicas once (a page cache
    serves them once; an object store does not, and the projection reads them nowhere else): what the
    projection's other settings and formats move; None for another state. A torch_dist layout saved fully
    parallel already holds the first two (`full`); another is laid out again."""
    if run.state != "megatron":
        return None
    settings = run.checkpoint_settings or CheckpointSettings()
    world = full.world_size
    gpt = MegatronGPT(run.workload, world)
    hosts = host_held_bytes(gpt, per_host) if file_system else None
    if run.engine == "torch_dist" and settings.ckpt_fully_parallel_save:
        return tuple(share.bytes for share in full.ranks), tuple(share.resident_bytes for share in full.ranks), hosts
    written, held = fully_parallel_bytes(gpt)
    return tuple(written[rank] for rank in range(world)), tuple(held[rank] for rank in range(world)), hosts


def _legacy_host_reads(full: Layout, per_host: int, detect: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Megatron's legacy format, each host's restart reads with a model file its ranks share read once (the
    data-parallel replicas of one model-parallel folder, `layout.megatron_torch.folder`: tensor, pipeline and expert
    rank) and each rank's own optimizer files; and what auto-detect adds to them (rank 0's model file, read first,
    on a host none of whose ranks reads it anyway)."""
    first = (full.ranks[0].tp_rank, full.ranks[0].pp_rank, full.ranks[0].ep_rank)
    reads, detects = [], []
    for start in range(0, full.world_size, per_host):
        models: dict[tuple[int, int, int], int] = {}
        optimizer = 0
        for share in full.ranks[start:start + per_host]:
            own = sum(f.nbytes for f in share.files if f.kind == "optimizer")
            models[(share.tp_rank, share.pp_rank, share.ep_rank)] = share.load_bytes - own
            optimizer += own
        reads.append(sum(models.values()) + optimizer)
        detects.append(0 if first in models else detect)
    return tuple(reads), tuple(detects)


def _legacy_fields(full: Layout, per_host: int, detect: int, legacy: bool) -> dict:
    if not legacy:
        return {}
    reads, detects = _legacy_host_reads(full, per_host, detect)
    return {"legacy_host_read_bytes": reads, "legacy_host_detect_bytes": detects}


def host_memory_needed(run: WorkloadRun, info: EngineInfo, async_save: bool, nproc_per_node: int) -> int:
    """Bytes the busiest host needs: its ranks' resident state (and an async save's staging copy), plus
    each rank's process. Ranks are laid out node by node, `nproc_per_node` each."""
    copies = 1 + (info.async_staging_copies if async_save else 0)
    per_host = [0] * (-(-run.ranks // nproc_per_node))
    for index, share in enumerate(run.layout.ranks):  # running rank `index` on host index // nproc_per_node
        per_host[index // nproc_per_node] += share.resident_bytes * copies + RANK_BASE_BYTES
    return max(per_host)


def job_checkpoint(run: WorkloadRun, config: WorkloadConfig, per_host: int, storage: dict) -> JobCheckpoint | None:
    """The whole job's checkpoint at its size, for the projection (None where the job is not whole hosts of
    `per_host` ranks): each rank's bytes and files, written and read, and which of the job's hosts ran."""
    layout, world = run.layout, run.layout.world_size
    if world % per_host:
        return None
    full = run.job_layout or state_layout(run.info, run.workload, world)
    threads = config.thread_count or run.info.default_threads or 1
    files = [len(run.info.files_written(share.rank, [f.name for f in share.files], threads))
             if share.bytes or share.rank == 0 else 0 for share in full.ranks]
    running = [share.rank for share in layout.ranks]
    hosts = [running[start] // per_host for start in range(0, len(running), per_host)]
    whole = all(running[i * per_host:(i + 1) * per_host] == list(range(h * per_host, (h + 1) * per_host))
                for i, h in enumerate(hosts))
    settings = run.checkpoint_settings
    file_system = storage["storage"] == "disk"
    megatron = _megatron_bytes(run, full, per_host, file_system)
    # auto_detect_ckpt_format: every rank loads rank 0's common state first; the legacy format's is its model file
    detect = (sum(f.nbytes for f in full.ranks[0].files if f.kind == "model")
              if settings and settings.auto_detect_ckpt_format and run.engine == "torch" else 0)
    return JobCheckpoint(
        engine=run.engine, world_size=world, ranks_per_node=per_host,
        write_bytes=tuple(share.bytes for share in full.ranks), write_files=tuple(files),
        read_bytes=tuple(share.load_bytes + detect for share in full.ranks),
        # files read: its own, or (a rank that reads what others wrote: a replica) at least one
        read_files=tuple(max(count, 1) if share.load_bytes else 0 for count, share in zip(files, full.ranks,
                                                                                            strict=True)),
        storage=storage["storage"], storage_endpoint=storage.get("s3_endpoint"),
        storage_part_bytes=storage.get("s3_part_size"),
        thread_count=threads, async_save=saves_async(config, run), workload=dataclasses.asdict(run.workload),
        state=run.state, hosts_that_ran=tuple(hosts) if whole else None,
        notes=() if whole else (f"the ranks that ran are not whole hosts of {per_host}: no client figure is "
                                "measured (--subset-hosts busiest runs whole hosts)",),
        settings=None if settings is None else settings.as_dict(),
        fully_parallel_bytes=None if megatron is None else megatron[0],
        held_bytes=None if megatron is None else megatron[1], auto_detect_read_bytes=detect,
        host_held_bytes=None if megatron is None else megatron[2],
        **_legacy_fields(full, per_host, detect, megatron is not None and run.engine == "torch" and file_system))


def projects(config: WorkloadConfig, run: WorkloadRun) -> bool:
    """Whether a run (or its --plan) projects the whole job: a subset's does, and any run given a projection
    figure; a run of the whole job without one reports what it measured."""
    return run.layout.is_subset or bool(ProjectionOptions.of(config).given)


def model_facts(run: WorkloadRun) -> dict:
    """What model the checkpoint is of: its kind, its parameters (total, and active: a token's top-k experts),
    its parallel sizes."""
    parameters = run.layout.parameters
    facts: dict = {"model": "dense", "parameters": parameters.total if parameters else None,
                   "active_parameters": parameters.active if parameters else None}
    if run.workload.megatron is not None:
        job = TrainingJob.from_dict(run.workload.megatron)
        parallel = job.parallelism(run.layout.world_size)
        facts |= {"model": job.architecture.kind, "vocabulary": job.architecture.vocab_source,
                  "parallel": {"tp": parallel.tp, "pp": parallel.pp, "ep": parallel.ep, "etp": parallel.expert_tp,
                               "cp": parallel.cp, "dp": parallel.dp, "expert_dp": parallel.edp,
                               "layers_per_stage": list(parallel.layers_per_stage),
                               # Virtual pipeline stages: each pipeline rank's model chunks, in stage order.
                               "virtual_stages": parallel.pipeline.vp,
                               "layers_per_chunk": [[len(chunk.layers) for chunk in parallel.chunks(rank)]
                                                    for rank in range(parallel.pp)]},
                  "distributed_optimizer": job.distributed_optimizer}
        # The precision-aware optimizer's saved dtypes: torch_dist's (and dcp's, the same shards) per state;
        # Megatron-LM's legacy distrib_optim.pt gathers them all into fp32.
        if job.precision_aware_optimizer is not None and run.state == "megatron" and run.engine != "torch":
            saved = dict(job.distributed_states)
            facts["optimizer_states_saved"] = saved
            if saved["param"] == "int16":
                facts["optimizer_states_assumed"] = (
                    "main parameters saved as int16 remainders: megatron-core's store_param_remainders, its default "
                    "with Transformer Engine 2.1 or later (not checked here: no Transformer Engine); with an older "
                    "one they are fp32, 2 bytes more a parameter")
    return facts


def preview(config: WorkloadConfig, launch: LaunchConfig, run: WorkloadRun) -> dict:
    """`--plan`: the layout, in bytes of tensor data (no serialization overhead)."""
    layout = run.layout
    return {
        "workload": run.workload.name,
        **({"experiment": run.label} if run.label else {}),
        **({"exp_name_differs": " ".join(run.name_notes)} if run.name_notes else {}),
        "engine": run.engine,
        **model_facts(run),
        "world_size": layout.world_size,
        "subset": run.ranks if layout.is_subset else None,
        "total_bytes": layout.total_bytes,
        "run_bytes": layout.run_bytes,
        "rank_bytes": dataclasses.asdict(layout.spread),
        # A subset's own ranks, as its rank list below shows them (rank_bytes is the whole job's).
        **({"subset_rank_bytes": dataclasses.asdict(layout.run_spread)} if layout.is_subset else {}),
        "save_calls": run.save_calls,
        "load_calls": run.load_calls,
        "host_memory_needed_bytes": host_memory_needed(run, run.info, saves_async(config, run),
                                                       launch.topology.nproc_per_node),
        "ranks": [{"rank": share.rank, "bytes": share.bytes,
                   "files": run.info.files_written(share.rank, [f.name for f in share.files],
                                                   config.thread_count or run.info.default_threads or 1)}
                  for share in layout.ranks],
        **(facts := _projection(config, launch, run)),
        **_job_time(run, facts.get("projection")),
    }


def _job_time(run: WorkloadRun, projected: dict | None) -> dict:
    """The whole job's benchmark time at the projected save and load times (`--emit slurm` checks it against
    --slurm-time): its first save, its second, the later ones, its loads and the waits between; {} where nothing
    projects one of them."""
    if projected is None or run.layout.is_subset:
        return {}
    parts = {key: (projected.get(key) or {}).get("range_s") for key in ("save", "second_save", "steady_save", "load")}
    counts = {"save": 1, "second_save": min(1, run.save_calls - 1), "steady_save": max(0, run.save_calls - 2),
              "load": run.load_calls}
    if any(count and (parts[key] is None or parts[key][0] is None) for key, count in counts.items()):
        return {}  # a save or load the projection does not time (one the hosts cannot hold: no time)
    waits = run.time_between * (run.save_calls + run.load_calls)

    def total(end: int) -> float | None:
        ends = [parts[key][end] for key, count in counts.items() if count]
        return None if None in ends else waits + sum(parts[key][end] * count for key, count in counts.items() if count)

    what = (f"{run.save_calls} saves and {run.load_calls} loads at the projected times, {run.time_between:g} s "
            "between checkpoints")
    return {"job_time": {"range_s": [total(0), total(1)], "what": what}}


def _projection(config: WorkloadConfig, launch: LaunchConfig, run: WorkloadRun) -> dict:
    """--plan's hosts: what a save moves per host (how many write at all, the busiest), and the projection of
    the whole job where the plan projects (`projects`)."""
    job = job_checkpoint(run, config, launch.topology.nproc_per_node,
                         storage_for(config.save_dir, config).describe())
    if job is None:
        return {"hosts": None, "hosts_why": f"the job's {run.layout.world_size} ranks are not whole hosts of "
                f"--nproc-per-node {launch.topology.nproc_per_node}"}
    facts: dict = {"hosts": {"nodes": job.nodes, "ranks_per_node": job.ranks_per_node, "save": job.save.as_dict(),
                             "load": job.load.as_dict()}}
    if projects(config, run):
        facts["projection"] = projection(dataclasses.replace(job, hosts_that_ran=None), ProjectionOptions.of(config))
    return facts


@dataclass(kw_only=True)
class WorkloadRunInfo(RunInfo):
    """A workload run: whose checkpoint, through which engine, and its bytes by DLIO's and MLPerf's counts."""

    workload: str
    engine: str
    job_world_size: int
    """Ranks of the whole job the workload describes."""
    subset: int | None
    """Ranks that ran of it (--subset); None: all."""
    subset_job_ranks: list[int] | None
    """The job's ranks they played, in order (--subset-hosts); None: all."""
    tensor_parallel_size: int
    pipeline_parallel_size: int
    zero_stage: int
    tensor_bytes_per_save: int
    """Tensor bytes the ranks that ran save each time."""
    job_tensor_bytes_per_save: int
    mlperf_checkpoint_bytes: int
    """MLPerf's checkpoint_size_GB in bytes (`Layout.mlperf_checkpoint_bytes`: what the ranks that ran write a
    save, or DLIO's own figure for DLIO's formulas); the report's MLPerf section is computed from it."""
    save_calls: int
    load_calls: int
    time_between_checkpoints: float
    thread_count: int
    dlio_applies_fsync: bool
    workload_asks_fsync: bool
    dist_backend: str
    model: str
    """What the checkpoint is of: dense, MoE, with +MLA, +MTPn (`Architecture.kind`)."""
    parameters: int | None
    """The model's parameters, each once (None: no transformer)."""
    active_parameters: int | None
    """Those one token passes through (its top-k experts)."""
    expert_parallel_size: int
    rank_bytes_min: int
    """Tensor bytes per rank per save over the whole job: the least, median, most, and the rank of the most."""
    rank_bytes_median: int
    rank_bytes_max: int
    largest_rank: int


def run_info(config: WorkloadConfig, run: WorkloadRun, spec: WorkloadSpec, launch: LaunchConfig) -> WorkloadRunInfo:
    workload, layout = run.workload, run.layout
    # A Megatron GPT's state comes with Adam's (the distributed optimizer's unless the experiment says not),
    # torch_dist's saved fully parallel; DLIO's state has no such settings (None: null in the report).
    megatron = run.state == "megatron"
    distributed = TrainingJob.from_dict(workload.megatron).distributed_optimizer if workload.megatron else True
    # The wrappers' settings where the engine follows them (torch_dist): the experiment's, else Megatron-LM's.
    fully_parallel = (run.checkpoint_settings or CheckpointSettings()) if run.info.fully_parallel else None
    facts, spread = model_facts(run), layout.spread
    return WorkloadRunInfo(
        backend="workload",
        ranks=Ranks.of(launch.topology),
        saves=SaveConfig(
            data_parallel_size=layout.data_parallelism,
            ckpt_format=run.engine,
            ckpt_fully_parallel_save=None if fully_parallel is None else fully_parallel.ckpt_fully_parallel_save,
            ckpt_fully_parallel_load=None if fully_parallel is None else fully_parallel.ckpt_fully_parallel_load,
            async_save=saves_async(config, run),
            optimizer="adam" if megatron else None,
            use_distributed_optimizer=distributed if megatron else None,
            params_dtype=workload.model_datatype,
            main_params_dtype=workload.optimizer_datatype if megatron else None,
            exp_avg_dtype=workload.optimizer_datatype,
            exp_avg_sq_dtype=workload.optimizer_datatype,
            sync_files=spec.sync_files,
            fsync=fsynced(spec.sync_files, spec.storage),
        ),
        storage=spec.storage,
        experiment=run.label,
        workload=workload.name,
        engine=run.engine,
        job_world_size=layout.world_size,
        subset=run.ranks if layout.is_subset else None,
        subset_job_ranks=[share.rank for share in layout.ranks] if layout.is_subset else None,
        tensor_parallel_size=workload.tensor_parallelism,
        pipeline_parallel_size=workload.pipeline_parallelism,
        zero_stage=workload.zero_stage,
        tensor_bytes_per_save=layout.run_bytes,
        job_tensor_bytes_per_save=layout.total_bytes,
        mlperf_checkpoint_bytes=layout.mlperf_checkpoint_bytes,
        save_calls=run.save_calls,
        load_calls=run.load_calls,
        time_between_checkpoints=run.time_between,
        thread_count=spec.thread_count,
        dlio_applies_fsync=DLIO_APPLIES_FSYNC,
        workload_asks_fsync=workload.fsync,
        dist_backend=spec.dist_backend,
        model=facts["model"],
        parameters=facts["parameters"],
        active_parameters=facts["active_parameters"],
        expert_parallel_size=facts.get("parallel", {}).get("ep", 1),
        rank_bytes_min=spread.min,
        rank_bytes_median=spread.median,
        rank_bytes_max=spread.max,
        largest_rank=spread.largest_rank,
    )


class WorkloadBackend(Backend[WorkloadConfig]):
    name = "workload"
    title = "Workloads (--workload): a real job's checkpoint, without its GPUs"
    Config = WorkloadConfig
    selected_by: ClassVar[str] = "workload"

    def preview(self, launch: LaunchConfig[WorkloadConfig]) -> dict:
        return preview(launch.options, launch, resolve(launch.options, launch))

    @staticmethod
    def _projection_inputs(config: WorkloadConfig, run: WorkloadRun, launch: LaunchConfig,
                           storage: dict) -> dict | None:
        if not projects(config, run):
            return None
        job = job_checkpoint(run, config, launch.topology.nproc_per_node, storage)
        return None if job is None else projection_inputs(job, ProjectionOptions.of(config))

    def plan(self, launch: LaunchConfig[WorkloadConfig]) -> Plan:
        config = launch.options
        storage = storage_for(config.save_dir, config)  # validates the S3 settings; no I/O
        run = resolve(config, launch)
        info = run.info
        if storage.kind not in info.storage_kinds:
            raise ConfigError(f"--engine {run.engine} writes to {' or '.join(info.storage_kinds)} only, not "
                              f"{storage.kind} (--save-dir {config.save_dir}); use --engine torch-save or dcp")
        sync_files = True if config.sync_files is None else config.sync_files
        if storage.kind == "s3":
            if config.sync_files:
                raise ConfigError("--sync-files applies to a local --save-dir only: an upload is durable once S3 "
                                  "acknowledges it")
            sync_files = False
        check_host_memory(
            host_memory_needed(run, info, saves_async(config, run), launch.topology.nproc_per_node),
            f"workload {run.workload.name} through {run.engine}: the ranks of one host",
            "run fewer ranks per host (--nproc-per-node, --subset), or a smaller workload")
        # megatron-core 0.17+'s async strategy where the engine is megatron-core's (Megatron-LM's default nvrx, or
        # mcore where nvidia-resiliency-ext cannot run it here: said in a note).
        strategy, release_notes = (megatron_release.settle(None, saves_async(config, run))
                                   if run.engine == "torch_dist" else (None, []))
        spec = WorkloadSpec(
            workload=dataclasses.asdict(run.workload), world_size=run.layout.world_size,
            run_ranks=[share.rank for share in run.layout.ranks] if run.layout.is_subset else None,
            engine=run.engine,
            save_calls=run.save_calls, load_calls=run.load_calls, time_between_checkpoints=run.time_between,
            sync_files=sync_files, async_save=saves_async(config, run),
            thread_count=config.thread_count or info.default_threads or 1,
            dist_backend=config.dist_backend or default_dist_backend(), storage=storage.describe(), seed=1234,
            async_strategy=strategy)
        passes = [WorkerPass("save", ["--phase", "save"])]
        if run.load_calls:
            passes.append(WorkerPass("load", ["--phase", "load"]))
        return Plan(
            name=f"workload-{run.workload.name}-{run.engine}",
            worker_module=WORKER,
            resolved_config={SECTION: spec.section_json(), "save_dir": config.save_dir},
            spec=spec,
            run_info=run_info(config, run, spec, launch),
            passes=passes,
            checkpoints=config.checkpoints(storage, writers_per_rank=spec.thread_count,
                                           expected_bytes=run.layout.run_bytes * run.save_calls),
            show_progress=lambda line: bool(_PROGRESS.search(line.strip())),
            outputs=write_dlio_summary,
            notes=[*_notes(config, run, sync_files, storage.kind), *release_notes],
            projection_inputs=self._projection_inputs(config, run, launch, storage.describe()),
        )


def _notes(config: WorkloadConfig, run: WorkloadRun, sync_files: bool, storage_kind: str) -> list[str]:
    notes = list(run.name_notes)
    if run.layout.is_subset:
        notes.append(f"subset: {_job_ranks([share.rank for share in run.layout.ranks])} of a "
                     f"{run.layout.world_size}-rank job, each with its real share ({run.layout.run_bytes / GIB:.2f} "
                     f"of {run.layout.total_bytes / GIB:.2f} GiB per save)")
    # DLIO's workloads only: an experiment's checkpoint.fsync is ours, and an engine that always fsyncs has no
    # --no-sync-files to offer.
    dlio_asks = run.workload.megatron is None and run.workload.fsync and not run.info.always_fsyncs
    if storage_kind == "disk" and sync_files and dlio_asks and not DLIO_APPLIES_FSYNC:
        notes.append("fsync on: DLIO asks for it in the workload (checkpoint.fsync) but never calls it; run with "
                     "--no-sync-files to reproduce what DLIO does")
    if run.state == "megatron":
        notes.append(f"the {run.engine} engine saves a Megatron GPT's sharded state with its optimizer, not DLIO's "
                     "files: bytes and files per rank differ (docs/workloads.md); mlperf.dlio.checkpoint_size_GB is "
                     "what these ranks write of that state a save")
    return notes


def _job_ranks(ranks: list[int]) -> str:
    """Job ranks as runs of consecutive ranks: "ranks 0..7", "ranks 8..15, 0..7"."""
    runs: list[list[int]] = []
    for rank in ranks:
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return "ranks " + ", ".join(f"{a}..{b}" if b > a else f"{a}" for a, b in runs)


def write_dlio_summary(run: RunDir, report: dict) -> None:
    """A DLIO-style summary.json beside report.json (tools that read MLPerf results read it)."""
    from ckpt_bench.report.mlperf import dlio_summary

    if report.get("mlperf"):
        run.write_json("summary.json", dlio_summary(report["mlperf"], report))
