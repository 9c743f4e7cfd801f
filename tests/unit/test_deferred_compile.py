"""Megatron's `torch.compile`d functions built at their first call (core/deferred_compile.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ckpt_bench.core.deferred_compile import deferred

HERE = (__name__,)  # this module stands for a megatron module: its calls are deferred


def fake_compile(built: list):
    def compile_(model, **options):
        built.append((getattr(model, "__name__", model), options))
        return lambda *args, **kwargs: ("compiled", model(*args, **kwargs))

    return compile_


def gelu(x, scale=1):
    return x * scale


def test_a_deferred_function_is_compiled_once_at_its_first_call_with_the_same_options():
    built = []
    fused = deferred(fake_compile(built), HERE)(gelu)
    assert built == [] and fused.__wrapped__ is gelu and fused.__name__ == "gelu"
    assert fused(2, scale=3) == ("compiled", 6) and fused(1) == ("compiled", 1)
    assert built == [("gelu", {})]
    # As a decorator with options, `@torch.compile(dynamic=True)`: the options reach the real call.
    fused = deferred(fake_compile(built), HERE)(dynamic=True)(gelu)
    assert len(built) == 1 and fused(4) == ("compiled", 4) and built[-1] == ("gelu", {"dynamic": True})


def test_a_first_call_inside_a_traced_region_runs_the_function_there_and_compiles_at_the_next(monkeypatch):
    import torch

    built = []
    fused = deferred(fake_compile(built), HERE)(gelu)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert fused(3) == 3 and built == []
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: False)
    assert fused(3) == ("compiled", 3) and built == [("gelu", {})]


def test_a_module_and_any_other_modules_call_are_built_at_once():
    built = []

    class Layer:
        def __call__(self, x):
            return x

    layer = Layer()
    assert deferred(fake_compile(built), HERE)(layer)(5) == ("compiled", 5) and built == [(layer, {})]
    # A module outside the deferred ones (here: not this one) gets torch.compile's own wrapper at once.
    assert deferred(fake_compile(built), ("megatron.core",))(gelu)(2) == ("compiled", 2) and len(built) == 2


def test_megatron_core_imported_after_ckpt_bench_builds_no_compiler_and_its_compiled_functions_compute_the_same():
    pytest.importorskip("megatron.core")
    script = """
import json, sys
import ckpt_bench
import torch
compile_ = torch.compile
import inspect
import megatron.core
import megatron.core.dist_checkpointing, megatron.core.models.gpt, megatron.core.optimizer
import megatron.core.pipeline_parallel  # 0.19: the MoE router's own @torch.compile methods
from megatron.core import jit
from megatron.core.fusions import fused_bias_gelu
imported = "torch._dynamo" in sys.modules
assert "def bias_gelu" in inspect.getsource(fused_bias_gelu)  # the loader's other methods still answer
def compiled():
    return inspect.getclosurevars(fused_bias_gelu.bias_gelu).nonlocals["compiled"]
before = compiled()
x, bias = torch.randn(3, 5), torch.randn(5)
same = torch.equal(fused_bias_gelu.bias_gelu(bias, x), fused_bias_gelu.bias_gelu.__wrapped__(bias, x))
print(json.dumps({"dynamo_at_import": imported, "restored": torch.compile is compile_,
                  "jit_fuser": jit.jit_fuser.__name__, "same": same, "built_before_the_call": before is not None,
                  "built_at_the_call": compiled() is not None, "dynamo_at_the_call": "torch._dynamo" in sys.modules}))
"""
    # TORCHDYNAMO_DISABLE: torch.compile goes through dynamo as ever and hands back the function as it is (not 10 s
    # of inductor's C++ build for one function on this CPU).
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", script], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TORCHDYNAMO_DISABLE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen == {"dynamo_at_import": False, "restored": True, "jit_fuser": "deferred_compile", "same": True,
                    "built_before_the_call": False, "built_at_the_call": True, "dynamo_at_the_call": True}
