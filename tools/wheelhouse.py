"""`make wheelhouse`: a folder of wheels from which ckpt-bench installs into an image's Python with no network,
beside the torch that is there: our package and every dependency the target lacks, never torch.

    python tools/wheelhouse.py [--out wheelhouse] [--python-version 3.12] [--platform manylinux_2_35_x86_64]
                               [--torch 2.5.0a0+e000cf0ad9.nv24.10] [--image-packages image.txt]

The target (its Python and platform) may differ from this machine. What goes in is what pip would install on the
target: the dependencies are resolved as if the target's torch (`--torch`; default: the pin in constraints.txt)
were installed, each package of `--image-packages` too (the image's `python -m pip list --format=freeze`), so the
releases picked are those that fit them (megatron-core's newest asks for torch>=2.6.0: for an older torch an older
one is picked) and nothing the image has is carried. To do that, each of them is a stand-in wheel (metadata only,
no dependencies) pinned by a constraint, and removed from the folder afterwards.

Two resolutions: one for this machine, which may take source distributions (a pure-Python dependency released
only as one, such as antlr4-python3-runtime, is built into a wheel here), then the target's, wheels only. The
folder gets `install.py` (tools/install.py: the installer that keeps the image's GPU stack) and `wheelhouse.json`
(the target it was made for, which install.py checks). An existing folder is replaced only where it holds a
wheelhouse.json (one this tool made); nothing else is ever removed.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from install import WHEELHOUSE_FILE, manylinux_tag, normalize, pip_reason  # tools/install.py, beside this file

try:
    from packaging.requirements import Requirement
except ImportError:  # a Python without packaging: pip's own copy of it
    from pip._vendor.packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
MIN_MANYLINUX = 5  # manylinux_2_5, alias manylinux1: the oldest tag there is
LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


class WheelhouseError(Exception):
    """A reason the wheelhouse cannot be made: one line."""


def default_platform() -> str:
    """This machine's newest manylinux tag (its glibc's), e.g. manylinux_2_36_x86_64."""
    tag = manylinux_tag()
    if tag is None:
        raise WheelhouseError("this machine has no glibc: give --platform (e.g. manylinux_2_35_x86_64)")
    return tag


def platforms(tag: str) -> list[str]:
    """Every platform tag a target of manylinux tag `tag` runs (pip takes only the ones it is given): its glibc's
    and each older one, with their legacy aliases. Any other tag (macosx_..., linux_...) as it is."""
    match = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", tag)
    if not match:
        return [tag]
    newest, arch = int(match.group(1)), match.group(2)
    tags = []
    for minor in range(newest, MIN_MANYLINUX - 1, -1):
        tags.append(f"manylinux_2_{minor}_{arch}")
        if minor in LEGACY_MANYLINUX:
            tags.append(f"{LEGACY_MANYLINUX[minor]}_{arch}")
    return tags


def constraint_torch() -> str:
    """The torch of constraints.txt (the one `make install` puts in .venv/)."""
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        match = re.fullmatch(r"\s*torch\s*==\s*(\S+)\s*", line)
        if match:
            return match.group(1)
    raise WheelhouseError("constraints.txt pins no torch: give --torch VERSION")


def image_packages(path: Path | None, torch: str | None) -> dict[str, str]:
    """Normalized name -> version of what the target has: each `name==version` line of `path`, and its torch:
    `torch` where given, else the list's, else constraints.txt's."""
    packages = {}
    if path is not None:
        try:
            lines = path.read_text().splitlines()
        except OSError as error:
            raise WheelhouseError(f"--image-packages {path}: {error.strerror or error}") from None
        for line in lines:
            match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+?)\s*", line.split("#")[0])
            if match:
                packages[normalize(match.group(1))] = match.group(2)
        if not packages:
            raise WheelhouseError(f"--image-packages {path}: no name==version line (give the output of the image's "
                                  "python -m pip list --format=freeze)")
    packages.pop("ckpt-bench", None)
    if torch or "torch" not in packages:
        packages["torch"] = torch or constraint_torch()
    return packages


def stand_in(folder: Path, name: str, version: str) -> tuple[str, str]:
    """A wheel that only says `name` `version` is installed (no files, no dependencies); returns the version it
    carries (a local label of its own, `+image`, or `.image` after the version's own label: no real wheel, from the
    index or from a find-links folder in pip's configuration, carries it, so none is picked instead) and its file
    name."""
    carried = f"{version}.image" if "+" in version else f"{version}+image"
    stem = f"{re.sub(r'[-_.]+', '_', name)}-{carried}"
    wheel = folder / f"{stem}-py3-none-any.whl"
    info = f"{stem}.dist-info"
    files = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {carried}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: ckpt-bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
        archive.writestr(f"{info}/RECORD", "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n")
    return carried, wheel.name


def extras_asked(report: dict, image: dict[str, str]) -> dict[str, set[str]]:
    """The image's packages that our dependencies ask for with extras (lightning: `fsspec[http]`), and which: a
    stand-in has no extras, so what they bring (aiohttp, yarl, multidict) must be asked for by name."""
    asked: dict[str, set[str]] = {}
    for item in report["install"]:
        for text in item["metadata"].get("requires_dist") or []:
            requirement = Requirement(text)
            name = normalize(requirement.name)
            if requirement.extras and name in image and (
                    requirement.marker is None or requirement.marker.evaluate({"extra": ""})):
                asked.setdefault(name, set()).update(requirement.extras)
    return asked


def extra_requirements(work: Path, name: str, version: str, extras: set[str]) -> list[str]:
    """What `extras` of `name` `version` require, read from its own wheel's metadata (fetched, no dependencies)."""
    folder = work / f"metadata-{name}"
    checked(pip("download", "--no-deps", "--only-binary=:all:", "--quiet", "-d", str(folder), f"{name}=={version}"),
            f"reading what {name} {version}[{','.join(sorted(extras))}] requires (the image's {name} with the extras "
            "our dependencies ask for)")
    with zipfile.ZipFile(next(folder.glob("*.whl"))) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return required_by_extras(archive.read(metadata).decode(), extras)


def required_by_extras(metadata: str, extras: set[str]) -> list[str]:
    """The requirements a wheel's METADATA lists for `extras` alone (not those it always has), unconditioned."""
    wanted = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = Requirement(line.split(":", 1)[1].strip())
        marker = requirement.marker
        if marker is not None and not marker.evaluate({"extra": ""}) and any(
                marker.evaluate({"extra": extra}) for extra in extras):
            requirement.marker = None
            wanted.append(str(requirement))
    return wanted


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def checked(result: subprocess.CompletedProcess, what: str) -> str:
    """pip's output, or its reason for failing as one line (install.py's reading of it)."""
    if result.returncode != 0:
        raise WheelhouseError(f"{what}: {pip_reason(result.stdout)}")
    return result.stdout


def build(out: Path, python_version: str, platform_tag: str, torch: str | None, image: Path | None) -> dict:
    """Make the wheelhouse in a new folder beside `out`, then put it in place; returns what it was made for."""
    tags = platforms(platform_tag)
    packages = image_packages(image, torch)
    out = out.resolve()
    if out.exists() and not (out / WHEELHOUSE_FILE).is_file():
        raise WheelhouseError(f"{out} exists and is not a wheelhouse this tool made (no {WHEELHOUSE_FILE}): give "
                              "another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        stubs, wheels = work / "stand-ins", work / "wheels"
        stubs.mkdir()
        wheels.mkdir()
        stub_files, constraints = set(), []
        for name, version in packages.items():
            carried, filename = stand_in(stubs, name, version)
            stub_files.add(filename)
            constraints.append(f"{name}=={carried}")
        (work / "constraints.txt").write_text("\n".join(constraints) + "\n")
        present = ["--find-links", str(stubs), "-c", str(work / "constraints.txt")]
        checked(pip("wheel", "--no-deps", "--quiet", "-w", str(wheels), str(ROOT)), "building ckpt-bench's wheel")
        ours = next(wheels.glob("ckpt_bench-*.whl"))
        # This machine's resolution: which dependencies come only as source distributions.
        report = work / "report.json"
        checked(pip("install", "--dry-run", "--ignore-installed", "--report", str(report), *present,
                    str(ours)), "resolving the dependencies")
        for item in json.loads(report.read_text())["install"]:
            if item["download_info"]["url"].split("#")[0].endswith(".whl"):
                continue
            name, version = item["metadata"]["name"], item["metadata"]["version"]
            if normalize(name) == "ckpt-bench":
                continue
            checked(pip("wheel", "--no-deps", "--quiet", "-w", str(wheels), f"{name}=={version}"),
                    f"building {name} {version} (released as source only)")
            built = [w.name for w in wheels.glob(f"{re.sub(r'[-_.]+', '_', name)}-*.whl")]
            if not any(w.endswith("-none-any.whl") for w in built):
                raise WheelhouseError(f"{name} {version} is released as source only and is not pure Python: build its "
                                      f"wheel on a machine like the target and put it in {out}")
        # What the extras our dependencies ask of the image's packages bring (a stand-in has none).
        wanted = [requirement for name, extras in extras_asked(json.loads(report.read_text()), packages).items()
                  for requirement in extra_requirements(work, name, packages[name], extras)]
        # The target's resolution, wheels only.
        abi = "cp" + python_version.replace(".", "")
        target = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp", "--abi", abi,
                  *(arg for tag in tags for arg in ("--platform", tag))]
        checked(pip("download", "-d", str(wheels), *target, "--find-links", str(wheels), *present,
                    str(ours), *wanted), f"collecting the wheels for Python {python_version} on {platform_tag}")
        for filename in stub_files:
            (wheels / filename).unlink(missing_ok=True)
        if any(w.name.startswith("torch-") for w in wheels.iterdir()):
            raise WheelhouseError("a torch wheel was collected: the target's torch would be replaced")
        shutil.copy2(ROOT / "tools" / "install.py", wheels / "install.py")
        made = {"python": python_version, "platform": platform_tag, "platforms": tags, "torch": packages["torch"],
                "image_packages": len(packages) - (image is None), "ckpt_bench": ours.name.split("-")[1],
                "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "wheels": sorted(w.name for w in wheels.glob("*.whl"))}
        (wheels / WHEELHOUSE_FILE).write_text(json.dumps(made, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)  # a wheelhouse of ours (checked above)
        wheels.rename(out)
        return made
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "wheelhouse")
    parser.add_argument("--python-version", default=f"{sys.version_info[0]}.{sys.version_info[1]}",
                        help="the target's Python, e.g. 3.12 (default: this one's)")
    parser.add_argument("--platform", help="the target's newest manylinux tag, e.g. manylinux_2_35_x86_64 for Ubuntu "
                        "22.04, manylinux_2_39_aarch64 for Ubuntu 24.04 on Grace (default: this machine's)")
    parser.add_argument("--torch", help="the target's torch version, as pip reports it (default: the one in "
                        "--image-packages, else constraints.txt's)")
    parser.add_argument("--image-packages", type=Path, help="the target's `python -m pip list --format=freeze`")
    args = parser.parse_args(argv)
    try:
        if not re.fullmatch(r"3\.\d+", args.python_version):
            raise WheelhouseError(f"--python-version {args.python_version!r}: give MAJOR.MINOR, e.g. 3.12")
        made = build(args.out, args.python_version, args.platform or default_platform(), args.torch,
                     args.image_packages)
    except WheelhouseError as error:
        print(f"make wheelhouse: {error}", file=sys.stderr)
        sys.exit(2)
    size = sum(f.stat().st_size for f in args.out.iterdir()) / 2**20
    print(f"{args.out}: {len(made['wheels'])} wheels ({size:.0f} MiB) for Python {made['python']} on "
          f"{made['platform']} beside torch {made['torch']}; on the target: python {args.out.name}/install.py")


if __name__ == "__main__":
    main()
