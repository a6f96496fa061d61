"""fork(): a child of a process that used CUDA through cudafd cannot use it.

CUDA cannot be used in a child forked after its parent initialised the
driver: the driver's state there describes the parent's device resources,
and none of the parent's threads (the driver's, cudafd's) exist in the
child. The native core refuses such a child itself (native/core/fork.c);
this module does the same for what Python calls directly (the "poll"
mechanism): after a fork, ``forbidden()`` is True if the driver had been
initialised before it, and ``check()`` raises a CudafdError that says what
to do. A child forked before the first use starts from nothing and works.
"""

from __future__ import annotations

import os
import threading
import weakref

from .errors import CudafdError

__all__ = ["MESSAGE", "check", "forbidden", "generation", "track"]

MESSAGE = (
    "CUDA cannot be used in a process forked after its parent used it (cudafd had initialised the "
    "CUDA driver before this fork()): start child processes with multiprocessing's 'spawn' or "
    "'forkserver' start method (multiprocessing.set_start_method('spawn')), or fork before the "
    "first use of cudafd"
)

_forbidden = False
_generation = 0  # forks this process's line went through since import
_tracked: weakref.WeakSet[object] = weakref.WeakSet()


def track(obj: object) -> None:
    """Give ``obj._lock`` a fresh threading.RLock in a fork() child: a thread
    of the parent may have held it at the fork, and that thread is not in
    the child to release it (a Notifier's lock, held by the poll
    mechanism's helper thread, hung a child's close())."""
    _tracked.add(obj)


def _driver_was_initialised() -> bool:
    from . import driver as _driver, lib as _lib

    drv = _driver.loaded()
    if drv is not None and getattr(drv, "_initialised", False):
        return True
    lib = _lib.loaded()
    return bool(lib is not None and lib.cudafd_driver_path())


def _after_fork_in_child() -> None:
    global _forbidden, _generation
    _generation += 1
    for obj in list(_tracked):
        obj._lock = threading.RLock()  # type: ignore[attr-defined]
    if not _forbidden:
        try:
            _forbidden = _driver_was_initialised()
        except Exception:  # noqa: BLE001 - cannot tell: refuse rather than hang
            _forbidden = True


def forbidden() -> bool:
    """True in a child forked after this process initialised the CUDA driver."""
    return _forbidden


def generation() -> int:
    """How many forks led to this process since cudafd was imported (0 in the original process)."""
    return _generation


def check() -> None:
    """Raise CudafdError (MESSAGE) in a child where CUDA cannot be used."""
    if _forbidden:
        raise CudafdError(MESSAGE)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
