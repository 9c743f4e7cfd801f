"""What the launcher tells of the host's accelerators without importing torch."""

import pytest

from ckpt_bench.core.environment import _built_for_a_gpu, describe_environment


@pytest.mark.parametrize("text,gpu", [
    ("cuda: Optional[str] = None\nhip: Optional[str] = None\n", False),
    ("cuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n", True),
    ("cuda = None\nhip = '6.4.43482'\n", True),
    ("__version__ = '2.13.0'\n", True),  # says neither: torch is asked
    ("cuda = (\n", True),  # unreadable: torch is asked
])
def test_a_build_for_neither_cuda_nor_rocm_sees_no_gpu(tmp_path, text, gpu):
    version = tmp_path / "version.py"
    version.write_text(text)
    assert _built_for_a_gpu(version) is gpu


def test_the_environment_agrees_with_torch():
    import torch

    env = describe_environment()
    assert env["cuda_available"] is torch.cuda.is_available()
    assert env["gpu"] == (torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
