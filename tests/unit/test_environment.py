"""What a report says the run ran on: the host's accelerators as torch sees them, and the software stack as the
ranks load it (torch and its CUDA/ROCm, Transformer Engine, Apex, megatron-core), null where absent."""

import sys
from importlib import metadata

from ckpt_bench.core.environment import describe_environment, megatron_core_version


def test_the_environment_agrees_with_torch():
    import torch

    env = describe_environment()
    assert env["cuda_available"] is torch.cuda.is_available()
    assert env["gpu"] == (torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
    assert env["torch"] == torch.__version__
    assert env["cuda"] == torch.version.cuda and env["rocm"] == torch.version.hip
    assert env["transformer-engine"] is None and env["apex"] is None  # neither is installed here


def test_megatron_core_is_the_one_import_finds(tmp_path, monkeypatch):
    assert describe_environment()["megatron-core"] == metadata.version("megatron-core")
    # A checkout first on the path (as images that carry Megatron-LM put it) wins over the installed wheel.
    package = tmp_path / "megatron" / "core"
    package.mkdir(parents=True)
    (package / "__init__.py").touch()
    (package / "package_info.py").write_text("MAJOR = 0\nMINOR = 14\nPATCH = 0\nPRE_RELEASE = 'rc7'\n")
    for name in [name for name in sys.modules if name == "megatron" or name.startswith("megatron.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert megatron_core_version() == "0.14.0rc7"
