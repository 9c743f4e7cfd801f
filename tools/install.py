"""Install ckpt-bench into the Python that runs this script, keeping the GPU stack it already has: its torch (and
torchvision, torchaudio, triton), Transformer Engine, Apex, flash-attn, megatron-core, numpy and the CUDA
libraries pip installed for torch stay exactly as they are. pip may add packages, never replace those.

    python tools/install.py                # from this checkout, with the package index
    python WHEELHOUSE/install.py           # from a wheelhouse (`make wheelhouse`), offline (--no-index)
    python - --describe < tools/install.py # what `make wheelhouse` needs to know of this Python (run it in the image)
    python tools/install.py --pins         # the pins only, for pip itself:
                                           #   python -m pip install . -c <(python tools/install.py --pins)

Why the pins: pip replaces an installed torch whenever a requirement asks for a newer one, and megatron-core's
newest releases do (0.16.1 asks for torch>=2.6.0; s3torchconnector 1.5.0 excludes 2.5.0, local builds such as
2.5.0+rocm6.2 included). Pinned, pip picks the releases that fit the torch that is there, or fails.

Prints one line: what was installed beside what, or why it cannot be (pip's whole output in a log file named on
that line), and exits non-zero then. Needs only the standard library and pip; runs on Python 3.8 and later, so
that an image's Python too old for ckpt-bench is told so in one line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
WHEELHOUSE_FILE = "wheelhouse.json"  # written by tools/wheelhouse.py: the target it was built for
REQUIRES_PYTHON = (3, 10)
# What an image's GPU stack is made of: kept at its installed version (normalized names, as PEP 503).
KEPT = re.compile(r"(torch|torchvision|torchaudio|triton|pytorch-triton(-rocm)?|transformer-engine(-.+)?|apex"
                  r"|flash-attn|megatron-core|numpy|nvidia-.+|cuda-.+)")
# What the summary names, where present.
NAMED = (("torch", "torch"), ("transformer-engine", "Transformer Engine"), ("apex", "Apex"),
         ("megatron-core", "megatron-core"))


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, str]:
    """Normalized name -> version of every distribution this Python sees."""
    return {normalize(dist.metadata["Name"]): dist.version for dist in metadata.distributions()
            if dist.metadata["Name"]}


def pins(packages: dict[str, str]) -> list[str]:
    """`name==version` for each installed package of the GPU stack."""
    return sorted(f"{name}=={version}" for name, version in packages.items() if KEPT.fullmatch(name))


def stack(packages: dict[str, str]) -> str:
    parts = [f"{label} {packages[name]}" for name, label in NAMED if name in packages]
    return ", ".join(parts) if parts else "no torch"


def manylinux_tag() -> str | None:
    """This machine's newest manylinux tag (its glibc's), e.g. manylinux_2_36_x86_64; None without glibc."""
    libc, version = platform.libc_ver()
    if libc != "glibc" or not version:
        return None
    major, minor = version.split(".")[:2]
    return f"manylinux_{major}_{minor}_{platform.machine()}"


def describe(packages: dict[str, str]) -> str:
    """`make wheelhouse`'s variables for a target like this Python: its version, its newest manylinux tag (its
    glibc's), its torch as pip sees it."""
    return (f"PYTHON_VERSION={sys.version_info[0]}.{sys.version_info[1]} PLATFORM={manylinux_tag() or '?'} "
            f"TORCH_VERSION={packages.get('torch', '?')}")


def fail(message: str) -> None:
    print(f"ckpt-bench install: {message}", file=sys.stderr)
    sys.exit(1)


def pip(args: list[str], log) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", *args]
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write(result.stdout)
    log.flush()
    return result


def pip_reason(output: str) -> str:
    """pip's own words for why it stopped: the requirements in conflict where it names them, else its first ERROR
    line (the missing distribution)."""
    lines = output.splitlines()
    if "The conflict is caused by:" in lines:
        block = lines[lines.index("The conflict is caused by:") + 1:]
        causes = [line.strip() for line in block[:next((i for i, x in enumerate(block) if not x.startswith(" ")),
                                                       len(block))]]
        if causes:
            return "conflicting requirements: " + "; ".join(causes)
    errors = [line[len("ERROR: "):].strip() for line in output.splitlines() if line.startswith("ERROR: ")]
    useful = [e for e in errors if not e.startswith(("Ignored the following", "Could not find a version"))]
    return (useful or errors or [output.strip().splitlines()[-1] if output.strip() else "no output"])[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheelhouse", type=Path, help="install from this wheelhouse, offline (default: the "
                        "folder of this script, when it is a wheelhouse)")
    parser.add_argument("--pins", action="store_true", help="print the pins of the GPU stack and install nothing")
    parser.add_argument("--describe", action="store_true", help="print make wheelhouse's variables for this Python "
                        "and install nothing")
    args = parser.parse_args(argv)
    before = installed()
    if args.pins:
        print("\n".join(pins(before)))
        return
    if args.describe:
        print(describe(before))
        return
    python = f"{sys.executable} (Python {sys.version.split()[0]})"
    if sys.version_info[:2] < REQUIRES_PYTHON:
        fail(f"{python} is older than ckpt-bench needs (Python {'.'.join(map(str, REQUIRES_PYTHON))} or later)")
    wheelhouse = args.wheelhouse or (HERE if (HERE / WHEELHOUSE_FILE).is_file() else None)
    if wheelhouse is not None:
        wheelhouse = wheelhouse.resolve()
        try:
            target = json.loads((wheelhouse / WHEELHOUSE_FILE).read_text())
        except (OSError, ValueError) as error:
            fail(f"{wheelhouse} is not a wheelhouse of `make wheelhouse` ({error}); build one there")
        running = f"{sys.version_info[0]}.{sys.version_info[1]}"
        if target["python"] != running:
            fail(f"the wheelhouse {wheelhouse} is for Python {target['python']} and {python} is {running}: build one "
                 f"for it with make wheelhouse PYTHON_VERSION={running}")
        source = ["--no-index", "--find-links", str(wheelhouse), "ckpt-bench"]
    else:
        source = [str(HERE.parent)]
    kept = pins(before)
    with tempfile.NamedTemporaryFile("w", prefix="ckpt-bench-pins-", suffix=".txt", delete=False) as pin_file:
        pin_file.write("".join(f"{pin}\n" for pin in kept))
    log_path = Path(tempfile.gettempdir()) / f"ckpt-bench-install-{os.getpid()}.log"
    with open(log_path, "w") as log:
        result = pip(["-c", pin_file.name, *source], log)
        if result.returncode == 0 and "ckpt-bench" in before:  # pip kept an older build of the same version
            result = pip(["--no-deps", "--force-reinstall", *source], log)
    os.unlink(pin_file.name)
    after = installed()
    if result.returncode != 0:
        hint = f" (the wheelhouse was built for torch {target.get('torch')})" if wheelhouse else ""
        reason = pip_reason(result.stdout)
        fail(f"cannot install into {python} beside {stack(before)} without changing it{hint}: {reason}; build a "
             f"wheelhouse for this environment (docs/clusters.md#a-wheelhouse-for-an-image); pip's output: {log_path}")
    changed = [f"{name} {before[name]} -> {after.get(name)}" for name in before
               if KEPT.fullmatch(name) and after.get(name) != before[name]]
    if changed:  # pip was told not to: a pin it did not honour is worth stopping for
        fail(f"pip changed {', '.join(changed)} in {python}; pip's output: {log_path}")
    check = subprocess.run([sys.executable, "-c", "import ckpt_bench.cli.launch, ckpt_bench.cli.report"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check.returncode != 0:
        last = check.stdout.strip().splitlines()[-1] if check.stdout.strip() else "no output"
        fail(f"installed into {python}, but ckpt-bench does not import there: {last}")
    log_path.unlink()
    added = sorted(set(after) - set(before))
    # The image's own stack, kept, apart from what the install added to it (megatron-core where the image had none).
    brought = {name: version for name, version in after.items() if name in added}
    named = stack(brought)
    print(f"ckpt-bench {after.get('ckpt-bench')} installed into {python} beside its {stack(before)} "
          f"({len(kept)} package{'s' if len(kept) != 1 else ''} of its GPU stack kept, {len(added)} added"
          f"{'' if named == 'no torch' else ', ' + named + ' among them'}"
          f"{', offline from ' + str(wheelhouse) if wheelhouse else ''}); run: {sys.executable} -m ckpt_bench --help")


if __name__ == "__main__":
    main()
