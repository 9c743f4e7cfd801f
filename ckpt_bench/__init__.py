"""ckpt-bench: checkpoint save/load benchmarks for Megatron-LM, Primus, PyTorch DCP and Lightning."""

import warnings

from ckpt_bench.core import deferred_compile

# nvidia-resiliency-ext requires the `pynvml` shim, which warns on the `import pynvml` inside every torch import
# (the launcher's and each rank's): a line about a package the user did not choose, before every run.
warnings.filterwarnings("ignore", message="The pynvml package is deprecated", category=FutureWarning)

# Megatron's torch.compile'd functions built at their first call: torch.compile's wrappers, built as its modules
# are imported, cost each rank 1.4 s of start-up for functions a checkpoint's path never calls
# (core/deferred_compile.py).
deferred_compile.install()

__version__ = "0.1.0"
