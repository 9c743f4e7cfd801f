"""The install into an image's Python, its cheap parts (tools/offline_install_check.sh runs the whole of it: a fresh
torch-only environment, `make wheelhouse`, the install and three runs with no network): no torch version in our
requirements, the GPU stack tools/install.py pins, the wheelhouse's target platforms and the stand-ins that make
its resolution keep the image's packages."""

import importlib
import sys
import zipfile
from importlib import metadata

import pytest
from helpers import ROOT
from packaging.requirements import Requirement
from packaging.version import Version

sys.path.insert(0, str(ROOT / "tools"))  # as the tools run: wheelhouse.py imports install.py beside it
install, wheelhouse = importlib.import_module("install"), importlib.import_module("wheelhouse")
# Torch builds as images carry them: NGC 24.07 and 24.10, ROCm wheels, NGC 25.06.
IMAGE_TORCHES = ("2.4.0a0+3bcc3cddb5.nv24.07", "2.5.0a0+e000cf0ad9.nv24.10", "2.4.0+rocm6.1", "2.5.0+rocm6.2",
                 "2.8.0a0+5228986c39.nv25.06")


@pytest.mark.parametrize("build", IMAGE_TORCHES)
def test_every_image_torch_satisfies_our_own_requirements(build):
    """pip keeps an installed torch a requirement accepts (pre-releases included, as pip judges what is installed);
    one it does not accept, it replaces."""
    torch = [Requirement(line) for line in metadata.requires("ckpt-bench") if Requirement(line).name == "torch"]
    assert torch and all(r.specifier.contains(Version(build), prereleases=True) for r in torch)


def test_what_our_dependencies_ask_of_torch_is_why_the_install_pins_it():
    """megatron-core's newest release asks for a newer torch than NGC 24.10's or ROCm 6.1's: a plain `pip install`
    would replace theirs (seen: torch 2.14.1 picked), which is what tools/install.py's pins and a wheelhouse
    resolved against the image's torch prevent (megatron-core 0.15.2 picked for them)."""
    asks = [Requirement(r) for r in metadata.requires("megatron-core") or () if Requirement(r).name == "torch"]
    excluded = [build for build in IMAGE_TORCHES for r in asks if r.marker is None
                and not r.specifier.contains(Version(build), prereleases=True)]
    if metadata.version("megatron-core") == "0.16.1":
        assert excluded == list(IMAGE_TORCHES[:4])
    installed = {"torch": "2.5.0a0+e000cf0ad9.nv24.10", "transformer-engine": "1.12.0+7f2afaa", "apex": "0.1",
                 "megatron-core": "0.9.0rc0", "numpy": "1.26.4", "nvidia-cublas-cu12": "12.6.3.3",
                 "pytorch-triton-rocm": "3.0.0", "rich": "13.9.4", "click": "8.1.7"}
    assert install.pins(installed) == sorted(f"{name}=={version}" for name, version in installed.items()
                                             if name not in ("rich", "click"))
    assert install.normalize("Transformer_Engine") == "transformer-engine"


def test_pips_own_reason_is_the_line_the_install_prints():
    output = ("Looking in links: /w\nERROR: Ignored the following yanked versions: 2.4.0\nERROR: Could not find a "
              "version that satisfies the requirement torch>=2.6.0 (from versions: none)\nERROR: No matching "
              "distribution found for torch>=2.6.0")
    assert install.pip_reason(output) == "No matching distribution found for torch>=2.6.0"
    conflict = ("ERROR: Cannot install ckpt-bench==0.1.0 because these package versions have conflicting dependencies."
                "\n\nThe conflict is caused by:\n    ckpt-bench 0.1.0 depends on megatron-core>=0.12\n    The user "
                "requested (constraint) megatron-core==0.10.0\n\nAdditionally, some packages in these conflicts have "
                "no matching distributions available for your environment:\n    megatron-core\n")
    assert install.pip_reason(conflict) == ("conflicting requirements: ckpt-bench 0.1.0 depends on megatron-core"
                                            ">=0.12; The user requested (constraint) megatron-core==0.10.0")


def test_a_target_platform_takes_every_older_manylinux_tag():
    tags = wheelhouse.platforms("manylinux_2_28_aarch64")
    assert tags[0] == "manylinux_2_28_aarch64" and tags[-2:] == ["manylinux_2_5_aarch64", "manylinux1_aarch64"]
    assert "manylinux2014_aarch64" in tags and "manylinux_2_17_aarch64" in tags and len(tags) == 24 + 3
    assert wheelhouse.platforms("macosx_14_0_arm64") == ["macosx_14_0_arm64"]


def test_the_images_packages_become_stand_ins_pinned_where_the_index_has_no_such_release(tmp_path):
    listed = tmp_path / "image.txt"
    listed.write_text("torch==2.5.0a0+e000cf0ad9.nv24.10\nTransformer_Engine==1.12.0\nckpt-bench==0.1.0\n"
                      "megatron-core @ file:///opt/megatron\n# a comment\nnumpy==1.26.4  \n")
    packages = wheelhouse.image_packages(listed, None)
    assert packages == {"torch": "2.5.0a0+e000cf0ad9.nv24.10", "transformer-engine": "1.12.0", "numpy": "1.26.4"}
    carried, name = wheelhouse.stand_in(tmp_path, "transformer-engine", "1.12.0")
    assert carried == "1.12.0+image" and name == "transformer_engine-1.12.0+image-py3-none-any.whl"
    # a version with a label of its own gets ours after it: a real torch wheel of that very version (a find-links
    # folder in pip's configuration holds one here) is never picked in place of the stand-in
    assert wheelhouse.stand_in(tmp_path, "torch", packages["torch"])[0] == "2.5.0a0+e000cf0ad9.nv24.10.image"
    with zipfile.ZipFile(tmp_path / name) as archive:
        metadata_text = archive.read("transformer_engine-1.12.0+image.dist-info/METADATA").decode()
    assert "Version: 1.12.0+image" in metadata_text and "Requires-Dist" not in metadata_text
    empty = tmp_path / "empty.txt"
    empty.write_text("megatron-core @ file:///x\n")
    with pytest.raises(wheelhouse.WheelhouseError, match="no name==version line"):
        wheelhouse.image_packages(empty, None)
    assert wheelhouse.image_packages(None, None) == {"torch": wheelhouse.constraint_torch()}
    assert wheelhouse.image_packages(listed, "2.6.0")["torch"] == "2.6.0"  # given: it wins


def test_the_extras_our_dependencies_ask_of_an_image_package_are_collected_by_name():
    """A stand-in has no extras: lightning's `fsspec[http]` on an image that has fsspec must still bring aiohttp
    (seen: the offline install failed with no aiohttp where the image list held fsspec)."""
    report = {"install": [
        {"metadata": {"name": "lightning", "requires_dist": ["fsspec[http]>=2022.5.0", "torch>=2.1.0",
                                                            "pytest; extra == 'test'"]}},
        {"metadata": {"name": "ckpt-bench", "requires_dist": ["numpy[extra-never] ; extra == 'dev'"]}}]}
    assert wheelhouse.extras_asked(report, {"fsspec": "2024.6.1", "torch": "2.5.0", "numpy": "1.26.4"}) == {
        "fsspec": {"http"}}
    metadata = ("Metadata-Version: 2.1\nName: fsspec\nVersion: 2024.6.1\nProvides-Extra: http\n"
                "Requires-Dist: aiohttp!=4.0.0a0,!=4.0.0a1; extra == \"http\"\n"
                "Requires-Dist: requests; extra == \"full\"\nRequires-Dist: importlib-metadata\n")
    assert wheelhouse.required_by_extras(metadata, {"http"}) == ["aiohttp!=4.0.0a0,!=4.0.0a1"]
