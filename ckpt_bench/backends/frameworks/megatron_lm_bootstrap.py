"""Run Megatron-LM's own training script on a rank: `python -m ckpt_bench.backends.frameworks.megatron_lm_bootstrap
DIR/pretrain_gpt.py ARGS...` (torchrun starts it, `--framework megatron-lm`).

`python -m ckpt_bench.backends.frameworks.megatron_lm_bootstrap --describe-parser` prints the checkout's argument
parser instead, as JSON (`describe_parser`): the launcher writes the flags it passes from it.

Where CUDA is available the script runs exactly as `python DIR/pretrain_gpt.py ARGS...` would. Where it is
not, the CPU layer is installed first: megatron-core's (`ckpt_bench.worker.cpu_compat`), and what
megatron.training needs beyond it (`install`, each redirection below with the call that needs it). Nothing
of the checkout is changed; its code runs as it is, on gloo ranks and CPU tensors.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import types
from functools import partial
from pathlib import Path

import torch

_installed = False
BATCH_INVARIANT = "megatron.core.transformer.custom_layers.batch_invariant_kernels"

# Arguments the ranks get on CPU unless the command names them: Megatron-LM's defaults that need GPU kernels.
CPU_ARGUMENTS = (
    # NCCL needs GPUs (Megatron-LM's default backend): gloo, whose collectives run on CPU tensors.
    ("--distributed-backend", "gloo"),
    # Transformer Engine runs on GPUs only: megatron-core's own layers instead of the TE layer specs that
    # gpt_builders picks by default (TESpecProvider).
    ("--transformer-impl", "local"),
    # Apex's persistent layer-norm kernel (a CUDA kernel); megatron-core's torch norm refuses the setting.
    ("--no-persist-layer-norm",),
    # Apex's fused weight-gradient accumulation (fused_weight_gradient_mlp_cuda): the parallel linear layers
    # refuse to build without it.
    ("--no-gradient-accumulation-fusion",),
    # The local layers' experts (SequentialMLP, MoE) apply the fused bias-GELU only with swiglu/quick_gelu and
    # raise otherwise; with TE's grouped experts it is not reached.
    ("--no-bias-gelu-fusion",),
)


class _HostStream:
    """`torch.cuda.Stream` on CPU: work runs in program order, so there is nothing to wait for."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def wait_stream(self, stream) -> None:
        pass


def _batch_invariant_unavailable(*args, **kwargs):
    raise RuntimeError("--batch-invariant-mode needs triton kernels, which run on GPUs only")


def _batch_invariant_stand_in() -> types.ModuleType:
    """megatron.training.initialize imports `enable_batch_invariant_mode` from a module that imports
    triton at its top (absent beside a CPU torch; a stand-in `triton` package breaks torch's own inductor
    imports). Only `--batch-invariant-mode` calls into it: the stand-in refuses that one flag."""
    module = types.ModuleType(BATCH_INVARIANT)
    module.enable_batch_invariant_mode = _batch_invariant_unavailable
    module.is_batch_invariant_mode_enabled = lambda: False
    return module


def install(args: list[str]) -> list[str]:
    """The CPU layer for megatron.training, and the script's arguments for CPU ranks (unchanged where CUDA
    is available, where nothing is installed)."""
    global _installed
    if _installed or torch.cuda.is_available():
        return args
    _installed = True
    # Every torch.compile of a CPU rank, and of the processes it starts, hands back the function as it is (dynamo
    # reads this at each torch.compile call, and megatron's are at their first call, `core/deferred_compile.py`):
    # Megatron-LM warms its fused functions up before training (`set_jit_fusion_options`), and inductor builds each
    # in C++ on a CPU, 5 s of every rank's start here (time to initialize megatron 6.8 s, 1.5 s without) for
    # kernels a GPU would build with triton instead; no checkpoint step calls them.
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    sys.modules.setdefault(BATCH_INVARIANT, _batch_invariant_stand_in())

    from ckpt_bench.backends.megatron.training import _define_missing_te_gemm
    from ckpt_bench.worker import cpu_compat

    cpu_compat.install()
    _define_missing_te_gemm()  # the MoE router's Transformer Engine test, as in the built-in worker

    from megatron.training import initialize, training

    # pretrain() -> initialize_megatron asserts CUDA unless told `allow_no_cuda`, Megatron-LM's own switch
    # for CPU processes; nothing else reads it.
    training.initialize_megatron = partial(initialize.initialize_megatron, allow_no_cuda=True)
    try:
        from megatron.legacy import fused_kernels
    except ImportError:
        pass  # core_v0.19.0 has no megatron.legacy: its _compile_dependencies loads no fused kernel
    else:
        # core_v0.16.1: initialize_megatron -> _compile_dependencies -> fused_kernels.load runs
        # `$CUDA_HOME/bin/nvcc -V` (no CUDA_HOME here) and builds no kernel after it: nothing to load on CPU.
        fused_kernels.load = lambda args: None
    # get_model builds the DDP wrappers inside `torch.cuda.stream(torch.cuda.Stream())`, synchronised with
    # `torch.cuda.current_stream()` (cpu_compat's: the CPU's stream) on both sides: streams the CPU does not have.
    torch.cuda.Stream = _HostStream

    return cpu_arguments(args)


def cpu_arguments(args: list[str]) -> list[str]:
    """The script's arguments on a CPU rank: each of CPU_ARGUMENTS added unless `args` give that flag
    (`--flag [value]` or `--flag=value`)."""
    given = {arg.partition("=")[0] for arg in args if arg.startswith("--")}
    return [*args, *(arg for flag in CPU_ARGUMENTS if flag[0] not in given for arg in flag)]


def _run_as_main_of_this_module(script: str) -> None:
    """Run `script` as `__main__`, under this module's spec. Processes that megatron-core spawns from a rank
    (the checkpoint writer's multiprocessing Manager, the persistent async writer) import their parent's
    main module first: the script itself would import megatron.training before any CPU layer exists, this
    module installs the layer (below) and imports nothing of the script. They run megatron-core's own
    functions, nothing the script defines."""
    module = types.ModuleType("__main__")
    module.__file__ = script
    module.__spec__ = sys.modules["__main__"].__spec__
    sys.modules["__main__"] = module
    exec(compile(Path(script).read_bytes(), script, "exec"), module.__dict__)


def describe_parser() -> list[dict]:
    """Megatron-LM's own parser (`add_megatron_arguments`, with the arguments it generates from megatron-core's
    config dataclasses), one entry an argument: its `dest`, its long `flags`, whether it `takes_value`, the
    boolean each switch flag `sets` ([flag, value] pairs) and its `default` where that is a switch's or a string."""
    install([])  # megatron.training's package imports the triton user
    from megatron.training.arguments import add_megatron_arguments

    parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    described = []
    for action in parser._actions:
        flags = [flag for flag in action.option_strings if flag.startswith("--")]
        if not flags or isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse.BooleanOptionalAction):
            sets = [[flag, not flag.startswith("--no-")] for flag in flags]
        elif isinstance(action, argparse._StoreConstAction) and isinstance(action.const, bool):  # store_true/false
            sets = [[flag, action.const] for flag in flags]
        else:
            sets = []
        described.append({"dest": action.dest, "flags": flags, "takes_value": action.nargs != 0, "sets": sets,
                          "default": action.default if isinstance(action.default, (bool, str)) else None})
    return described


def main(argv: list[str]) -> None:
    if argv == ["--describe-parser"]:
        print(json.dumps(describe_parser()))
        return
    script, *args = argv
    cpu_args = install(args)
    sys.argv = [script, *cpu_args]
    sys.path[0] = str(Path(script).resolve().parent)  # as `python DIR/pretrain_gpt.py` sets it
    if _installed:
        _run_as_main_of_this_module(script)
    else:
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
elif __name__ == "__mp_main__":  # a process megatron-core spawned from a CPU rank (above)
    install([])
