"""The syncfd mechanism's Python side (Jetson, experimental): its probe report
and the sync_file of a per-point Fence.

The native core does the work (native/core/syncfd.c): the GPU signals an
NvSciSync syncpoint, the kernel's host1x fence device turns its threshold
into a pollable fd. ``probe()`` gives the core's self-test step by step, as
``python -m cudafd doctor`` prints it; ``cudafd.fence(target, "syncfd")``
gives a Fence whose ``fileno()`` is the kernel's sync_file itself, while its
Notifier (and a driver query on a slow interval) still reports faults to
``wait()``, ``result()`` and ``await``.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import byref, c_int
from typing import Any, NamedTuple

from . import lib as _lib
from .errors import ClosedError
from .targets import resolve

__all__ = ["Step", "Probe", "probe"]


class Step(NamedTuple):
    name: str  # "library", "driver", ..., "poll"
    result: str  # "ok", "not run", or why it failed
    what: str  # what the step does

    @property
    def ok(self) -> bool:
        return self.result == "ok"


class Probe(NamedTuple):
    available: bool
    summary: str  # the report's first line
    steps: list[Step]

    @property
    def failed(self) -> Step | None:
        """The first step that failed (None when available, or when nothing ran)."""
        return next((s for s in self.steps if s.result not in ("ok", "not run")), None)


def _parse(text: str) -> Probe:
    lines = text.splitlines()
    summary = lines[0] if lines else "unavailable: no report"
    steps = []
    for line in lines[1:]:
        parts = line.split(" | ", 2)
        if len(parts) == 3:
            steps.append(Step(parts[0], parts[2], parts[1]))
    return Probe(summary.startswith("available"), summary, steps)


def probe() -> Probe:
    """The core's syncfd self-test (run once per process, loading the driver).

    Where the native core cannot load, unavailable with that reason."""
    lib = _lib.try_load()
    if lib is None:
        return Probe(False, "unavailable: the native core did not load", [])
    return _parse(lib.cudafd_syncfd_report().decode(errors="replace"))


def native_watch_fence(
    lib: ctypes.CDLL, ptr: object, token_ref: object, handle: int, is_event: bool, ctx: int | None
) -> tuple[int, int]:
    """cudafd_watch_stream_fence / cudafd_watch_event_fence (NativeBackend.watch_fence),
    in ``ctx`` if given (the target's context), else in the current one."""
    fd = c_int(-1)
    watch = lib.cudafd_watch_event_fence if is_event else lib.cudafd_watch_stream_fence
    where = "watching the event" if is_event else "watching the stream"
    if ctx:  # (a stream's too: handle 0 names the default stream of the current context)
        from . import driver as _driver

        with _driver.get().current(ctx):
            rc = watch(ptr, handle, token_ref, byref(fd))
    else:
        rc = watch(ptr, handle, token_ref, byref(fd))
    if rc:
        _lib.raise_for(lib, rc, where)
    return token_ref.contents.value, fd.value  # type: ignore[attr-defined]


def watch_fence(notifier: object, target: object) -> tuple[int, int | None]:
    """Watch ``target`` on a syncfd Notifier and make the point's sync_file:
    (token, fd; None for a target with nothing to wait for, which the
    Notifier reports done at once). The Fence owns the fd."""
    t = resolve(target)
    n = notifier
    with n._lock:  # type: ignore[attr-defined]
        if n._closed:  # type: ignore[attr-defined]
            raise ClosedError("watch() on a closed Notifier")
        if t.kind in ("stream", "event"):
            backend = n._backend  # type: ignore[attr-defined]
            token, fd = backend.watch_fence(t.handle, t.kind == "event", t.ctx)
            n._pending[token] = t.keep  # type: ignore[attr-defined]
            return token, fd
    return n._watch(t), None  # type: ignore[attr-defined]


# Guards each Fence's _sync_fd between its thread and a close() from another.
_fd_lock = threading.Lock()


def make_readable(fence: Any) -> None:
    """A syncfd Fence that ended in an error (a fault, or closed first): its
    sync_file may never signal, so the fd number is pointed (dup2, atomic)
    at an eventfd that is readable, keeping the Fence's promise that fileno()
    stays readable once the outcome is known."""
    with _fd_lock:
        fd = fence._sync_fd
        if fd is None or getattr(fence, "_sync_fd_readable", False):
            return
        ready = os.eventfd(1, os.EFD_CLOEXEC)
        try:
            os.dup2(ready, fd, inheritable=False)
        finally:
            os.close(ready)
        fence._sync_fd_readable = True


def close_fd(fence: Any) -> None:
    """Close a syncfd Fence's sync_file (once; any thread)."""
    with _fd_lock:
        fd, fence._sync_fd = fence._sync_fd, None
    if fd is not None:
        os.close(fd)
