"""Every trainer value checked by the type Megatron-LM's own parser gives it, before anything starts
(issue 31, item 1): one line naming the key, the value and what is valid, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import ROOT, assert_one_line_error, launch

from ckpt_bench.benchmark import registry
from ckpt_bench.cli.launch import parse_argv
from ckpt_bench.core import megatron_arguments, megatron_release
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.experiment import load_yaml

RELEASE = "core_v0.19.0" if megatron_release.installed().argument_types_of == (0, 19) else "core_v0.16.1"
TYPES_FILE = ROOT / "ckpt_bench" / "core" / (
    "megatron_lm_argument_types_0.19.json" if RELEASE == "core_v0.19.0" else "megatron_lm_argument_types.json")


def plan(*argv: str):
    values, given = parse_argv(list(argv))
    config, _emit = registry.build_launch(values, given, os.environ)
    return registry.runner_for(config).plan(config)


@pytest.mark.parametrize("setting,message", [
    ("hidden_size=abc", "--set hidden_size=abc: Megatron-LM's hidden_size is a positive integer, not 'abc'"),
    ("bf16=maybe", "--set bf16=maybe: Megatron-LM's bf16 is true or false, not 'maybe'"),
    ("hidden_size=0", "--set hidden_size=0: Megatron-LM's hidden_size is a positive integer, not 0"),
    ("ffn_hidden_size=-4", "Megatron-LM's ffn_hidden_size is a positive integer, not -4"),
    ("lr=fast", "Megatron-LM's lr is a number, not 'fast'"),
    ("normalization=rms", "Megatron-LM's normalization is one of LayerNorm, RMSNorm, not 'rms'"),
    ("moe_aux_loss_coeff=[0.1,x]", "Megatron-LM's moe_aux_loss_coeff is a list of numbers, not [0.1, 'x']"),
    ("rampup_batch_size=[1,2]", "Megatron-LM's rampup_batch_size is a list of 3 integers, not [1, 2]"),
    ("empty_unused_memory_level=true", "Megatron-LM's empty_unused_memory_level is one of 0, 1, 2, not True"),
    ("hidden_size=66", "hidden_size=66 is not divisible by num_attention_heads=8"),
    ("group_query_attention=true --set num_query_groups=3", "num_query_groups=3 must divide num_attention_heads=8"),
])
def test_a_value_megatron_lm_would_not_read_is_refused_up_front(setting, message):
    with pytest.raises(ConfigError) as refused:
        plan(*f"--set {setting}".split())
    assert message in str(refused.value)


def test_values_megatron_lm_reads_pass():
    plan("--set", "lr=3e-4", "--set", "moe_aux_loss_coeff=0.01", "--set", "bf16=true", "--set", "normalization=RMSNorm",
         "--set", "data_path=[a, b]", "--set", "moe_layer_freq=([1]*1+[0]*1)*1", "--set", "tokenizer_model=null")


def test_an_experiment_value_names_its_file(tmp_path):
    experiment = tmp_path / "exp.yaml"
    experiment.write_text("modules:\n  pre_trainer:\n    config: pre_trainer.yaml\n    model: tiny_gpt.yaml\n"
                          "    overrides:\n      use_distributed_optimizer: maybe\n")
    with pytest.raises(ConfigError, match=rf"^{experiment} \(with its presets\): Megatron-LM's "
                                          r"use_distributed_optimizer is true or false, not 'maybe'$"):
        plan("--config", str(experiment))


def test_the_newcomers_command_is_one_line_and_exit_2(tmp_path):
    """Was a traceback (TypeError in memory.py), exit 1."""
    assert_one_line_error(launch("--set", "hidden_size=abc", runs_dir=tmp_path / "runs"),
                          "--set hidden_size=abc: Megatron-LM's hidden_size is a positive integer")
    assert not (tmp_path / "runs").exists()


def test_primus_puts_values_into_megatron_lms_namespace_as_they_are():
    """Primus skips Megatron-LM's parser: a flag may be 1 (`sequence_parallel: 1` in its configs) and its own
    choices extend Megatron-LM's (its tokenizers); the types still hold."""
    llama3 = megatron_arguments.argument_types()["tokenizer_type"]
    assert not llama3.accepts("Llama3Tokenizer") and llama3.accepts("Llama3Tokenizer", parsed=False)
    flag = megatron_arguments.argument_types()["sequence_parallel"]
    assert not flag.accepts(1) and flag.accepts(1, parsed=False) and not flag.accepts("maybe", parsed=False)
    with pytest.raises(ConfigError, match="--set hidden_size=abc: Megatron-LM's hidden_size is a positive integer"):
        megatron_arguments.check_values({"hidden_size": "abc"}, {"hidden_size": "--set hidden_size=abc"}, parsed=False)


def test_every_value_of_primus_megatron_configs_passes(upstream_primus):
    """Primus's Megatron model and module presets and its example experiments' overrides, as Primus reads them."""
    files = [*(upstream_primus / "examples" / "megatron" / "configs").rglob("*.yaml"),
             *(upstream_primus / "primus" / "configs" / "models" / "megatron").rglob("*.yaml"),
             *(upstream_primus / "primus" / "configs" / "modules" / "megatron").rglob("*.yaml")]
    checked = 0
    for path in files:
        data = load_yaml(path, {})
        values = data if "modules" not in data else {
            key: value for module in data["modules"].values() for key, value in (module.get("overrides") or {}).items()}
        typed = {key: str(path) for key in values if key in megatron_arguments.argument_types()}
        megatron_arguments.check_values(values, typed, parsed=False)
        checked += len(typed)
    assert len(files) > 300 and checked > 20000


def test_the_types_are_megatron_lms_parser(upstream_megatron_lm):
    """The types file of the installed release is what tools/megatron_lm_arguments.py reads from the parser of the
    Megatron-LM checkout it matches (core_v0.16.1's, or core_v0.19.0's on megatron-core 0.19)."""
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "megatron_lm_arguments.py"), "types",
                             f"{upstream_megatron_lm}@{RELEASE}"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == TYPES_FILE.read_text(), (
        f"regenerate: python tools/megatron_lm_arguments.py types MEGATRON_LM@{RELEASE} > {TYPES_FILE}")


@pytest.mark.parametrize(("version", "accepted"), [("0.16.1", False), ("0.19.2", True)])
def test_a_choice_of_a_later_release_is_refused_on_the_earlier_one(monkeypatch, version, accepted):
    monkeypatch.setattr(megatron_release, "installed", lambda: megatron_release.Release(version))
    megatron_arguments.argument_types.cache_clear()
    try:
        if accepted:
            megatron_arguments.check_values({"optimizer": "lion"}, {"optimizer": "--set optimizer=lion"})
        else:
            with pytest.raises(ConfigError, match="--set optimizer=lion: Megatron-LM's optimizer is one of adam, sgd"):
                megatron_arguments.check_values({"optimizer": "lion"}, {"optimizer": "--set optimizer=lion"})
    finally:
        megatron_arguments.argument_types.cache_clear()


def test_a_workload_experiments_values_are_checked_too(tmp_path):
    experiment = tmp_path / "exp.yaml"
    experiment.write_text("modules:\n  pre_trainer:\n    config: pre_trainer.yaml\n    model: tiny_gpt.yaml\n"
                          "    overrides:\n      bf16: maybe\n")
    with pytest.raises(ConfigError, match=r"exp.yaml \(with its presets\): Megatron-LM's bf16 is true or false"):
        plan("--workload", str(experiment), "--plan")
