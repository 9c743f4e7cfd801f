"""One way in: options declared once per backend, refused where the chosen runner does not read them,
one options <-> argv round trip, one function picking what runs (CLI, sweeps and --emit alike), a
grouped --help."""

import json

import pytest
from click.testing import CliRunner
from helpers import DATAFLUX_VARIABLES

from ckpt_bench.benchmark import registry
from ckpt_bench.cli.launch import launch, parse_argv
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.options import to_argv
from ckpt_bench.sweep.run import build_sweep


def refused(*args) -> str:
    """The one line `ckpt_launch.py ARGS` refuses with (in-process: nothing is launched)."""
    result = CliRunner().invoke(launch, ["--runs-dir", "/nonexistent/runs", *args],
                                env={name: None for name in DATAFLUX_VARIABLES})
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--backend", "dcp", "--model", "tiny", "--tp", "2"],
         "--tp is not read by the dcp backend; it applies to: --backend megatron, --framework primus, "
         "--framework megatron-lm"),
        (["--backend", "megatron", "--thread-count", "4"],
         "--thread-count is not read by the megatron backend; it applies to: --backend dcp"),
        (["--backend", "lightning", "--ckpt-format", "torch"], "--ckpt-format is not read by the lightning backend"),
        (["--backend", "comms", "--save-dir", "/tmp/x"], "--save-dir is not read by the comms backend"),
        (["--backend", "comms", "--warm-load"], "--warm-load is not read by the comms backend"),
        (["--backend", "comms", "--storage-baseline"], "--storage-baseline is not read by the comms backend"),
        (["--backend", "comms", "--s3-region", "us-east-1"], "--s3-region is not read by the comms backend"),
        (["--slurm-partition", "gpu"], "--slurm-partition applies to --emit slurm|k8s only"),
        (["--comms-max-size", "4KiB"], "--comms-max-size applies to --backend comms or --preflight"),
        (["--backend", "dcp", "--framework", "primus"], "--framework primus runs a Megatron experiment"),
        (["--framework", "megatron-lm"], "--framework megatron-lm: give --megatron-path DIR"),
        (["--framework", "primus", "--training-impact"], "--training-impact runs in the built-in worker"),
        (["--backend", "dcp", "--training-impact"], "--training-impact is not read by the dcp backend"),
        (["--load-tp", "2", "--ckpt-format", "torch"], "that format keeps one file per saving rank and cannot reshard"),
        (["--load-tp", "2", "--use-distributed-optimizer"], "add --set dist_ckpt_optim_fully_reshardable=true"),
        (["--load-tp", "3"], "world size 2 is not divisible by TP x PP x CP = 3"),
        (["--ckpt-format", "torch_dcp"], "saves a model wrapped in torch FSDP2 (--use-torch-fsdp2)"),
        (["--set", "use_torch_fsdp2=true"], "TorchFullyShardedDataParallel builds FSDP2's device mesh on CUDA"),
        (["--set", "non_persistent_save_interval=2"], "needs non_persistent_ckpt_type global or local"),
        (["--ckpt-format", "fsdp_dtensor"], "run Megatron-LM itself (--framework megatron-lm)"),
        (["--framework", "primus", "--load-pp", "2"], "--load-pp/--load-ep/--load-nproc-per-node run in the built-in"),
    ],
)
def test_options_the_runner_does_not_read_are_refused(args, needle):
    assert needle in refused(*args)


def test_primus_aliases_parse_to_the_same_options():
    values, given = parse_argv(["--tensor-model-parallel-size", "2", "--yaml-config-path", "x.yaml",
                                "--no-remove-outputs", "--ckpt-fully-parallel-save"])
    assert (values["tp"], values["config"], values["keep_checkpoints"], values["fully_parallel_save"]) == (
        2, "x.yaml", True, True)
    assert given == {"tp", "config", "keep_checkpoints", "fully_parallel_save"}


@pytest.mark.parametrize("argv", [
    ["--backend", "dcp", "--model", "gpt2", "--thread-count", "4", "--no-sync-files", "--async-save",
     "--save-dir", "s3://b/p", "--s3-region", "us-east-1", "--s3-part-size", "8388608", "--nproc-per-node", "1"],
    ["--tp", "2", "--no-async-save", "--set", "num_layers=8", "--set", "bf16=true", "--keep-checkpoints",
     "--preflight", "--comms-max-size", "64KiB", "--nnodes", "2", "--run-id", "x", "--master-port", "29500"],
    ["--backend", "lightning", "--strategy", "fsdp", "--num-layers", "2", "--load-calls", "1", "--warm-load"],
])
def test_options_argv_round_trip(argv):
    values, given = parse_argv(argv)
    again, given_again = parse_argv(to_argv(values, registry.all_flags(), names=given))
    assert (again, given_again) == (values, given)


def test_one_function_picks_what_runs_for_sweeps_too(tmp_path):
    checkout = tmp_path / "Megatron-LM"
    checkout.mkdir()
    (checkout / "pretrain_gpt.py").write_text("")
    sweep = build_sweep({"framework": "megatron-lm", "megatron_path": str(checkout), "sweep": {"tp": [1, 2]}},
                        "test.yaml", parse_argv)
    runners = {registry.build_launch(job.options, job.given, {})[0].runner for job in sweep.jobs}
    assert runners == {"megatron-lm"}
    with pytest.raises(ConfigError, match="--thread-count is not read by the megatron backend"):
        job = build_sweep({"thread_count": 2, "sweep": {"tp": [1]}}, "test.yaml", parse_argv).jobs[0]
        registry.build_launch(job.options, job.given, {})


def test_every_option_belongs_to_one_section_and_help_is_grouped():
    names = [name for _title, flags, _readers in registry.sections() for name in flags]
    assert len(names) == len(set(names))
    help_text = CliRunner().invoke(launch, ["--help"]).output
    titles = ["Common options", "Checkpoints (every backend that saves)", "Object storage",
              "Megatron backend", "DCP backend", "Lightning backend", "Workloads",
              "Megatron-LM", "Cluster jobs", "Sweeps"]
    positions = [help_text.find("\n" + title) for title in titles]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), help_text
    # A shared option lists the runners that read it.
    assert "[megatron, dcp, lightning, workload, primus, megatron-lm]" in " ".join(help_text.split())


def test_megatron_flags_override_trainer_arguments_and_say_which_async_writer_ran():
    from ckpt_bench.backends.megatron.launcher import MegatronConfig, async_writer_notes

    values, _given = parse_argv(["--async-save", "--use-persistent-ckpt-worker", "--ckpt-assume-constant-structure",
                                 "--set", "use_persistent_ckpt_worker=false", "--tp", "2"])
    overrides = MegatronConfig.from_values(values).overrides
    assert overrides["use_persistent_ckpt_worker"] is True  # a named flag wins over --set
    assert overrides["ckpt_assume_constant_structure"] is True and overrides["tensor_model_parallel_size"] == 2
    assert async_writer_notes(overrides) == []
    assert "forked writer" in async_writer_notes({"async_save": True})[0]


@pytest.mark.parametrize("argv,world", [([], 2), (["--backend", "dcp", "--model", "gpt2"], 2),
                                        (["--backend", "lightning"], 2), (["--backend", "comms"], 2),
                                        (["--workload", "llama3-8b"], 8)])  # a workload's plan: its whole job
def test_plan_is_read_by_every_backend_and_starts_nothing(argv, world, tmp_path):
    """`--plan` (a common option): what the run would do, from the backend's own plan, nothing created."""
    values, given = parse_argv([*argv, "--plan", "--runs-dir", str(tmp_path / "runs")])
    launch_config, _ = registry.build_launch(values, given, {})
    assert launch_config.plan_only
    preview = registry.runner_for(launch_config).preview(launch_config)
    assert preview["world_size"] == world and json.dumps(preview)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("gpus,argv,ranks", [(0, [], 2), (4, [], 4), (4, ["--nproc-per-node", "2"], 2)])
def test_ranks_per_node_default_to_one_per_visible_gpu(monkeypatch, gpus, argv, ranks):
    """A GPU host runs one rank per visible GPU unless told otherwise (nccl needs one each); a CPU host two."""
    monkeypatch.setattr("ckpt_bench.launcher.config.visible_gpus", lambda: gpus)
    values, given = parse_argv([*argv, "--plan"])
    assert registry.build_launch(values, given, {})[0].topology.nproc_per_node == ranks
