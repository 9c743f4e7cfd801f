"""One package per backend, its launcher side (options and plan, no torch import) beside its worker
side (the ranks): `megatron`, `dcp`, `lightning`, `comms`, and the framework modes (`frameworks`: real
Primus and Megatron-LM). `ckpt_bench.benchmark.registry` lists them.
"""
