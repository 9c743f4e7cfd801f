"""--framework megatron-lm without a launch: the flags written from a checkout's parser, Megatron-LM's stdout out of
torchrun's interleaved console, the saved iterations against the checkpoint folder, the bootstrap on a GPU host."""

import json
import os
import subprocess
import sys

import pytest
import torch

from ckpt_bench.backends.frameworks import megatron_lm, megatron_lm_bootstrap
from ckpt_bench.backends.frameworks.megatron_lm import (
    ParserFlags,
    check_gpu_extensions,
    megatron_stdout,
    saved_iterations_check,
)
from ckpt_bench.core.errors import ConfigError
from ckpt_bench.core.events import CheckpointEvent, EventKind
from ckpt_bench.report.parsers.megatron import MegatronParser
from ckpt_bench.storage import LocalStorage

# As megatron_lm_bootstrap.describe_parser prints them, for arguments of each kind Megatron-LM core_v0.16.1 has.
DESCRIBED = [
    {"dest": "num_layers", "flags": ["--num-layers"], "takes_value": True, "sets": [], "default": None},
    {"dest": "lr_decay_iters", "flags": ["--lr-decay-iters"], "takes_value": True, "sets": [], "default": None},
    {"dest": "async_save", "flags": ["--async-save"], "takes_value": False, "sets": [["--async-save", True]],
     "default": False},
    {"dest": "add_bias_linear", "flags": ["--disable-bias-linear"], "takes_value": False,
     "sets": [["--disable-bias-linear", False]], "default": True},
    {"dest": "ckpt_fully_parallel_save", "flags": ["--no-ckpt-fully-parallel-save"], "takes_value": False,
     "sets": [["--no-ckpt-fully-parallel-save", False]], "default": True},
    {"dest": "no_persist_layer_norm", "flags": ["--no-persist-layer-norm"], "takes_value": False,
     "sets": [["--no-persist-layer-norm", True]], "default": False},
    {"dest": "rl_partial_rollouts", "flags": ["--rl-partial-rollouts", "--no-rl-partial-rollouts"],
     "takes_value": False, "sets": [["--rl-partial-rollouts", True], ["--no-rl-partial-rollouts", False]],
     "default": False},
    {"dest": "layernorm_epsilon", "flags": ["--norm-epsilon"], "takes_value": True, "sets": [], "default": None},
    {"dest": "eval_iters", "flags": ["--eval-iters"], "takes_value": True, "sets": [], "default": None},
    {"dest": "transformer_impl", "flags": ["--transformer-impl"], "takes_value": True, "sets": [],
     "default": "transformer_engine"},
]


def test_flags_follow_the_parser():
    parser = ParserFlags.of(DESCRIBED)
    argv, left_out = parser.argv({
        "num_layers": 2, "async_save": True, "add_bias_linear": False, "ckpt_fully_parallel_save": True,
        "no_persist_layer_norm": True, "rl_partial_rollouts": False, "norm_epsilon": 1e-5, "eval_iters": 0,
        "lr_decay_iters": None, "disable_bias_linear": True, "moe_primus_only": 3, "swiglu": True,
    })
    assert argv == ["--num-layers", "2", "--async-save", "--disable-bias-linear", "--no-persist-layer-norm",
                    "--norm-epsilon", "1e-05", "--eval-iters", "0", "--disable-bias-linear"]
    assert left_out == ["moe_primus_only", "swiglu"]  # no flag of this parser's
    # Booleans at the parser's default need no flag, whichever way the switch is spelled.
    assert parser.argv({"async_save": False, "add_bias_linear": True, "rl_partial_rollouts": False}) == ([], [])
    assert parser.argv({"rl_partial_rollouts": True, "num_layers": [1, 2]}) == (
        ["--rl-partial-rollouts", "--num-layers", "1", "2"], [])


# Two orders torchrun --tee gave core_v0.16.1's lines on 2 CPU ranks: rank 0's line inside the last rank's timer
# block (the save), and the last rank's block before rank 0's line of the load it times.
CONSOLE = """\
[default0]: [2026-11-25 18:52:09.645975] saving checkpoint at iteration       2 to /ckpt in torch_dist format
[default1]:INFO:megatron.core.timers:(min, max) time across ranks (ms):
[default0]:  [2026-11-25 18:52:18.547148] successfully saved checkpoint from iteration       2 to /ckpt [ t 1/1, p 1/1 ]
[default1]:    save-checkpoint ................................: (8903.29, 8903.74)
[default1]:INFO:megatron.core.timers:(min, max) time across ranks (ms):
[default1]:    load-checkpoint ................................: (37.37, 38.53)
[default0]: loading checkpoint from /ckpt at iteration 2
[default0]:  successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 2
[default1]:INFO:megatron.core.timers:(min, max) time across ranks (ms):
[default1]:    model-and-optimizer-setup ......................: (54.67, 54.87)
"""
HEADER = "INFO:megatron.core.timers:(min, max) time across ranks (ms):"


def test_megatron_stdout_from_the_console():
    stdout = "".join(megatron_stdout(CONSOLE.splitlines(keepends=True))).splitlines()
    assert stdout == [
        " [2026-11-25 18:52:09.645975] saving checkpoint at iteration       2 to /ckpt in torch_dist format",
        "  [2026-11-25 18:52:18.547148] successfully saved checkpoint from iteration       2 to /ckpt [ t 1/1, p 1/1 ]",
        HEADER,
        "    save-checkpoint ................................: (8903.29, 8903.74)",
        " loading checkpoint from /ckpt at iteration 2",
        HEADER,
        "    load-checkpoint ................................: (37.37, 38.53)",
        "  successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 2",
        HEADER,
        "    model-and-optimizer-setup ......................: (54.67, 54.87)",
    ]
    parser = MegatronParser()
    events = [e for seq, line in enumerate(stdout) for e in parser.feed_line(line, seq, None)] + parser.finish()
    assert [e.elapsed_ns for e in events if e.kind == EventKind.LOAD_END and e.elapsed_ns] == [38_530_000]


def test_saved_iterations_against_the_folder(tmp_path):
    events, checkpoints = tmp_path / "events", tmp_path / "checkpoints"
    events.mkdir()
    for iteration in (2, 4):
        (checkpoints / f"iter_{iteration:07d}").mkdir(parents=True)
        (checkpoints / f"iter_{iteration:07d}" / "__0_0.distcp").write_bytes(b"x")
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("4")

    def logged(*iterations):
        (events / "rank-0.jsonl").write_text("".join(
            CheckpointEvent(EventKind.SAVE_END, rank=0, iteration=i).to_json() + "\n" for i in iterations))
        storage = LocalStorage(str(tmp_path))
        storage.attach(str(checkpoints), tmp_path / "run")
        return saved_iterations_check(events, storage)

    assert logged(2, 4) == ["the checkpoint folder holds what the log says was saved: iterations 2, 4, "
                            "latest_checkpointed_iteration.txt 4"]
    assert logged(2, 4, 6) == ["the checkpoint folder differs from the log: the log says iterations 2, 4, 6 were "
                               "saved, the folder holds iter_* folders of 2, 4 and latest_checkpointed_iteration.txt "
                               "says 4"]
    (checkpoints / "latest_checkpointed_iteration.txt").unlink()
    assert "latest_checkpointed_iteration.txt says nothing" in logged(2, 4)[0]


def test_cpu_arguments_unless_named():
    args = megatron_lm_bootstrap.cpu_arguments(["--num-layers", "2", "--transformer-impl=local",
                                                "--distributed-backend", "gloo"])
    assert args == ["--num-layers", "2", "--transformer-impl=local", "--distributed-backend", "gloo",
                    "--no-persist-layer-norm", "--no-gradient-accumulation-fusion", "--no-bias-gelu-fusion"]
    assert megatron_lm_bootstrap.cpu_arguments([])[:4] == ["--distributed-backend", "gloo", "--transformer-impl",
                                                           "local"]


def test_bootstrap_leaves_a_gpu_run_alone(monkeypatch):
    """Where CUDA is available nothing is installed and the script gets its arguments unchanged."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(megatron_lm_bootstrap, "_installed", False)
    before = dict(sys.modules)
    assert megatron_lm_bootstrap.install(["--num-layers", "2"]) == ["--num-layers", "2"]
    assert megatron_lm_bootstrap.BATCH_INVARIANT not in set(sys.modules) - set(before)
    assert not megatron_lm_bootstrap._installed


def test_async_save_timer_after_its_schedule_line():
    """An async save returns when scheduled: its timer block follows the 'scheduled' line, not the finalize."""
    console = """\
[default0]:[2026-11-25 19:08:36.442805] saving checkpoint at iteration       2 to /ckpt in torch_dist format
[default1]:INFO:megatron.core.timers:(min, max) time across ranks (ms):
[default1]:    save-checkpoint ................................: (35619.57, 35620.62)
[default0]:  [2026-11-25 19:09:11.934942] scheduled an async checkpoint save at iteration       2 to /ckpt
[default0]:  [2026-11-25 19:09:12.876749] successfully saved checkpoint from iteration       2 to /ckpt [ t 1/1, p 1/1 ]
"""
    stdout = "".join(megatron_stdout(console.splitlines(keepends=True)))
    order = [stdout.index(text) for text in ("saving checkpoint", "scheduled an async", "time across ranks",
                                             "save-checkpoint ....", "successfully saved")]
    assert order == sorted(order)


def test_a_gpu_run_is_refused_up_front_where_its_settings_need_what_is_not_installed(monkeypatch,
                                                                                    upstream_megatron_lm):
    """On GPUs the checkout runs as it is (no CPU layer): Megatron-LM's defaults need Transformer Engine and Apex,
    and core_v0.16.1's MoE router names te_general_gemm only when TE imports (seen on an H200 without TE: NameError
    at the first step). Neither is installed here."""
    defaults = ParserFlags.of(DESCRIBED).default
    assert defaults["transformer_impl"] == "transformer_engine"
    monkeypatch.setattr(megatron_lm, "gpu_count", lambda: 1)
    with pytest.raises(ConfigError) as refused:
        check_gpu_extensions({**defaults, "gradient_accumulation_fusion": True, "num_experts": 4}, upstream_megatron_lm)
    message = str(refused.value)
    assert message.startswith("--framework megatron-lm on GPUs: transformer_impl is transformer_engine")
    for remedy in ("--set transformer_impl=local", "--set gradient_accumulation_fusion=false", "te_general_gemm"):
        assert remedy in message
    local = {"transformer_impl": "local", "gradient_accumulation_fusion": False}
    check_gpu_extensions(local, upstream_megatron_lm)  # what the H200 ran, dense
    with pytest.raises(ConfigError, match=r"num_experts: this checkout's MoE router \(megatron/core/transformer/moe/"):
        check_gpu_extensions({**local, "num_experts": 4}, upstream_megatron_lm)
    monkeypatch.setattr(megatron_lm, "gpu_count", lambda: 0)  # CPU ranks: the bootstrap's layer sees to all three
    check_gpu_extensions({**defaults, "gradient_accumulation_fusion": True, "num_experts": 4}, upstream_megatron_lm)


def test_an_moe_the_local_spec_cannot_train_is_refused_before_any_rank_starts(upstream_megatron_lm, tmp_path):
    """On CPU ranks Megatron-LM runs megatron-core's local spec, whose experts at TP 1 and EP 1 fail their first
    step when they have biases (Megatron-LM's default): one line, as for the built-in worker."""
    from helpers import assert_one_line_error, launch

    result = launch("--framework", "megatron-lm", "--megatron-path", str(upstream_megatron_lm), "--nproc-per-node",
                    "1", "--set", "num_experts=4", runs_dir=tmp_path / "runs")
    assert_one_line_error(result, "num_experts with add_bias_linear (Megatron-LM's default) at TP 1 and EP 1")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_set_argument_the_checkout_lacks_is_refused_naming_its_version(tmp_path):
    """`--set async_strategy=nvrx` (0.17 on) given to a 0.16.1 checkout: one line naming its version, not dropped."""
    (tmp_path / "megatron" / "core").mkdir(parents=True)
    info = tmp_path / "megatron" / "core" / "package_info.py"
    info.write_text('MAJOR = 0\nMINOR = 16\nPATCH = 1\nPRE_RELEASE = ""\n')
    parser = megatron_lm.ParserFlags.of([
        {"dest": "enable_msc", "flags": ["--disable-msc"], "takes_value": False, "sets": [["--disable-msc", False]],
         "default": True},
        {"dest": "save_retain_interval", "flags": ["--save-retain-interval"], "takes_value": True, "sets": [],
         "default": None}])
    megatron_lm.check_given_arguments({"save_retain_interval": 2, "enable_msc": False}, parser, tmp_path)
    with pytest.raises(ConfigError, match=r"^--set async_strategy=nvrx: not an argument of the Megatron-LM checkout "
                                          r".* \(megatron-core 0\.16\.1\); a Megatron-LM that defines it takes it$"):
        megatron_lm.check_given_arguments({"async_strategy": "nvrx"}, parser, tmp_path)


def test_a_parser_that_cannot_import_a_requirement_names_the_module_and_its_install(tmp_path):
    """The H200's image had megatron-core 0.19.2 and no pydantic, which core_v0.16.1's megatron.training imports
    (through megatron.rl): the line names the module and its install, not the checkout's age."""
    missing = megatron_lm.parser_failure(tmp_path, "ModuleNotFoundError: No module named 'pydantic'")
    assert str(missing) == (f"--megatron-path {tmp_path}: building its argument parser imports pydantic, which "
                            f"{sys.executable} lacks: install the package that provides it (pip install pydantic), "
                            "as Megatron-LM's own requirements must be there")
    assert "(pip install pyyaml)" in str(megatron_lm.parser_failure(tmp_path, "ModuleNotFoundError: No module "
                                                                              "named 'yaml'"))
    # A checkout without megatron.training's parser is the checkout's fault, not a requirement's.
    for last in ("ModuleNotFoundError: No module named 'megatron.training'",
                 "ImportError: cannot import name 'add_megatron_arguments' from 'megatron.training.arguments'"):
        assert "give a Megatron-LM checkout of 2025 or later" in str(megatron_lm.parser_failure(tmp_path, last))


def test_the_checkout_parser_is_built_once_and_again_after_an_edit(tmp_path, monkeypatch):
    """The parser's description is cached (6 s a launch here): built again where the checkout's sources or the
    environment it is built in change, and a failure is not kept."""
    root = tmp_path / "Megatron-LM"
    arguments = root / "megatron" / "training" / "arguments.py"
    arguments.parent.mkdir(parents=True)
    arguments.write_text("def add_megatron_arguments(parser): ...\n")
    monkeypatch.setenv("CKPT_BENCH_CACHE", str(tmp_path / "cache"))
    built, fails = [], []

    def describe(argv, **kwargs):  # the bootstrap's subprocess: what it prints for a checkout
        assert kwargs["cwd"] == root  # its megatron first, not one in the folder the launch is run from
        built.append(argv)
        if fails:
            return subprocess.CompletedProcess(argv, 1, "", "ModuleNotFoundError: No module named 'pydantic'\n")
        return subprocess.CompletedProcess(argv, 0, json.dumps(DESCRIBED) + "\n", "")

    monkeypatch.setattr(megatron_lm.subprocess, "run", describe)
    first = megatron_lm.parser_flags(root)
    assert megatron_lm.parser_flags(root) == first == ParserFlags.of(DESCRIBED)
    assert len(built) == 1
    entry, = (tmp_path / "cache" / "megatron-lm-parsers").iterdir()
    entry.write_text('[{"dest": "num_layers"}]')  # an entry of another shape is described again
    assert megatron_lm.parser_flags(root) == first and len(built) == 2
    later = arguments.stat().st_mtime_ns + 10**9
    os.utime(arguments, ns=(later, later))  # touched
    megatron_lm.parser_flags(root)
    assert len(built) == 2  # the same content: the same entry
    arguments.write_text("def add_megatron_arguments(parser): return parser\n")  # an edit
    megatron_lm.parser_flags(root)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # another environment
    megatron_lm.parser_flags(root)
    assert len(built) == 4
    fails.append(True)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "elsewhere"))
    for _ in range(2):
        with pytest.raises(ConfigError, match="pip install pydantic"):
            megatron_lm.parser_flags(root)
    assert len(built) == 6
