"""Peak memory of a rank during each checkpoint operation: how close a save comes to an OOM.

A save can copy the whole state (an async save's staging, a serializer's buffers) on top of the
training state already in memory; users lose jobs to that. The kernel keeps the peak for us: Linux's
resident-set high-water mark (`VmHWM` in /proc/self/status), which writing `5` to
/proc/self/clear_refs resets to the current RSS. So `MemoryWatch` resets it when an operation starts
and reads it when the operation ends (an async save: when its write finished on its thread): the exact
peak of this process over that span, every thread included, with nothing running in between -- a
sampling thread would take the GIL from the save it measures. On CUDA the allocator's own peak
counter is reset and read the same way (`peak_device_bytes`).

Where the high-water mark cannot be reset (not Linux), the peak is None and the report says so.
"""

from __future__ import annotations

import re
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_HWM = re.compile(r"^VmHWM:\s+(\d+)\s+kB", re.MULTILINE)


def _high_water_mark() -> int | None:
    try:
        match = _HWM.search(_STATUS.read_text())
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


def _reset_high_water_mark() -> bool:
    try:
        _CLEAR_REFS.write_text("5")  # "5": reset the peak RSS to the current RSS (Linux >= 4.0)
    except OSError:
        return False
    return True


class MemoryWatch:
    """Peak RSS (and CUDA allocator peak) of this process per open operation, keyed by (op, iteration)."""

    def __init__(self, device=None):
        self._device = device if device is not None and getattr(device, "type", None) == "cuda" else None
        self._peaks: dict[tuple, int] = {}  # open operation -> its peak before the last reset
        self._kernel_peak = _reset_high_water_mark() and _high_water_mark() is not None

    def begin(self, key: tuple) -> None:
        """An operation starts: the high-water marks start again from now. Operations still open keep
        the peak they reached so far."""
        if self._kernel_peak:
            before = _high_water_mark() or 0
            # An earlier operation of the same kind whose end this process never saw (megatron-core's
            # async writer records it in its own process) is over by now.
            self._peaks = {k: max(v, before) for k, v in self._peaks.items() if k[0] != key[0]}
            self._peaks[key] = 0
            _reset_high_water_mark()
        if self._device is not None:
            import torch

            torch.cuda.reset_peak_memory_stats(self._device)

    def peak(self, key: tuple, finished: bool) -> dict:
        """The fields of `key`'s end event: its peaks so far; `finished` closes the operation."""
        fields = {}
        if self._kernel_peak and key in self._peaks:
            earlier = self._peaks.pop(key) if finished else self._peaks[key]
            fields["peak_rss_bytes"] = max(earlier, _high_water_mark() or 0)
        if self._device is not None:
            import torch

            fields["peak_device_bytes"] = int(torch.cuda.max_memory_allocated(self._device))
        return fields
