"""Sweep files: validation, jobs as CLI invocations in declaration order, the shipped sweeps."""

import pytest
from helpers import ROOT, launch

from ckpt_bench.cli.launch import parse_argv
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.sweep.run import build_sweep, load_sweep


def _sweep(**definition):
    return build_sweep({"backend": "dcp", **definition}, "test.yaml", parse_argv)


@pytest.mark.parametrize(
    "definition,needle",
    [
        ({}, "`sweep:` must map option names to lists"),
        ({"sweep": {"thread_count": 2}}, "sweep.thread_count must be a non-empty list"),
        ({"sweep": {"thread_count": []}}, "sweep.thread_count must be a non-empty list"),
        ({"sweep": {"thread_counts": [1]}}, "'thread_counts' is not an option of ckpt_launch.py (did you mean "
                                            "'thread_count'?)"),
        ({"nproc-per-node": 2, "sweep": {"model": ["tiny"]}}, "'nproc-per-node' is not an option"),
        ({"runs_dir": "x", "sweep": {"model": ["tiny"]}}, "'runs_dir' cannot be set in a sweep file"),
        ({"model": "tiny", "sweep": {"model": ["tiny"]}}, "model is both fixed and swept"),
        ({"sweep": {"thread_count": [1, 0]}}, "job 1 (thread_count=0): Invalid value for '--thread-count'"),
        ({"sweep": {"dist_backend": ["mpi"]}}, "job 0 (dist_backend=mpi): Invalid value for '--dist-backend'"),
    ],
)
def test_sweep_file_mistakes(definition, needle):
    with pytest.raises(ConfigError) as raised:
        _sweep(**definition)
    assert needle in str(raised.value) and "\n" not in str(raised.value)


def test_sweep_mistake_on_the_command_line(tmp_path):
    result = launch("--sweep", str(tmp_path / "missing.yaml"), "--runs-dir", str(tmp_path / "runs"))
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: --sweep {tmp_path / 'missing.yaml'}: sweep file not found"
    assert not (tmp_path / "runs").exists()


def test_jobs_are_cli_invocations_in_declaration_order():
    sweep = _sweep(save_calls=2, sweep={"model": ["tiny", "small"], "async_save": [False, True]})
    assert [job.params for job in sweep.jobs] == [
        {"model": "tiny", "async_save": False}, {"model": "tiny", "async_save": True},
        {"model": "small", "async_save": False}, {"model": "small", "async_save": True}]
    job = sweep.jobs[1]
    assert job.argv == ["--backend", "dcp", "--save-calls", "2", "--model", "tiny", "--async-save"]
    assert job.options["save_calls"] == 2 and job.options["nnodes"] == 1  # click's defaults and types
    assert job.options["nproc_per_node"] is None  # one rank per GPU on a GPU host, else 2: resolved by the launch
    assert job.report_name == "results_tiny_async_save.json"


def test_shipped_sweeps():
    dcp = load_sweep(ROOT / "configs/sweeps/dcp.yaml", parse_argv)
    assert len(dcp.jobs) == 8
    assert "results_vit-base_gloo_2_2_s3.json" in {job.report_name for job in dcp.jobs}
    assert {job.options["backend"] for job in dcp.jobs} == {"dcp"}
    megatron = load_sweep(ROOT / "configs/sweeps/megatron_parallelism.yaml", parse_argv)
    assert [job.params for job in megatron.jobs][1] == {"tp": 1, "ckpt_format": "torch"}
    assert {job.options["backend"] for job in megatron.jobs} == {"megatron"}
    for name in ("dcp_disk.yaml", "dcp_ddp_ec2.yaml"):
        assert load_sweep(ROOT / "configs/sweeps" / name, parse_argv).jobs
