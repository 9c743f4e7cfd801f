"""ckpt-bench: checkpoint save/load benchmarks for Megatron-LM, Primus, PyTorch DCP and Lightning."""

__version__ = "0.1.0"
