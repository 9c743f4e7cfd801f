"""Nothing silently ignored, memory checked up front (issue 20, items 1 and 2): trainer arguments are
checked against Megatron-LM's own names, and a model the host cannot hold is refused in a second."""

from __future__ import annotations

import os
import time

import pytest
from helpers import ROOT, assert_one_line_error, launch, torchrun_failure_summary

from ckpt_bench.backends.megatron import memory
from ckpt_bench.benchmark import registry
from ckpt_bench.cli.launch import parse_argv
from ckpt_bench.core import megatron_arguments
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.launcher import resources


def plan(*argv: str):
    values, given = parse_argv(list(argv))
    config, _emit = registry.build_launch(values, given, os.environ)
    return registry.runner_for(config).plan(config)


def test_a_mistyped_set_key_is_refused_with_the_closest_names():
    with pytest.raises(ConfigError, match=r"--set num_layer=3: num_layer is not a Megatron-LM argument; "
                                          r"did you mean num_layers"):
        plan("--set", "num_layer=3")


def test_a_mistyped_experiment_key_is_refused_naming_the_file(tmp_path):
    experiment = tmp_path / "exp.yaml"
    experiment.write_text("modules:\n  pre_trainer:\n    config: pre_trainer.yaml\n    model: tiny_gpt.yaml\n"
                          "    overrides:\n      hiden_size: 128\n")
    with pytest.raises(ConfigError, match=rf"{experiment}.*hiden_size is not a Megatron-LM argument; did you mean "
                                          r"hidden_size"):
        plan("--config", str(experiment))


def test_a_megatron_lm_argument_the_worker_ignores_is_accepted_and_noted():
    notes = plan("--set", "lr_decay_style=cosine", "--set", "num_layers=3").notes
    assert any("does not act on" in note and "lr_decay_style='cosine'" in note and "num_layers" not in note
               for note in notes), notes
    # Our own presets' settings are not the user's: the default run has no such note.
    assert not any("does not act on" in note for note in plan().notes)


def test_primus_reads_keys_of_its_own(upstream_primus):
    """A --set under Primus names a Megatron-LM argument or a key of the experiment (its Primus presets' own
    included, as `disable_wandb`); any other is a typo Primus would pass on silently (issue 38)."""
    experiment = upstream_primus / "examples/megatron/configs/MI300X/llama2_7B-BF16-pretrain.yaml"
    primus = ("--framework", "primus", "--primus-path", str(upstream_primus), "--config", str(experiment))
    plan(*primus, "--set", "disable_wandb=true", "--set", "num_layers=4")
    with pytest.raises(ConfigError, match=r"^--set disable_wandbb=True: disable_wandbb is not a Megatron-LM argument "
                                          r"nor a key of the experiment or its presets .*; did you mean disable_wandb"):
        plan(*primus, "--set", "disable_wandbb=true")


def test_lightning_set_keys_name_the_closest_setting():
    with pytest.raises(ConfigError, match="--set nhidd: not a Lightning setting; did you mean nhid"):
        plan("--backend", "lightning", "--set", "nhidd=2")


def test_every_key_of_the_shipped_experiments_is_known():
    for experiment in [*(ROOT / "configs").glob("*.yaml"), ROOT / "ckpt_bench" / "configs" / "tiny_gpt.yaml"]:
        from ckpt_bench.core.experiment import load_experiment

        megatron_arguments.check_known({key: str(experiment) for key in load_experiment(experiment).args})


def test_parameters_match_the_model_megatron_core_builds():
    """Counted once on the real GPTModel (megatron-core's local spec, see memory.parameters) for the
    default model, a llama-like one (SwiGLU, RMSNorm, GQA, rope, untied, no biases) and an MoE one."""
    base = dict(megatron_arguments.MEGATRON_DEFAULTS)
    llama = {**base, "num_layers": 3, "hidden_size": 128, "swiglu": True, "normalization": "RMSNorm",
             "add_bias_linear": False, "group_query_attention": True, "num_query_groups": 2,
             "position_embedding_type": "rope", "untie_embeddings_and_output_weights": True}
    moe = {**base, "num_experts": 4}
    assert [sum(memory.parameters(args)) for args in (base, llama, moe)] == [169728, 1000320, 368776]


def test_rank_memory_follows_precision_sharding_and_staging():
    args = {**megatron_arguments.MEGATRON_DEFAULTS, "bf16": True, "use_distributed_optimizer": True, "async_save": True}
    sizes = {"tp": 1, "pp": 1, "ep": 1, "cp": 1, "dp": 4}
    params = sum(memory.parameters(args))
    on_gpu = memory.rank_memory(args, sizes, on_gpus=True)
    assert (on_gpu.weights, on_gpu.gradients) == (2 * params, 2 * params)
    assert on_gpu.optimizer == 12 * params // 4  # fp32 main + Adam's moments, sharded over DP
    assert on_gpu.async_staging == 14 * params // 4  # the rank's quarter of weights + optimizer
    assert memory.rank_memory(args, sizes, on_gpus=False).async_staging == 0  # already in host memory


def test_the_7b_example_is_refused_in_a_second_on_this_host(tmp_path):
    """configs/llama2_7B.yaml on a CPU host with less than ~100 GiB: one line before anything starts."""
    if resources.visible_gpus() or resources.available_memory() > 120 * 2**30:
        pytest.skip("this host could hold it")
    started = time.monotonic()
    line = assert_one_line_error(launch("--config", "configs/llama2_7B.yaml", runs_dir=tmp_path / "runs"),
                                 "6.74B parameters")
    assert "GiB is available" in line
    assert time.monotonic() - started < 3  # the interpreter's start included; the check itself is ~0.1 s
    assert not (tmp_path / "runs").exists()


def test_lightning_refuses_a_model_the_host_cannot_hold():
    if resources.available_memory() > 600 * 2**30:
        pytest.skip("this host could hold it")
    with pytest.raises(ConfigError, match="13.02B parameters in float32 .* GiB is available"):
        plan("--backend", "lightning", "--model", "llama2-13b", "--accelerator", "cpu")


TORCHRUN_SUMMARY = torchrun_failure_summary(-9)


@pytest.mark.parametrize("counts,cause", [
    ((3, 4), "killed by the kernel's OOM killer (its oom_kill count rose by 1 during the pass)"),
    ((None, None), "killed by SIGKILL, likely the kernel's OOM killer"),
    ((3, 3), "not the kernel's OOM killer"),
])
def test_a_rank_killed_by_sigkill_is_named_as_far_as_the_host_can_tell(tmp_path, monkeypatch, counts, cause):
    import sys

    from ckpt_bench.launcher import oom, torchrun

    readings = iter(counts)
    monkeypatch.setattr(oom, "oom_kills", lambda: next(readings))
    script = f"import sys; print({TORCHRUN_SUMMARY!r}); sys.exit(1)"
    result = torchrun.run_command("save", [sys.executable, "-c", script], tmp_path / "logs", lambda line: False)
    [failure] = result.failures
    assert failure.signal == "SIGKILL" and cause in failure.describe()
    assert cause in result.summary().failed_ranks[0].killed_by


SET_TYPO = ("--set", "expert_model_paralel_size=16")


@pytest.mark.parametrize("path", ["built-in", "workload", "workload-primus", "framework-primus"])
def test_every_path_refuses_a_mistyped_set_key_before_planning(upstream_primus, path):
    """Issue 38: `--workload ... --set expert_model_paralel_size=16 --plan` planned EP 8 and exited 0. Every path
    that reads an experiment names the typo and the closest argument, in --plan as in a run."""
    deepseek = upstream_primus / "examples/megatron/configs/MI300X/deepseek_v2_lite-BF16-pretrain.yaml"
    argv = {
        "built-in": ("--config", str(ROOT / "ckpt_bench" / "configs" / "tiny_gpt.yaml")),
        "workload": ("--workload", str(ROOT / "ckpt_bench" / "configs" / "tiny_gpt.yaml")),
        "workload-primus": ("--workload", str(deepseek), "--primus-path", str(upstream_primus), "--job-ranks", "256",
                            "--subset", "--engine", "torch_dist"),
        "framework-primus": ("--framework", "primus", "--primus-path", str(upstream_primus), "--config",
                             str(deepseek), "--nproc-per-node", "8"),
    }[path]
    values, given = parse_argv([*argv, *SET_TYPO, "--plan"])
    with pytest.raises(ConfigError, match=r"^--set expert_model_paralel_size=16: expert_model_paralel_size is not a "
                                          r"Megatron-LM argument.*; did you mean expert_model_parallel_size"):
        config, _emit = registry.build_launch(values, given, os.environ)
        registry.runner_for(config).preview(config)
