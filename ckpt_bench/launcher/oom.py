"""Why a rank died of SIGKILL, as far as this host can tell.

Nothing of ours sends a rank SIGKILL while a pass runs (an interrupted run is reported as interrupted),
so a rank whose first failure is SIGKILL was most likely killed by the kernel's OOM killer. The kernel
counts its kills in /proc/vmstat (`oom_kill`, readable without root): a count that rose during the pass
says it was. Where the counter cannot be read the report says "likely", never more.
"""

from __future__ import annotations

from pathlib import Path

VMSTAT = Path("/proc/vmstat")


def oom_kills() -> int | None:
    """The kernel's count of OOM kills since boot, or None where it cannot be read."""
    try:
        for line in VMSTAT.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def sigkill_cause(before: int | None, after: int | None) -> str:
    """What a rank that died of SIGKILL, unasked, was killed by, given the OOM counts around its pass."""
    if before is not None and after is not None and after > before:
        return f"killed by the kernel's OOM killer (its oom_kill count rose by {after - before} during the pass)"
    if before is not None and after is not None:
        return "killed by SIGKILL from outside the run (not the kernel's OOM killer: its oom_kill count did not move)"
    return ("killed by SIGKILL, likely the kernel's OOM killer (nothing of ours sends it; the kernel's counters "
            "cannot be read here to confirm)")
