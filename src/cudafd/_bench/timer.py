"""A one-shot timerfd for the ``bound_loop`` method: a timer an event loop can
sleep on with nanosecond precision (asyncio's own timers round up to whole
milliseconds under epoll). ``os.timerfd_*`` where Python has them (3.13+),
else libc through ctypes. Linux only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["OneShot"]

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class OneShot:
    """``arm(seconds)``: the fd turns readable that long from now; ``clear()`` reads it back."""

    def __init__(self) -> None:
        self._libc = None
        if hasattr(os, "timerfd_create"):
            self._fd = os.timerfd_create(_CLOCK_MONOTONIC, flags=os.TFD_NONBLOCK | os.TFD_CLOEXEC)
        else:
            self._libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            self._fd = self._libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
            if self._fd < 0:
                raise OSError(ctypes.get_errno(), "timerfd_create")

    def fileno(self) -> int:
        return self._fd

    def arm(self, seconds: float) -> None:
        ns = max(1, int(seconds * 1e9))
        if self._libc is None:
            os.timerfd_settime_ns(self._fd, initial=ns)
            return
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(ns // 1_000_000_000, ns % 1_000_000_000))
        if self._libc.timerfd_settime(self._fd, 0, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime")

    def clear(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            pass

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
