"""Peak memory of a rank during each checkpoint operation: how close a save comes to an OOM.

A save can copy the whole state (an async save's staging, a serializer's buffers) on top of the
training state already in memory; users lose jobs to that. `MemoryWatch` samples this process's
resident set size on a daemon thread while an operation is open -- from its start event to its end
event (an async save: until the write finished on its thread) -- and the recorder writes the peak into
the operation's end events (`peak_rss_bytes`; on CUDA also `peak_device_bytes`, from the allocator's
own peak counter, reset at the start).

Sampling every `INTERVAL_S`, only while an operation is open, costs one /proc read per sample on a
thread that holds the GIL for a few microseconds; a spike shorter than the interval can be missed, so
the figure is a lower bound on the true peak (the report says so).
"""

from __future__ import annotations

import threading

import psutil

INTERVAL_S = 0.01


class MemoryWatch:
    """Peak RSS (and CUDA allocator peak) of this process per open operation, keyed by (op, iteration)."""

    def __init__(self, device=None, interval_s: float = INTERVAL_S):
        self._process = psutil.Process()
        self._device = device if device is not None and getattr(device, "type", None) == "cuda" else None
        self._interval_s = interval_s
        self._peaks: dict[tuple, int] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self, key: tuple) -> None:
        """An operation starts: its peak starts at the RSS now."""
        rss = self._process.memory_info().rss
        with self._lock:
            # An earlier operation of the same kind whose end this process never saw (megatron-core's
            # async writer records it in its own process) is over by now.
            for stale in [k for k in self._peaks if k[0] == key[0]]:
                del self._peaks[stale]
            self._peaks[key] = rss
        if self._device is not None:
            import torch

            torch.cuda.reset_peak_memory_stats(self._device)
        if self._thread is None:
            self._thread = threading.Thread(target=self._sample, name="ckpt-bench-memory", daemon=True)
            self._thread.start()
        self._wake.set()

    def peak(self, key: tuple, finished: bool) -> dict:
        """The fields for `key`'s end event: its peaks so far; `finished` closes the operation."""
        rss = self._process.memory_info().rss
        with self._lock:
            peak = max(self._peaks.get(key, rss), rss)
            if finished:
                self._peaks.pop(key, None)
            elif key in self._peaks:
                self._peaks[key] = peak
        fields = {"peak_rss_bytes": peak}
        if self._device is not None:
            import torch

            fields["peak_device_bytes"] = int(torch.cuda.max_memory_allocated(self._device))
        return fields

    def _sample(self) -> None:
        while True:
            with self._lock:
                open_keys = list(self._peaks)
            if open_keys:
                rss = self._process.memory_info().rss
                with self._lock:
                    for key in open_keys:
                        if key in self._peaks and rss > self._peaks[key]:
                            self._peaks[key] = rss
            self._wake.wait(self._interval_s if open_keys else None)
            self._wake.clear()
