"""The typed input of a launch: `LaunchConfig` (what every run has: where the ranks run, where the
run directory goes, which runner and its options) and `EmitOptions` (`--emit`: a cluster job instead
of a run). `ckpt_bench.benchmark.registry.build_launch` makes one from command-line values."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.options import Flag, Options
from ckpt_bench.core.rundir import check_run_id
from ckpt_bench.launcher.resources import visible_gpus
from ckpt_bench.launcher.torchrun import Topology
from ckpt_bench.report.advice import AdviceOptions

# A launch's runner options (its Config). Covariant: a launch of a framework mode's options is a launch of the
# Megatron options they extend (`LaunchConfig[PrimusConfig]` where `LaunchConfig[MegatronConfig]` is asked).
OptionsT_co = TypeVar("OptionsT_co", bound=Options, covariant=True)


@dataclass
class CommonOptions(Options):
    """Options of every run, whatever runs it."""

    section: ClassVar[str] = "Common options"

    nnodes: int = Flag(("--nnodes",), "Nodes; world size = nodes x ranks per node.", type=int, min=1, default=1,
                       show_default=True).field()
    nproc_per_node: int | None = Flag(("--nproc-per-node",), "Ranks per node (default: one per visible GPU on a "
                                      "GPU host, else 2).", type=int, min=1).field()
    device: str = Flag(("--device",), "Where the ranks run. auto: on the host's GPUs where it has any (refused, "
                       "before anything starts, where its torch cannot use them), else on the CPU; gpu: the same, "
                       "and refused without GPUs; cpu: on the CPU even on a GPU host (its GPUs hidden from the run).",
                       choices=("auto", "gpu", "cpu"), default="auto", show_default=True).field()
    node_rank: int = Flag(("--node-rank",), "This node's rank.", type=int, min=0, default=0,
                          show_default=True).field()
    master_addr: str = Flag(("--master-addr",), "Rendezvous host.", default="127.0.0.1",
                            show_default=True).field()
    master_port: int | None = Flag(("--master-port",), "Rendezvous port (default: a free port when --nnodes 1).",
                                   type=int, min=1, max=65535).field()
    rdzv_endpoint: str | None = Flag(("--rdzv-endpoint",), "torchrun's c10d rendezvous instead of "
                                     "--master-addr/--master-port.", metavar="HOST:PORT").field()
    run_id: str | None = Flag(("--run-id",), "Run directory name <runs-dir>/<run-id>; required with --nnodes > 1, "
                              "the same on every node (node 0 creates the directory, the others join it).").field()
    runs_dir: str = Flag(("--runs-dir",), "Where run directories go.", default="runs", show_default=True).field()
    output: str | None = Flag(("--output",), "Also write the JSON report here.").field()
    format: str | None = Flag(("--format",), "What to print on stdout: a summary table, or the JSON report "
                              "(default: table on a terminal, JSON otherwise).", choices=("table", "json")).field()
    plan_only: bool = Flag(("--plan",), "Print what the run would do and do nothing else (JSON, or a table on a "
                           "terminal): what the ranks would get, where each sits and, where the model is known, "
                           "the bytes and files each would write; a workload with --subset shows the ranks that "
                           "would run.", type=bool).field(False)
    repeat: int = Flag(("--repeat",), "Run the whole benchmark N times, each in fresh processes, and report "
                       "medians and spread (repeat_stats).", type=int, min=1, default=1,
                       show_default=True).field()


@dataclass
class LaunchConfig(CommonOptions, AdviceOptions, Generic[OptionsT_co]):
    """Everything one run needs, typed: the common options, the advice options, the runner's name and its
    options."""

    runner: str = "megatron"  # a backend or framework mode of ckpt_bench.benchmark.registry
    options: OptionsT_co = field(kw_only=True)  # the runner's typed options (its Config)
    topology: Topology = field(init=False)

    def __post_init__(self) -> None:
        super().__post_init__()  # the advice options' checks
        if self.nnodes > 1 and self.node_rank >= self.nnodes:
            raise ConfigError(f"--node-rank {self.node_rank}: must be below --nnodes {self.nnodes}")
        if self.run_id is not None:
            check_run_id(self.run_id)
        if self.nproc_per_node is None:  # one rank per GPU, as torchrun users give it; two gloo ranks on a CPU host
            self.nproc_per_node = (visible_gpus() if self.device != "cpu" else 0) or 2
        self.topology = Topology(nnodes=self.nnodes, nproc_per_node=self.nproc_per_node, node_rank=self.node_rank,
                                 master_addr=self.master_addr, master_port=self.master_port,
                                 rdzv_endpoint=self.rdzv_endpoint)

    @property
    def runs_path(self) -> Path:
        return Path(self.runs_dir).expanduser()  # `~` too when the shell left it (quoted, or --runs-dir=~/x)


@dataclass
class EmitOptions(Options):
    """`--emit slurm|k8s` and the job's own settings (never passed on to the nodes)."""

    section: ClassVar[str] = "Cluster jobs (--emit): print the job, run nothing here"

    emit: str | None = Flag(("--emit",), "Print an sbatch script (slurm) or a Kubeflow PyTorchJob manifest (k8s) "
                            "running this benchmark on --nnodes nodes, instead of running it.",
                            choices=("slurm", "k8s")).field()
    shared_dir: str | None = Flag(("--shared-dir",), "A folder every node mounts: run directories and checkpoints "
                                  "go there.").field()
    job_name: str | None = Flag(("--job-name",), "Job name (default: ckpt-bench); the k8s run id.").field()
    workdir: str | None = Flag(("--workdir",), "Where the nodes run ckpt-bench (default: this checkout; with "
                               "--container-image, --shared-dir).").field()
    gpus_per_node: int | None = Flag(("--gpus-per-node",), "GPUs to request per node.", type=int, min=0).field()
    container_image: str | None = Flag(("--container-image",), "Container image (Slurm: pyxis --container-image; "
                                       "k8s: image): each node installs ckpt-bench into its Python from --wheelhouse, "
                                       "offline, keeping its torch.").field()
    wheelhouse: str | None = Flag(("--wheelhouse",), "[with --container-image] The wheelhouse (make wheelhouse) the "
                                  "nodes install ckpt-bench from, as the nodes see it (default: "
                                  "<shared-dir>/wheelhouse).", metavar="DIR").field()
    container_mounts: str | None = Flag(("--container-mounts",), "[slurm] pyxis --container-mounts, e.g. "
                                        "/lustre:/lustre.").field()
    slurm_partition: str | None = Flag(("--slurm-partition",), "[slurm] #SBATCH --partition.").field()
    slurm_account: str | None = Flag(("--slurm-account",), "[slurm] #SBATCH --account.").field()
    slurm_time: str | None = Flag(("--slurm-time",), "[slurm] #SBATCH --time (default: 01:00:00).").field()
    k8s_namespace: str | None = Flag(("--k8s-namespace",), "[k8s] Namespace of the PyTorchJob.").field()
    k8s_pvc: str | None = Flag(("--k8s-pvc",), "[k8s] PersistentVolumeClaim mounted at --shared-dir in every "
                               "pod.").field()

    def __post_init__(self) -> None:
        if self.emit is None:
            return
        if not self.shared_dir:
            raise ConfigError(f"--emit {self.emit}: give --shared-dir DIR, a folder every node mounts (run "
                              "directories and checkpoints go there)")
        if self.emit == "k8s" and not self.container_image:
            raise ConfigError("--emit k8s: give --container-image IMAGE (the image the pods train in; ckpt-bench "
                              "is installed into it from --wheelhouse when each pod starts)")
        if self.wheelhouse and not self.container_image:
            raise ConfigError("--wheelhouse: the nodes install from it into a --container-image; without one they "
                              "run this checkout's Python")
