"""Ctrl-C and SIGTERM during a run: stop every process of the run, then report what happened.

torchrun runs in a session of its own (`ckpt_bench.launcher.torchrun`), and it starts each rank in yet
another one, so a terminal's Ctrl-C reaches the launcher alone, and the launcher decides:

    first signal   SIGTERM to torchrun, which passes it to the ranks (they may close files, a writer
                   may finish); after `GRACE_S` every process started under the launcher that is still
                   alive (ranks, async checkpoint writers) is killed
    second signal  kill them all now

The lifecycle then stops after the pass in flight, writes the report (`run.status: interrupted`, the
save or load in flight incomplete), applies the usual rule to the checkpoint folder, and exits with
128 + the signal's number (130 for SIGINT, 143 for SIGTERM).

Which processes are ours: the launcher's descendants, looked up with psutil when the signal arrives
and again before each kill (a rank whose torchrun has exited is no longer below the launcher, so it
is remembered from the first look).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import psutil

GRACE_S = 10.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """A context manager that owns SIGINT/SIGTERM while a run's passes execute."""

    def __init__(self, grace: float = GRACE_S):
        self.grace = grace
        self.signal: signal.Signals | None = None
        self._process: subprocess.Popen | None = None
        self._known: dict[int, psutil.Process] = {}
        self._timer: threading.Timer | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():  # only the main thread may set handlers
            for number in SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signal)

    def watch(self, process: subprocess.Popen) -> None:
        """The pass's process tree root (torchrun or a framework's launcher), once started."""
        self._process = process
        if self.signal is not None:  # the signal came between two passes: this one stops at once
            self._terminate()

    def _handle(self, number: int, _frame) -> None:
        if self.signal is not None:
            print(f"{signal.Signals(number).name} again: killing every process of the run now",
                  file=sys.stderr, flush=True)
            self.kill_all()
            return
        self.signal = signal.Signals(number)
        print(f"{self.signal.name}: stopping the ranks (killed after {self.grace:.0f} s; "
              f"{'press Ctrl-C' if number == signal.SIGINT else 'send it'} again to kill them now)",
              file=sys.stderr, flush=True)
        self._terminate()

    def _terminate(self) -> None:
        self._remember()
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)  # torchrun passes it on to every rank
        self._timer = threading.Timer(self.grace, self.kill_all)
        self._timer.daemon = True
        self._timer.start()

    def _remember(self) -> None:
        try:
            for child in psutil.Process().children(recursive=True):
                self._known.setdefault(child.pid, child)
        except psutil.Error:
            pass

    def kill_all(self) -> None:
        """SIGKILL every process of the run still alive (psutil checks each is still the one we saw)."""
        self._remember()
        alive = []
        for process in list(self._known.values()):
            try:
                process.kill()
                alive.append(process)
            except psutil.Error:
                pass  # already gone
        psutil.wait_procs(alive, timeout=5)

    def reap(self) -> None:
        """After an interrupted pass: nothing of the run may survive it."""
        if self._timer is not None:
            self._timer.cancel()
        self.kill_all()
