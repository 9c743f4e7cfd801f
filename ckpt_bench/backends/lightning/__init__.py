"""The Lightning backend's worker side: a demo Transformer trained and checkpointed by Lightning.

The launcher side (option resolution, validation, the plan) is `ckpt_bench.backends.lightning.launcher`.
"""
