"""Bad input: one clear line naming the value, exit code 2, nothing launched or left behind."""

import pytest
from helpers import assert_one_line_error, launch


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--config", "missing.yaml"], "config file not found"),
        (["--tp", "3"], "not divisible by TP x PP x CP = 3"),
        (["--nproc-per-node", "4", "--tp", "2", "--ep", "3", "--set", "num_experts=6"], "--ep 3"),
        (["--ep", "2"], "needs an MoE model"),
        (["--save-interval", "7", "--train-iters", "6"], "--save-interval 7"),
        (["--ckpt-format", "zarr"], "--ckpt-format 'zarr'"),
        (["--ckpt-format", "torch", "--async-save"], "--async-save needs --ckpt-format torch_dist"),
        (["--save-dir", "/proc/not-here"], "--save-dir /proc/not-here"),
        (["--set", "oops"], "expected key=value"),
        (["--tp", "2", "--set", "num_attention_heads=3"], "num_attention_heads=3"),
        (["--cp", "2"], "context_parallel_size > 1 needs Transformer Engine"),
        (["--ckpt-format", "torch", "--use-distributed-optimizer"], "distrib_optim.pt"),
        # megatron-core's: expert biases at ETP 1 only; its local experts at TP 1 and EP 1 fail their first step
        (["--tp", "2", "--set", "num_experts=4"], "megatron-core takes biases in experts only at 1"),
        (["--set", "num_experts=4"], "at TP 1 and EP 1: megatron-core 0.16.1's local experts add their bias"),
    ],
)
def test_user_mistakes_are_one_line_exit_2(tmp_path, args, needle):
    result = launch(*args, runs_dir=tmp_path / "runs")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_unset_required_variable(tmp_path):
    exp = tmp_path / "exp.yaml"
    exp.write_text("workspace: ${MY_WORKSPACE}\nmodules: {pre_trainer: {model: tiny_gpt.yaml}}\n")
    result = launch("--config", str(exp), runs_dir=tmp_path / "runs")
    assert result.returncode == 2 and "MY_WORKSPACE is not set" in result.stderr


def test_a_save_dir_that_cannot_be_created_leaves_no_runs_folder(tmp_path):
    runs = tmp_path / "new" / "runs"
    result = launch("--save-dir", "/proc/ckpt-bench", runs_dir=runs)
    assert_one_line_error(result, "--save-dir /proc/ckpt-bench")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("args,needle", [
    (["--nproc-per-node", "x"], "Invalid value for '--nproc-per-node'"),
    (["--no-such-option"], "No such option '--no-such-option'"),
])
def test_usage_errors_are_one_line(tmp_path, args, needle):
    assert_one_line_error(launch(*args, runs_dir=tmp_path / "runs"), needle)
