"""Limits before work (issue 22): small inputs that used to exhaust the machine are refused in a moment,
with one line naming the input and what would be valid. Real files, the real CLI where it decides."""

from __future__ import annotations

import time

import pytest
import yaml
from helpers import assert_one_line_error, launch

from ckpt_bench.cli.launch import parse_argv
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.experiment import load_experiment, parse_assignment
from ckpt_bench.core.yamlfile import MAX_BYTES, MAX_NODES, Loader, read_yaml
from ckpt_bench.launcher.resources import check_ranks_per_node
from ckpt_bench.sweep.peers.s3torchbenchmarking import translate
from ckpt_bench.sweep.run import build_sweep

# The probe's 784-byte experiment: nine levels of nine aliases, 9**9 lists once expanded.
LAUGHS = "\n".join(["a0: &a0 [x, x, x, x, x, x, x, x, x]",
                    *(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10))])
EXPERIMENT = """modules:
  pre_trainer:
    framework: megatron
    overrides:
      bomb: *a9
"""


def test_billion_laughs_experiment_is_refused_at_once(tmp_path):
    path = tmp_path / "laughs.yaml"
    path.write_text(LAUGHS + "\n" + EXPERIMENT)
    assert path.stat().st_size < 1000
    started = time.monotonic()
    with pytest.raises(ConfigError, match=f"more than {MAX_NODES:,} nodes once its aliases are expanded"):
        load_experiment(path)
    assert time.monotonic() - started < 2


def test_the_cli_refuses_it_in_one_line(tmp_path):
    path = tmp_path / "laughs.yaml"
    path.write_text(LAUGHS + "\n" + EXPERIMENT)
    assert_one_line_error(launch("--config", str(path), runs_dir=tmp_path / "runs", timeout=60), "aliases")
    assert not (tmp_path / "runs").exists()


def test_a_million_element_list_and_a_self_reference_are_refused(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("x: [" + ", ".join(["1"] * (MAX_NODES + 10)) + "]\n")
    with pytest.raises(ConfigError, match="nodes"):
        read_yaml(big)
    loop = tmp_path / "loop.yaml"
    loop.write_text("a: &a [1, *a]\n")
    with pytest.raises(ConfigError, match="cannot include itself"):
        read_yaml(loop)
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"# " + b"x" * MAX_BYTES + b"\n")
    with pytest.raises(ConfigError, match="bytes"):
        read_yaml(huge)


def test_yaml_is_read_with_libyaml_and_set_values_within_limits():
    assert Loader is yaml.CSafeLoader  # the C parser (the pure-Python one took 77 s for 50 MB)
    assert parse_assignment("lr=3e-4") == ("lr", 0.0003)
    assert parse_assignment("name=a: b: c") == ("name", "a: b: c")  # not YAML: the text itself
    with pytest.raises(ConfigError, match="aliases"):
        parse_assignment("x=" + "{" + LAUGHS.replace("\n", ", ") + "}")


def test_sweep_of_a_billion_jobs_is_counted_not_built():
    lists = {name: list(range(10)) for name in ("thread_count", "save_calls", "nproc_per_node", "dtype", "model",
                                                  "master_port", "repeat", "s3_part_size", "load_calls")}
    started = time.monotonic()
    with pytest.raises(ConfigError) as raised:
        build_sweep({"backend": "dcp", "sweep": lists}, "big.yaml", parse_argv)
    message = str(raised.value)
    assert "1,000,000,000 jobs, more than --max-jobs 1,000" in message and "--max-jobs 1000000000" in message
    assert " h)" in message and "\n" not in message  # a lower bound of how long it would take
    assert time.monotonic() - started < 1


def test_max_jobs_lets_a_large_sweep_through_and_applies_to_sweeps_only(tmp_path):
    sweep = build_sweep({"backend": "dcp", "sweep": {"thread_count": [1, 2, 3]}}, "s.yaml", parse_argv, max_jobs=3)
    assert len(sweep.jobs) == 3
    with pytest.raises(ConfigError, match="3 jobs, more than --max-jobs 2"):
        build_sweep({"backend": "dcp", "sweep": {"thread_count": [1, 2, 3]}}, "s.yaml", parse_argv, max_jobs=2)
    assert_one_line_error(launch("--max-jobs", "5", runs_dir=tmp_path), "--max-jobs applies to a sweep")


def test_s3torchbenchmarking_sweeps_are_counted_too():
    config = {"defaults": ["_self_"], "hydra": {"mode": "MULTIRUN", "sweeper": {"params": {
        "+model": ",".join(["vit-base"] * 40), "+thread_count": ",".join(str(n) for n in range(1, 41))}}},
        "+path": "./nvme/", "+backend": "gloo", "+world_size": 1, "+checkpoint.storage": "disk", "epochs": 1}
    with pytest.raises(ConfigError, match="1,600 jobs, more than --max-jobs 1,000"):
        translate(config, "dcp_ddp_save.yaml", [], {})


def test_ranks_per_node_are_checked_against_the_host():
    check_ranks_per_node(2, None)
    with pytest.raises(ConfigError, match="--nproc-per-node 1000: this host has"):
        check_ranks_per_node(1000, None)


def test_a_thousand_ranks_are_refused_before_anything_starts(tmp_path):
    result = launch("--backend", "dcp", "--model", "tiny", "--nproc-per-node", "1000", runs_dir=tmp_path / "runs")
    assert_one_line_error(result, "--nproc-per-node 1000")
    assert not (tmp_path / "runs").exists()


def test_free_space_is_checked_against_the_saves_kept(tmp_path):
    result = launch("--backend", "dcp", "--model", "gpt2", "--save-calls", "1000000", "--save-dir",
                    str(tmp_path / "ckpt"), runs_dir=tmp_path / "runs")
    line = assert_one_line_error(result, "the checkpoints this run keeps need")
    assert "GiB free" in line
    assert not (tmp_path / "runs").exists() and list((tmp_path / "ckpt").iterdir()) == []
