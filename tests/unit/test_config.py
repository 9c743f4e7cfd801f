"""Primus experiment YAML rules: variables, extends, preset precedence, --set typing."""

import textwrap

import pytest
from helpers import ROOT

from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.experiment import deep_merge, load_experiment, load_yaml, parse_assignment


def write(path, text):
    path.write_text(textwrap.dedent(text))
    return path


def test_variables_required_default_and_typed(tmp_path):
    cfg = write(tmp_path / "a.yaml", """
        tp: ${TP}
        pp: ${PP:1}
        lr: ${LR:1e-4}
        flag: ${FLAG:true}
        name: run-${NAME:x}-${TP}
        ${KEY}: stays
    """)
    data = load_yaml(cfg, environ={"TP": "2"})
    assert data["tp"] == 2 and data["pp"] == 1
    assert data["lr"] == pytest.approx(1e-4) and data["flag"] is True
    assert data["name"] == "run-x-2"  # embedded substitutions stay strings
    assert data["${KEY}"] == "stays"  # keys are never substituted


def test_missing_variable_names_it(tmp_path):
    cfg = write(tmp_path / "a.yaml", "save: ${CKPT_ROOT}/x\n")
    with pytest.raises(ConfigError, match="CKPT_ROOT is not set"):
        load_yaml(cfg, environ={})


def test_extends_order_and_merge_rules(tmp_path):
    write(tmp_path / "base.yaml", """
        a: 1
        nested: {x: 1, y: 1}
        items: [1, 2, 3]
    """)
    write(tmp_path / "mid.yaml", """
        a: 2
        nested: {y: 2}
    """)
    (tmp_path / "sub").mkdir()
    child = write(tmp_path / "sub" / "child.yaml", """
        extends: [../base.yaml, ../mid.yaml]
        nested: {z: 3}
        items: [9]
    """)
    data = load_yaml(child, environ={})
    assert data == {"a": 2, "nested": {"x": 1, "y": 2, "z": 3}, "items": [9]}
    single = write(tmp_path / "single.yaml", "extends: base.yaml\na: 5\n")
    assert load_yaml(single, environ={})["a"] == 5


def test_extends_loop_is_an_error(tmp_path):
    write(tmp_path / "a.yaml", "extends: b.yaml\n")
    write(tmp_path / "b.yaml", "extends: a.yaml\n")
    with pytest.raises(ConfigError, match="loops"):
        load_yaml(tmp_path / "a.yaml", environ={})


def test_experiment_precedence_model_module_overrides(tmp_path):
    write(tmp_path / "my_model.yaml", "num_layers: 2\nhidden_size: 64\nlr: 0.1\n")
    write(tmp_path / "my_module.yaml", "lr: 0.2\ntrain_iters: 10\nhidden_size: 32\n")
    exp = write(tmp_path / "exp.yaml", """
        work_group: team
        user_name: ${WHO:me}
        exp_name: e1
        workspace: /ws
        modules:
          pre_trainer:
            framework: megatron
            config: my_module.yaml
            model: my_model.yaml
            overrides:
              train_iters: 3
    """)
    experiment = load_experiment(exp, environ={})
    assert experiment.args == {"num_layers": 2, "hidden_size": 32, "lr": 0.2, "train_iters": 3}
    assert str(experiment.exp_root) == "/ws/team/me/e1"


def test_shipped_presets_resolve():
    from ckpt_bench.core.experiment import CONFIGS_DIR

    experiment = load_experiment(CONFIGS_DIR / "tiny_gpt.yaml", environ={})
    assert experiment.args["num_layers"] == 4 and experiment.args["ckpt_format"] == "torch_dist"
    llama = load_experiment(ROOT / "configs" / "llama2_7B.yaml", environ={"TP": "4"})  # an example experiment
    assert llama.args["tensor_model_parallel_size"] == 4
    assert llama.args["ffn_hidden_size"] == 11008 and llama.args["normalization"] == "RMSNorm"


def test_missing_preset_is_an_error(tmp_path):
    exp = write(tmp_path / "exp.yaml", "modules: {pre_trainer: {model: nope.yaml}}\n")
    with pytest.raises(ConfigError, match="nope.yaml"):
        load_experiment(exp, environ={})


def test_deep_merge_does_not_mutate():
    base = {"a": {"b": 1}}
    merged = deep_merge(base, {"a": {"c": 2}})
    assert base == {"a": {"b": 1}} and merged == {"a": {"b": 1, "c": 2}}


@pytest.mark.parametrize(
    "text,expected",
    [("lr=3e-4", ("lr", 3e-4)), ("bf16=true", ("bf16", True)), ("save=null", ("save", None)),
     ("num_layers=8", ("num_layers", 8)), ("name=abc", ("name", "abc"))],
)
def test_set_values_are_typed(text, expected):
    assert parse_assignment(text) == expected


def test_missing_extends_parent_names_the_file_that_extends_it(tmp_path):
    child = write(tmp_path / "child.yaml", "extends: gone.yaml\na: 1\n")
    with pytest.raises(ConfigError, match=r"child.yaml: `extends: gone.yaml` names a file that does not exist"):
        load_yaml(child)
