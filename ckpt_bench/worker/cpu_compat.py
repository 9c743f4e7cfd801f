"""Run megatron-core on a machine without CUDA (gloo, CPU tensors) -- and do nothing where CUDA exists.

megatron-core assumes a GPU in a handful of places that the checkpoint paths we benchmark go
through. `install()` redirects exactly those, and only when `torch.cuda.is_available()` is False,
so the worker runs unchanged on GPUs (nccl) and every CUDA workaround of the benchmark is here:

* `torch.cuda.synchronize()` -> no-op. Called by `TemporalAsyncCaller.schedule_async_call` and by
  `FullyParallelLoadStrategyWrapper.load` to wait for device work; on CPU there is none.
* `torch.cuda.current_device()` -> `torch.device("cpu")`, not an ordinal: megatron-core passes it
  straight on as a device (`device=torch.cuda.current_device()`, `.to(...)`) -- for the one-element
  tensors `AsyncCallsQueue` all-reduces, in the optimizers, the p2p schedules, rotary embeddings,
  and inside autograd backward functions (`tensor_parallel.mappings._gather_along_first_dim`,
  used by the MoE token dispatcher), where torch function modes are not active.
* `torch.cuda.current_stream()` -> the CPU's stream (`torch.cpu.current_stream()`, whose `wait_event` and
  `wait_stream` do nothing): megatron-core 0.19 (not 0.16.1) takes the current stream at the start of every
  gradient sync (`param_and_grad_buffer.start_grad_sync`) to wait on CUDA-graph events.
* `torch.cuda.device_count()` -> 1, `torch.cuda.set_device` -> no-op: the persistent async writer
  calls `set_device(rank % device_count())` on start-up.
* A `TorchFunctionMode` that maps `device="cuda"`, `"cuda:N"` and `torch.device("cuda")` to the CPU
  in factory calls and in `Tensor.to`, makes `Tensor.cuda()` the identity, and answers
  `Tensor.type()` with the CUDA type name. megatron-core creates buffers and exchange tensors with
  `device="cuda"` (`megatron.core.optimizer`, `distributed`, `dist_checkpointing.exchange_utils`
  -- used by `FullyParallelLoadStrategyWrapper` --) and moves some with `.cuda()`, and the
  Megatron optimizers sort params by `param.type() == 'torch.cuda.FloatTensor'` (`optimizer.py`,
  `distrib_optimizer.py`; `clip_grads.py` asserts it).
* The CUDA RNG tracker (`model_parallel_cuda_manual_seed`, `get_cuda_rng_tracker().fork()` in
  weight init and attention dropout): `torch.cuda.{get,set}_rng_state`/`manual_seed` and
  `tensor_parallel.random._{get,set}_cuda_rng_state` use the CPU generator, which is the one
  CPU dropout and init draw from. The tracker's warning that the "CPU RNG state changed within
  GPU RNG context" is filtered out: on CPU both are the same generator, which is the point.
* `FileSystemWriterAsync.preload_tensors`, the "D2H copy" that turns an async save's tensors into
  a private snapshot: on CPU, `tensor.to("cpu")` returns the live parameter itself, so a
  persistent (spawned) writer would write tensors that training is already changing. Here it
  clones instead, which keeps the snapshot semantics of the GPU path.

The mode is a thread-local torch function mode entered on the calling (main) thread; forked
writers inherit it, and a spawned persistent writer gets it by re-importing the entry module,
which calls `install()` at import for that reason.
"""

from __future__ import annotations

import logging

import torch
from torch.overrides import TorchFunctionMode

_installed = False


def _is_cuda(device) -> bool:
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, torch.device) and device.type == "cuda"


class _CudaToCpu(TorchFunctionMode):
    """Maps CUDA placements to the CPU; see the module docstring for why each rule exists."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = "cpu"
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.to and len(args) > 1 and _is_cuda(args[1]):
            args = (args[0], "cpu", *args[2:])
        result = func(*args, **kwargs)
        if func is torch.Tensor.type and len(args) == 1 and not kwargs and not result.startswith("torch.cuda."):
            return result.replace("torch.", "torch.cuda.", 1)
        return result


def _preload_tensors_cloned(write_buckets, non_blocking=True):
    """`FileSystemWriterAsync.preload_tensors` for CPU tensors: copy them, as the D2H copy would."""
    return [
        (file_name, storage_key, (bytes_data, [(item, tensor.detach().clone()) for item, tensor in tensors]))
        for file_name, storage_key, (bytes_data, tensors) in write_buckets
    ]


def install() -> None:
    """Apply the redirections once per process; a no-op when CUDA is available."""
    global _installed
    if _installed or torch.cuda.is_available():
        return
    _installed = True

    from megatron.core.dist_checkpointing.strategies.filesystem_async import FileSystemWriterAsync
    from megatron.core.tensor_parallel import random as tp_random

    torch.cuda.synchronize = lambda device=None: None
    torch.cuda.current_device = lambda: torch.device("cpu")
    torch.cuda.current_stream = lambda device=None: torch.cpu.current_stream()
    torch.cuda.device_count = lambda: 1
    torch.cuda.set_device = lambda device: None

    torch.cuda.get_rng_state = lambda device="cuda": torch.get_rng_state()
    torch.cuda.set_rng_state = lambda new_state, device="cuda": torch.set_rng_state(new_state)
    torch.cuda.manual_seed = torch.manual_seed
    tp_random._get_cuda_rng_state = lambda *args, **kwargs: torch.get_rng_state()
    tp_random._set_cuda_rng_state = lambda new_state, *args, **kwargs: torch.set_rng_state(new_state)

    logging.getLogger(tp_random.__name__).addFilter(
        lambda record: "CPU RNG state changed within GPU RNG context" not in record.getMessage()
    )

    FileSystemWriterAsync.preload_tensors = staticmethod(_preload_tensors_cloned)

    _CudaToCpu().__enter__()
