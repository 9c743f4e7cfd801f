"""The Megatron-core backend's worker: real megatron-core training and checkpoints, one rank each.

    worker        torchrun entry point (`python -m ckpt_bench.backends.megatron.worker --spec S --phase save|load`)
    spec          the JSON spec and Megatron-LM argument defaults
    training      GPTModel, DDP, Megatron optimizer, mock data, forward/backward schedules
    formats       torch_dist and torch checkpoint layouts, as Megatron-LM writes them
    checkpointer  events, integrity manifests, async queue and log lines around saves and loads
    megatron_log  Megatron-LM's console line formats
    cpu_compat    the only place with CUDA workarounds (a no-op where CUDA exists)
"""
