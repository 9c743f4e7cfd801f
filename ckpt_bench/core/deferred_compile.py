"""Megatron's `torch.compile`d functions built at their first call, not as its modules are imported.

megatron-core binds `jit_fuser` to `torch.compile` (megatron/core/jit.py, `enable_jit_fuser`: 0.16.1 and 0.19 alike)
and decorates 41 functions with it as its modules are imported (the fused bias-GeLU, -SwiGLU, -dropout, the MoE
router's and token dispatcher's helpers, ...); 0.19 also decorates a static method with `@torch.compile` itself
(transformer/moe/router.py, `InferenceTopKRouter._compiled_topk_routing`). `torch.compile` compiles nothing then,
but building each wrapper imports torch._dynamo and inductor's bisector: 1.4 s of the 2.6-3.2 s megatron-core's
import took here, paid by every rank of every pass, by the rank-costs worker and by megatron-core's spawned writer,
before anything is timed; most of those functions are never called on a checkpoint's path.

`install()` (called by the package's `__init__`, so before any megatron import of ours) puts a finder on
`sys.meta_path` that runs each module of megatron-core and of Megatron-LM's `megatron.training` and
`megatron.legacy` (`MODULES`) with `torch.compile` replaced by `deferred(torch.compile)` while its body runs. A
function such a module decorates gets a wrapper that calls `torch.compile(fn, **the same options)` at its first
call and the compiled function from then on, which is when `torch.compile`'s own wrapper compiles it. Three
things move with it to the first call: an error in the options, the reading of `TORCHDYNAMO_DISABLE` and of
dynamo's configuration, and the import of torch._dynamo. A first call inside a region being traced runs the
function there (traced with the region, as torch.compile's wrapper would be) and leaves the compile to the next
call outside. What any other module hands `torch.compile` meanwhile (one imported by a megatron module, another
thread), and modules or other callables, are built at once, as before. Megatron-LM's `--disable-jit-fuser` still
replaces `jit_fuser`. Where megatron was imported before ckpt-bench, nothing changes.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import sys

#: The packages whose modules run with `torch.compile` deferred.
MODULES = ("megatron.core", "megatron.training", "megatron.legacy")


def _within(name: str, modules: tuple[str, ...]) -> bool:
    return any(name == module or name.startswith(module + ".") for module in modules)


def deferred(compile_, modules: tuple[str, ...] = MODULES):
    """`compile_` (torch.compile) with its call on a function by one of `modules` moved to that function's first
    call (outside a region being traced); any other call as it was."""
    import torch

    def deferred_compile(model=None, **options):
        if not _within(sys._getframe(1).f_globals.get("__name__", ""), modules):
            return compile_(model, **options)  # not a megatron module's (one it imports, another thread)
        if model is None:  # `@torch.compile(...)`: the partial is called from the same module
            return functools.partial(deferred_compile, **options)
        if not inspect.isfunction(model):  # a module or another callable: built as torch builds it
            return compile_(model, **options)
        compiled = None

        @functools.wraps(model)
        def compiled_at_first_call(*args, **kwargs):
            nonlocal compiled
            if compiled is None:
                if torch.compiler.is_compiling():  # traced with the region calling it
                    return model(*args, **kwargs)
                compiled = compile_(model, **options)
            return compiled(*args, **kwargs)

        return compiled_at_first_call

    deferred_compile.defers = compile_
    return deferred_compile


class _DeferringLoader(importlib.abc.Loader):
    """Runs a module with `torch.compile` deferred while its body runs (unless a module importing it already
    deferred it), then puts it back."""

    def __init__(self, loader: importlib.abc.Loader):
        self.loader = loader

    def __getattr__(self, name):  # get_source, get_resource_reader, ...: the path finder's loader's own
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        import torch  # a megatron module imports it first thing anyway

        compile_ = torch.compile
        if getattr(compile_, "defers", None):
            self.loader.exec_module(module)
            return
        torch.compile = deferred(compile_)
        try:
            self.loader.exec_module(module)
        finally:
            torch.compile = compile_


class _MegatronFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of `MODULES` where the path finder would, each loaded through `_DeferringLoader`."""

    def find_spec(self, fullname, path, target=None):
        if not _within(fullname, MODULES):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return None  # a namespace package, a compiled module, one found elsewhere: as the finders after us find it
        spec.loader = _DeferringLoader(spec.loader)
        return spec


def install() -> None:
    """Put the finder first on `sys.meta_path` (once)."""
    if not any(isinstance(finder, _MegatronFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MegatronFinder())
