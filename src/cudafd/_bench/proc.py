"""Process facts read from /proc: resident memory and thread count; a CPU meter."""

from __future__ import annotations

import os
import time

__all__ = ["CpuMeter", "os_threads", "rss_bytes"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """Resident set size of this process (/proc/self/statm, field 2), in bytes; 0 if unreadable."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def os_threads() -> int:
    """Threads of this process now (/proc/self/status), all of them: Python's, the driver's, cudafd's."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class CpuMeter:
    """Process CPU time (every thread: time.process_time) against wall time, between start() and stop()."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0
        self._w0 = self._c0 = 0.0

    def start(self) -> CpuMeter:
        self._w0, self._c0 = time.perf_counter(), time.process_time()
        return self

    def stop(self) -> CpuMeter:
        self.wall = time.perf_counter() - self._w0
        self.cpu = time.process_time() - self._c0
        return self

    @property
    def cores(self) -> float:
        """CPU seconds per wall second: 1.0 is one core busy all the time."""
        return self.cpu / self.wall if self.wall > 0 else 0.0
