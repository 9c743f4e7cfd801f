"""Primus's experiments read as Primus reads them: every example config of the real checkout (Primus fd1eeabb,
tests/upstream.py) resolved by `load_experiment` equals what Primus's own `PrimusParser`, imported from that
checkout, gives for its trainer module, key for key; the ones Primus refuses we refuse with one line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest
import yaml
from helpers import launch

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.experiment import PrimusCheckout, load_experiment

PRIMUS_ONLY = ("name", "framework")  # bookkeeping PrimusParser adds to the module: no trainer argument


def primus_module_config(checkout: Path, config: Path) -> dict:
    """What Primus itself resolves for the experiment's trainer module (PrimusParser, from the checkout)."""
    if str(checkout) not in sys.path:
        sys.path.insert(0, str(checkout))
    from primus.core.launcher.parser import PrimusParser
    from primus.core.utils import yaml_utils

    parsed = PrimusParser().parse(argparse.Namespace(config=str(config), export_config=None))
    return yaml_utils.nested_namespace_to_dict(parsed.get_module_config("pre_trainer"))


def test_every_megatron_example_config_resolves_as_primus_does(upstream_primus, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # PrimusParser creates ./output/... folders
    # Primus reads its ~8,000 YAML files with PyYAML's pure-Python SafeLoader (40 s here); libyaml's CSafeLoader
    # builds the same documents, as ours does.
    monkeypatch.setattr(yaml, "SafeLoader", yaml.CSafeLoader)
    for variable in ("PRIMUS_PATH", "PRIMUS_TEAM", "PRIMUS_USER", "PRIMUS_EXP_NAME", "PRIMUS_WORKSPACE"):
        monkeypatch.delenv(variable, raising=False)
    configs = sorted((upstream_primus / "examples" / "megatron" / "configs").rglob("*.yaml"))
    assert len(configs) == 278
    equal, refused = [], []
    for config in configs:
        try:
            theirs = primus_module_config(upstream_primus, config)
        except (AssertionError, FileNotFoundError, ValueError):
            with pytest.raises(ConfigError):
                load_experiment(config, primus_path=upstream_primus)
            refused.append(config.name)
            continue
        experiment = load_experiment(config, primus_path=upstream_primus)
        expected = {key: value for key, value in theirs.items() if key not in PRIMUS_ONLY}
        if "model" not in experiment.args:  # Primus names the model preset in the module: not an argument
            named = str(expected.pop("model")).removesuffix(".yaml")
            assert experiment.model_preset.with_suffix("").as_posix().endswith(named)
        assert experiment.args == expected, config
        equal.append(config.name)
    capsys.readouterr()
    # The two Primus refuses: a template with a placeholder model, an experiment without work_group.
    assert sorted(refused) == ["lfm2_8B_A1B-FP8-te-precision.yaml", "native_hf_to_megatron_sft.template.yaml"]
    assert len(equal) == 276


def test_presets_come_from_the_checkout_found(upstream_primus, tmp_path, monkeypatch):
    monkeypatch.delenv("PRIMUS_PATH", raising=False)
    config = upstream_primus / "examples/megatron/configs/MI300X/llama2_7B-BF16-pretrain.yaml"
    monkeypatch.chdir(tmp_path)
    found = load_experiment(config)  # a folder above the experiment holds primus/configs
    assert found.primus.found_as == "a folder above the experiment"
    assert found.model_preset == upstream_primus / "primus/configs/models/megatron/llama2_7B.yaml"
    assert found.module_preset == upstream_primus / "primus/configs/modules/megatron/pre_trainer.yaml"
    monkeypatch.chdir(upstream_primus)
    assert PrimusCheckout.find(None).found_as == "the working directory"
    monkeypatch.setenv("PRIMUS_PATH", str(tmp_path))
    with pytest.raises(ConfigError, match=r"PRIMUS_PATH .*: not a Primus checkout"):
        load_experiment(config)


def test_diffusion_presets_in_subfolders(upstream_primus):
    config = upstream_primus / "examples/megatron/configs/MI300X/diffusion/flux_535m_pretrain_fp8.yaml"
    experiment = load_experiment(config, primus_path=upstream_primus)
    assert experiment.model_preset.parent.name == "diffusion"


def test_post_trainer_module_is_read(upstream_primus):
    config = upstream_primus / "examples/megatron/configs/MI355X/llama3_8B-BF16-sft.yaml"
    experiment = load_experiment(config, primus_path=upstream_primus)
    assert experiment.module == "post_trainer" and experiment.args["stage"] == "sft"
    assert experiment.args["num_layers"] == 32


def test_a_missing_preset_in_the_checkout_is_one_line(upstream_primus, tmp_path):
    exp = tmp_path / "exp.yaml"
    exp.write_text("work_group: a\nuser_name: b\nexp_name: c\nworkspace: ./o\nmodules:\n  pre_trainer:\n"
                   "    framework: megatron\n    config: pre_trainer.yaml\n    model: llama9_1T.yaml\n")
    with pytest.raises(ConfigError, match=r"model preset 'llama9_1T.yaml' not found in the Primus checkout"):
        load_experiment(exp, primus_path=upstream_primus)
    result = launch("--config", exp, "--primus-path", upstream_primus, "--plan")
    assert result.returncode == 2 and "llama9_1T.yaml" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def plan_of(upstream_primus, config: str, *options) -> dict:
    result = launch("--config", upstream_primus / "examples/megatron/configs/MI300X" / config, "--primus-path",
                    upstream_primus, "--nnodes", "8", "--nproc-per-node", "8", "--plan", "--format", "json", *options)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_plan_sizes_the_vocabulary_the_tokenizer_names(upstream_primus):
    """Primus's presets name a tokenizer, not vocab_size: llama2_70B (32,000) and llama3.1_70B (128,256) are not
    planned to the same bytes; the layout is megatron-core's."""
    llama2 = plan_of(upstream_primus, "llama2_70B-BF16-pretrain.yaml", "--set", "global_batch_size=448")
    llama31 = plan_of(upstream_primus, "llama3.1_70B-BF16-pretrain.yaml", "--set", "global_batch_size=192")
    assert llama2["parameters"] < llama31["parameters"]
    assert llama31["parameters"] - llama2["parameters"] == 2 * 8192 * (128256 - 32000)  # untied input and output
    assert llama2["presets_from"].startswith("Primus checkout") and llama2["ckpt_format"] == "torch_dist"
    assert len(llama2["layout"]) == 64 and llama2["layout"][9]["dp_rank"] == 9
    assert llama2["rank_bytes"]["max"] >= llama2["rank_bytes"]["min"] > 0


def test_a_model_that_cannot_be_sized_is_one_line(upstream_primus):
    result = launch("--config", upstream_primus / "examples/megatron/configs/MI300X/mamba_370M-pretrain.yaml",
                    "--primus-path", upstream_primus, "--plan")
    assert result.returncode == 2 and "Mamba model" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_the_primus_table_plans_each_example_at_the_fewest_nodes_its_layout_fits(upstream_primus):
    """tools/primus_table.py: grok1 (EP 8 x PP 4) needs 4 nodes of 8, Mixtral 8x7B (EP 8) one; a model we cannot
    size is its one-line refusal; a LoRA SFT config (`extends:` only) is an experiment."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import primus_table

    folder = upstream_primus / "examples" / "megatron" / "configs"
    grok = primus_table.smallest_plan(folder / "MI300X" / "grok1-BF16-pretrain.yaml", upstream_primus, 128)
    assert grok["world_size"] == 32 and grok["model"] == "MoE" and grok["engine"] == "torch"
    assert grok["rank_bytes"]["largest_rank"] == 24  # the last pipeline stage's first rank: output layer + experts
    assert grok["parallel"]["virtual_stages"] == 4  # num_virtual_stages_per_pipeline_rank: 4 chunks of 4 layers
    assert grok["parallel"]["layers_per_chunk"] == [[4, 4, 4, 4]] * 4
    mixtral = primus_table.smallest_plan(folder / "MI300X" / "mixtral_8x7B_v0.1-BF16-pretrain.yaml",
                                         upstream_primus, 128)
    assert mixtral["world_size"] == 8 and mixtral["parameters"] == 46_702_792_704
    mamba = primus_table.smallest_plan(folder / "MI300X" / "mamba_370M-pretrain.yaml", upstream_primus, 128)
    assert mamba.startswith("--workload mamba_370M-pretrain.yaml: a Mamba model")
    lora = primus_table.smallest_plan(folder / "MI355X" / "llama3_8B-BF16-lora-sft.yaml", upstream_primus, 128)
    assert lora["model"] == "dense" and lora["parameters"] == 8_030_261_248
    assert primus_table.row(folder / "x.yaml", mixtral).startswith("| x | MoE | 46.7 B | 12.9 B | torch | 8 |")


def test_the_built_in_worker_builds_and_plans_the_vocabulary_the_tokenizer_names(upstream_primus):
    """A Primus experiment names its tokenizer, not vocab_size: the built-in worker builds that vocabulary (not its
    default of 1,024), and an unknown tokenizer is one line before anything starts."""
    from ckpt_bench.backends.megatron.launcher import resolve_gpt
    from ckpt_bench.benchmark import registry
    from ckpt_bench.cli.launch import parse_argv

    config = upstream_primus / "examples/megatron/configs/MI300X/llama3.2_1B-BF16-pretrain.yaml"
    values, given = parse_argv(["--config", str(config), "--primus-path", str(upstream_primus), "--plan"])
    launch_config, _ = registry.build_launch(values, given, {})
    _, args, _ = resolve_gpt(launch_config)
    assert args["vocab_size"] == 128256
    result = launch("--config", upstream_primus / "examples/megatron/configs/MI300X/llama3.2_1B-BF16-pretrain.yaml",
                    "--primus-path", upstream_primus, "--set", "tokenizer_model=someone/unknown", "--plan")
    assert result.returncode == 2 and "tokenizer_model 'someone/unknown' is not known here" in result.stderr


def test_the_built_in_workers_plan_is_the_model_it_builds():
    """Arguments the built-in worker does not act on (an uneven pipeline split, virtual stages) are named by its
    plan and left out of the bytes it plans; Megatron-LM's own run (--framework megatron-lm) plans them."""
    even = json.loads(launch("--pp", "2", "--set", "num_layers=6", "--plan", "--format", "json").stdout)
    uneven = json.loads(launch("--pp", "2", "--set", "num_layers=6", "--set", "decoder_first_pipeline_num_layers=2",
                               "--plan", "--format", "json").stdout)
    assert uneven["rank_bytes"] == even["rank_bytes"] and even["not_acted_on"] == []
    assert uneven["not_acted_on"] == ["decoder_first_pipeline_num_layers=2"]
    table = launch("--pp", "2", "--set", "num_layers=6", "--set", "decoder_first_pipeline_num_layers=2", "--plan",
                   "--format", "table").stdout
    assert "not acted on" in table and "decoder_first_pipeline_num_layers=2" in table


def _megatron_plan(*argv: str) -> dict:
    """The built-in backend's `--plan` of a command line, in this process."""
    from ckpt_bench.benchmark import registry
    from ckpt_bench.cli.launch import parse_argv

    values, given = parse_argv([*argv, "--plan"])
    launch_config, _ = registry.build_launch(values, given, {})
    return registry.runner_for(launch_config).preview(launch_config)


def test_uneven_and_virtual_pipeline_experiments_plan_as_megatron_lm_lays_them_out(upstream_primus, monkeypatch):
    """Issue 39 item 4 (issue 38 item 4): from a Primus checkout, `--plan` of MI355X's uneven and virtual pipeline
    experiments resolves their layout as Megatron-LM does and says why the built-in worker would not run it; an
    experiment's null parallel size is Megatron-LM's default; a refusal names the experiment's own settings, never
    an option the user did not type."""
    monkeypatch.chdir(upstream_primus)
    folder = Path("examples/megatron/configs/MI355X")
    nodes = ("--nnodes", "16", "--nproc-per-node", "8")
    glm5 = _megatron_plan("--yaml-config-path", str(folder / "glm5-BF16-pretrain.yaml"), *nodes)
    assert glm5["pipeline"] == "layers per pipeline stage [10, 10, 10, 10, 10, 10, 10, 8]"
    assert "glm5-BF16-pretrain.yaml's decoder_last_pipeline_num_layers 8" in glm5["worker_refuses"]
    assert "decoder_last_pipeline_num_layers=8" in glm5["not_acted_on"] and glm5["parameters"] > 7e11
    qwen3 = _megatron_plan("--yaml-config-path", str(folder / "qwen3_235B_A22B-BF16-pretrain.yaml"), *nodes)
    assert qwen3["pipeline"] == ("layers per pipeline stage [23, 24, 24, 23], in 4 model chunks (virtual pipeline "
                                 "stages) per rank")
    minimax = _megatron_plan("--yaml-config-path", str(folder / "minimax_m2.5-BF16-pretrain.yaml"), *nodes)
    assert minimax["cp"] == 1 and "2 model chunks" in minimax["pipeline"] and minimax["worker_refuses"]
    with pytest.raises(ConfigError) as refused:
        _megatron_plan("--yaml-config-path", str(folder / "deepseek_v3-BF16-pretrain.yaml"), *nodes)
    message = str(refused.value)
    assert "it places 0 MTP layers (m) and the model has 1" in message and "--pp" not in message
    assert "deepseek_v3-BF16-pretrain.yaml's pipeline_model_parallel_layout" in message
    assert "model preset deepseek_v3.yaml's mtp_num_layers" in message


def test_a_refusal_names_where_the_bad_value_came_from(tmp_path, monkeypatch):
    """The option typed, `--set KEY`, or the experiment's file (and the rule Megatron-LM applies)."""
    monkeypatch.delenv("PRIMUS_PATH", raising=False)
    with pytest.raises(ConfigError, match=r"num_layers 5 cannot be split over 2 pipeline stages: megatron-core needs "
                                          r"it to divide evenly .* \(from --set num_layers 5, --pp 2\)"):
        _megatron_plan("--set", "num_layers=5", "--pp", "2", "--nproc-per-node", "2")
    experiment = tmp_path / "exp.yaml"
    experiment.write_text("modules:\n  pre_trainer:\n    framework: megatron\n    config: pre_trainer.yaml\n"
                          "    model: tiny_gpt.yaml\n    overrides:\n      pipeline_model_parallel_size: 2\n"
                          "      num_layers: 5\n      expert_model_parallel_size: null\n")
    with pytest.raises(ConfigError) as refused:
        _megatron_plan("--config", str(experiment), "--nproc-per-node", "2")
    assert "(from exp.yaml's num_layers 5, exp.yaml's pipeline_model_parallel_size 2)" in str(refused.value)
    with pytest.raises(ConfigError, match=r"world size 2 is not divisible by TP x PP x CP = 4 \(module preset "
                                          r"pre_trainer.yaml's tensor_model_parallel_size 1, exp.yaml's pipeline_"
                                          r"model_parallel_size 2, --cp 2\)"):
        _megatron_plan("--config", str(experiment), "--nproc-per-node", "2", "--cp", "2")


def test_the_built_in_worker_refuses_a_pipeline_it_cannot_split_and_plans_megatron_lms():
    """An uneven split the worker's even one cannot stand in for (5 layers on 2 stages): `--plan` gives
    Megatron-LM's layout and why; a run stops with that line before anything starts."""
    from ckpt_bench.benchmark import registry
    from ckpt_bench.cli.launch import parse_argv

    argv = ["--pp", "2", "--set", "num_layers=5", "--set", "decoder_first_pipeline_num_layers=1",
            "--nproc-per-node", "2"]
    plan = _megatron_plan(*argv)
    assert plan["pipeline"] == "layers per pipeline stage [1, 4]" and "worker_pipeline" not in plan
    assert "(from --set num_layers 5, --pp 2, --set decoder_first_pipeline_num_layers 1)" in plan["worker_refuses"]
    values, given = parse_argv(argv)
    launch_config, _ = registry.build_launch(values, given, {})
    with pytest.raises(ConfigError, match=r"^the megatron worker cannot run this: Megatron-LM lays this job out as "
                                          r"layers per pipeline stage \[1, 4\]"):
        registry.runner_for(launch_config).plan(launch_config)
    even = _megatron_plan("--pp", "2", "--set", "num_layers=6", "--set", "decoder_first_pipeline_num_layers=2",
                          "--nproc-per-node", "2")  # the worker runs its even split, and says so
    assert (even["pipeline"], even["worker_pipeline"]) == ("layers per pipeline stage [2, 4]",
                                                           "layers per pipeline stage [3, 3]")
