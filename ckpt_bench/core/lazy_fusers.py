"""megatron-core's fused functions built by `torch.compile` at their first call, not at megatron-core's import.

megatron-core binds `jit_fuser` to `torch.compile` (megatron/core/jit.py, `enable_jit_fuser`: 0.16.1 and 0.19 alike)
and decorates some 35 functions with it as its modules are imported (the fused bias-GeLU, -SwiGLU, -dropout, the
MoE router's and token dispatcher's helpers, ...). `torch.compile` compiles nothing then, but building each
wrapper imports torch._dynamo and inductor's bisector: 1.9 s of the 2.6 s megatron-core's import took here, paid
by every rank of every pass, by the rank-costs worker, and again by megatron-core's spawned writer, before
anything is timed; most of those functions are never called on a checkpoint's path, and none on CPU.

`install()` (called by the package's `__init__`, so before any megatron-core import of ours) puts a finder on
`sys.meta_path` that runs megatron/core/jit.py, and that module alone, with `torch.compile` replaced by
`deferred_compile`: `jit_fuser(fn)` then returns a function that calls `torch.compile(fn, **the same options)` on
its first call and the compiled function from then on, which is what `torch.compile`'s own wrapper does at its
first call. Megatron-LM's `--disable-jit-fuser` still replaces `jit_fuser` (`disable_jit_fuser`); nothing else of
torch or megatron-core changes. Where megatron-core was imported before ckpt-bench, nothing changes either.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import sys

#: The module whose `torch.compile` is deferred.
JIT_MODULE = "megatron.core.jit"


def deferred(compile_):
    """`compile_` (torch.compile) with its call on a function moved to that function's first call."""

    def deferred_compile(model=None, **options):
        if model is None:  # used as `@torch.compile(...)`
            return functools.partial(deferred_compile, **options)
        if not inspect.isfunction(model):  # a module or another callable: built as torch builds it
            return compile_(model, **options)
        compiled = None

        @functools.wraps(model)
        def compiled_at_first_call(*args, **kwargs):
            nonlocal compiled
            if compiled is None:
                compiled = compile_(model, **options)
            return compiled(*args, **kwargs)

        return compiled_at_first_call

    return deferred_compile


class _DeferringLoader(importlib.abc.Loader):
    """Runs a module with `torch.compile` deferred (`deferred`) while its body runs, then puts it back."""

    def __init__(self, loader: importlib.abc.Loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        import torch

        compile_ = torch.compile
        torch.compile = deferred(compile_)
        try:
            self.loader.exec_module(module)
        finally:
            torch.compile = compile_


class _JitFinder(importlib.abc.MetaPathFinder):
    """Finds `JIT_MODULE` where the path finder would, loaded through `_DeferringLoader`."""

    def find_spec(self, fullname, path, target=None):
        if fullname != JIT_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _DeferringLoader(spec.loader)
        return spec


def install() -> None:
    """Put the finder first on `sys.meta_path` (once)."""
    if not any(isinstance(finder, _JitFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _JitFinder())
