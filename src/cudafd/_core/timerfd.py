"""A one-shot timerfd: a timer an event loop can sleep on with nanosecond
precision (asyncio's own timers round up to whole milliseconds under epoll).
``os.timerfd_*`` where Python has them (3.13+), else libc through ctypes.
Linux only: ``OneShot()`` raises OSError elsewhere.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

__all__ = ["OneShot"]

_CLOCK_MONOTONIC = 1  # the clock of time.monotonic_ns() and of the native core
_TFD_TIMER_ABSTIME = 1


@functools.cache
def _libc() -> ctypes.CDLL:
    """libc, loaded once (find_library runs a subprocess)."""
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class OneShot:
    """``arm(seconds)`` / ``arm_at(monotonic_ns)``: the fd turns readable then;
    ``clear()`` reads it back; ``disarm()``; ``close()`` (idempotent)."""

    def __init__(self) -> None:
        self._libc = None
        if hasattr(os, "timerfd_create"):
            self._fd = os.timerfd_create(_CLOCK_MONOTONIC, flags=os.TFD_NONBLOCK | os.TFD_CLOEXEC)
            return
        self._libc = _libc()
        self._spec = _Itimerspec()
        self._spec_ref = ctypes.byref(self._spec)
        self._fd = self._libc.timerfd_create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create")

    def fileno(self) -> int:
        return self._fd

    def _set(self, ns: int, flags: int) -> None:
        if self._libc is None:
            os.timerfd_settime_ns(self._fd, flags=flags, initial=ns)
            return
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(ns, 1_000_000_000)
        if self._libc.timerfd_settime(self._fd, flags, self._spec_ref, None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime")

    def arm(self, seconds: float) -> None:
        self._set(max(1, int(seconds * 1e9)), 0)

    def arm_at(self, monotonic_ns: int) -> None:
        """Readable at ``monotonic_ns`` (time.monotonic_ns()), at once if that passed."""
        self._set(max(1, monotonic_ns), _TFD_TIMER_ABSTIME)

    def disarm(self) -> None:
        self._set(0, 0)

    def clear(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            pass

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
