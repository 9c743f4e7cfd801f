"""Nothing of a pass outlives the launcher, even a launcher killed with SIGKILL.

A process killed with SIGKILL cannot clean up, and torchrun starts every rank in a session of its own
(and a rank's async writer may start more), so neither the launcher nor a process group can stop them.
The kernel can. Every pass runs under this small guard, started by the launcher:

    python -I .../ckpt_bench/launcher/guard.py <launcher pid> -- <torchrun command...>

* It is a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`): a process of the pass whose parent exits
  (a rank whose torchrun died, a writer whose rank died) is re-parented to the guard, not to init, so
  every process of the pass stays below it.
* It watches the launcher through a pidfd: when the launcher dies, however it died, the guard kills
  every process below it and exits (`stop_all`). What the launcher cannot do after SIGKILL is not needed.
* When the pass's command exits, whatever it left running (an orphaned writer) is killed too, and the
  guard exits as the command did (the same code, or the same signal).
* SIGTERM and SIGINT from the launcher (`ckpt_bench.launcher.interrupts`) are passed on to the command,
  which stops its ranks in order.

The guard imports nothing of torch (it starts in a tenth of a second) and is Linux-only, as torchrun's
process handling is.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys

import psutil

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
FORWARDED = (signal.SIGTERM, signal.SIGINT)


def guarded(command: list[str]) -> list[str]:
    """`command` run under the guard of this process (the launcher). The guard runs as a file, isolated
    (`-I`), so it starts wherever the pass runs (a framework's folder) whether ckpt-bench is installed or not."""
    return [sys.executable, "-I", __file__, str(os.getpid()), "--", *command]


def _become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def stop_all() -> None:
    """SIGKILL every process below the guard until none is left, reaping each (a process that forks while
    its siblings are killed is found on the next look)."""
    me = psutil.Process()
    while True:
        below = me.children(recursive=True)
        if not below:
            return
        for process in below:
            try:
                process.kill()
            except psutil.Error:
                pass  # already gone
        psutil.wait_procs(below, timeout=2)
        _reap()


def _reap() -> None:
    """Collect the exit status of re-parented orphans that ended (they are the guard's children now)."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _exit_as(returncode: int) -> None:
    """End the guard the way the command ended: its exit code, or the signal that killed it."""
    if returncode < 0:
        signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
    sys.exit(returncode)


def main(argv: list[str]) -> None:
    launcher_pid, separator, *command = argv
    if separator != "--" or not command:
        sys.exit("usage: python -I guard.py LAUNCHER_PID -- COMMAND...")
    _become_subreaper()
    try:
        launcher = os.pidfd_open(int(launcher_pid))
    except ProcessLookupError:
        sys.exit(1)  # the launcher is already gone: start nothing
    if os.getppid() != int(launcher_pid):  # it died between our start and the pidfd (we were re-parented)
        sys.exit(1)
    process = subprocess.Popen(command)
    for number in FORWARDED:
        signal.signal(number, lambda received, _frame: process.send_signal(received))
    pass_ended = os.pidfd_open(process.pid)
    ready, _, _ = select.select([pass_ended, launcher], [], [])  # retried across forwarded signals (PEP 475)
    if launcher in ready:
        stop_all()
        sys.exit(1)
    returncode = process.wait()
    stop_all()
    _exit_as(returncode)


if __name__ == "__main__":
    main(sys.argv[1:])
