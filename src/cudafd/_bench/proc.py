"""Process facts read from /proc: resident memory and thread count; a CPU meter that also
says which threads spent it, and the longest pause of Python's garbage collector meanwhile."""

from __future__ import annotations

import gc
import os
import threading
import time

__all__ = ["CpuMeter", "os_threads", "rss_bytes", "thread_cpu"]

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


_names: dict[int, str] = {}  # thread id -> its name (/proc comm), read once


def thread_cpu() -> dict[str, float]:
    """CPU seconds so far of this process's live threads by who they are: ``loop`` (the
    calling thread), ``cudafd`` (the native core's threads, named ``cudafd-*``; not the
    simulator's ``cudafd-sim*``, which stand in for the GPU) and ``other``; {} where /proc
    cannot be read. A thread's CPU clock is Linux's clock id ``(~tid << 3) | 6`` (the
    scheduler's clock of that thread: one ``clock_gettime`` per thread)."""
    me = threading.get_native_id()
    out = {"loop": 0.0, "cudafd": 0.0, "other": 0.0}
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return {}
    for tid in tids:
        name = _names.get(tid)
        try:
            if name is None:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    name = _names[tid] = f.read().strip()
            s = time.clock_gettime((~tid << 3) | 6)
        except OSError:  # the thread ended meanwhile
            continue
        ours = name.startswith("cudafd-") and not name.startswith("cudafd-sim")  # the simulator's are the "GPU"
        out["loop" if tid == me else "cudafd" if ours else "other"] += s
    return out


_running: set[CpuMeter] = set()  # meters between start() and stop(): _on_gc updates them
_gc_began = [0.0]


def _on_gc(phase: str, info: dict) -> None:
    """gc.callbacks, while a meter runs: a collection stops every Python thread, the loop's too."""
    if phase == "start":
        _gc_began[0] = time.perf_counter()
        return
    pause = time.perf_counter() - _gc_began[0]
    for m in tuple(_running):
        m.gc_max = max(m.gc_max, pause)


class CpuMeter:
    """Process CPU time (every thread: time.process_time) against wall time, between start() and stop(),
    and (``split``) how much of it the loop's thread (the caller) and cudafd's native threads spent:
    the caller's own clock (time.thread_time) read just inside the process's window, cudafd's
    threads' clocks (:func:`thread_cpu`) just outside it, so that reading them counts neither in
    ``cpu`` nor in the loop's share (it costs the reading thread, not the threads read). ``gc_max``:
    the longest collection of Python's garbage collector in the window, seconds. ``with CpuMeter() as m``
    stops it however the block ends, letting go of the gc callback it registered."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0
        self.gc_max = 0.0
        self.split: dict[str, float] = {}
        self._w0 = self._c0 = self._l0 = 0.0
        self._t0: dict[str, float] = {}

    def start(self) -> CpuMeter:
        self._t0 = thread_cpu()
        if not _running:
            gc.callbacks.append(_on_gc)
        _running.add(self)
        self._w0, self._c0 = time.perf_counter(), time.process_time()
        self._l0 = time.thread_time()  # the caller's window within the process's
        return self

    def stop(self) -> CpuMeter:
        loop = time.thread_time() - self._l0
        self.wall = time.perf_counter() - self._w0
        self.cpu = time.process_time() - self._c0
        _running.discard(self)
        if not _running:
            gc.callbacks.remove(_on_gc)
        t1 = thread_cpu()
        # a thread that ended within the window is missing from t1: its CPU stays in "other" only
        self.split = {"loop": max(0.0, loop), "cudafd": max(0.0, t1["cudafd"] - self._t0["cudafd"])} if self._t0 and t1 else {}
        return self

    def __enter__(self) -> CpuMeter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def cores(self) -> float:
        """CPU seconds per wall second: 1.0 is one core busy all the time."""
        return self.cpu / self.wall if self.wall > 0 else 0.0
