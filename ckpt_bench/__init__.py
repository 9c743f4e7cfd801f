"""ckpt-bench: checkpoint save/load benchmarks for Megatron-LM, Primus, PyTorch DCP and Lightning."""

import warnings

# nvidia-resiliency-ext requires the `pynvml` shim, which warns on the `import pynvml` inside every torch import
# (the launcher's and each rank's): a line about a package the user did not choose, before every run.
warnings.filterwarnings("ignore", message="The pynvml package is deprecated", category=FutureWarning)

__version__ = "0.1.0"
