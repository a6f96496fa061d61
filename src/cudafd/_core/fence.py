"""Fence: a one-shot "the GPU has passed this point", with its own file descriptor.

``fence(target)`` watches the target at once (the point is the stream's end
*now*, or the event's latest record now) on a Notifier of its own, so
``fileno()`` can be handed to any poller: it turns readable once the point is
passed (or the work faulted) and stays readable until close(), whatever was
called meanwhile (done() drains the Notifier, which reads its eventfd, so once
the outcome is known the Fence writes the eventfd again, and nothing reads it
after). With the "poll" mechanism, ``fileno()`` starts the Notifier's helper
thread that polls the driver (see Notifier.fileno), so a plain select() loop
wakes too.

Blocking use: ``wait(timeout)`` sleeps in poll(2) on the fd (no GIL held, no
thread of ours busy); with the "poll" mechanism on the Notifier's timer,
asking the driver whenever it fires (the schedule of policy.py). It takes
any timeout threading.Event.wait takes, and more: ``None``, ``float('inf')``
or a huge number wait without limit (poll(2) is given at most an hour at a
time), zero, a negative number or NaN look once; a bool is refused
(TypeError), as it is almost always a mistake. Async use: ``await fence``
waits through the running loop's adapter, on a check (_settled) that raises
the fault, so a task cancelled after the adapter found it raises it too. A
fault in the awaited work raises CudaError from wait(), result() and await.
close() (any thread, during another thread's done() too) detaches the wait
(the GPU work is not cancelled) and releases the fd once no loop's reader
holds it; a fence closed before it finished reports ClosedError.

A Fence is meant to be used by one thread at a time; close() may be called
from any thread.
"""

from __future__ import annotations

import math
import numbers
import os
import select
import sys
import threading
import time
import warnings
from collections.abc import Generator
from typing import Any

from . import fork as _fork  # noqa: F401 - registers what a fork() child must know (imported with cudafd)
from . import loop_hook
from .errors import ClosedError, InvalidStateError
from .notifier import Notifier

__all__ = ["Fence", "fence"]

_SLEEP_MAX = 3600.0  # the longest single sleep in wait(): poll(2) takes an int of ms
_PENDING = object()
_ONE = (1).to_bytes(8, sys.byteorder)


def _deadline(timeout: object) -> float | None:
    """The monotonic deadline of ``wait(timeout)``; None: no limit.

    Accepts what threading.Event.wait accepts (a real number; NaN, zero or
    negative: look once) and any larger real number or infinity (no limit),
    so a huge timeout never overflows a conversion.
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"timeout must be a number of seconds or None, not {type(timeout).__qualname__}")
    try:
        seconds = float(timeout)
    except OverflowError:  # an int too large for a float
        seconds = math.inf if timeout > 0 else -math.inf
    if math.isnan(seconds) or seconds <= 0:
        return time.monotonic()
    deadline = time.monotonic() + seconds
    return None if math.isinf(deadline) else deadline


_CLOSED = "the Fence was closed before the GPU passed its point (the GPU work is not cancelled)"


def _warn_if_in_loop() -> None:
    """Fence.wait() about to block inside a running event loop: say what to do instead."""
    library = loop_hook.running()
    if library is not None:
        warnings.warn(
            f"Fence.wait() blocks the running {library} event loop until the GPU passes its point: "
            "in a coroutine use `await fence` (or `await cudafd.wait(target)`)",
            RuntimeWarning,
            stacklevel=3,
        )


class Fence:
    """One GPU point, observable through ``fileno()``, ``done()``, ``wait()``, ``result()`` or ``await``.

    ``await fence`` (asyncio, uvloop, trio, anyio) returns once done, or raises
    as result() does. Several tasks may await one Fence; cancelling one
    detaches only that task (the Fence's wait goes on). A
    cancellation that comes after the fault was found, before the task
    resumed, leaves the task raising the CudaError.
    """

    def __init__(self, target: object, mechanism: str | None = None) -> None:
        self._closed = True  # first: a half-built object is safe to collect
        self._notifier: Notifier | None = None
        self._outcome: object = _PENDING  # None, or the exception to raise
        self._sync_fd: int | None = None  # syncfd: the kernel's sync_file, which fileno() gives
        self._settling = threading.Lock()  # one done() at a time drains and sets the outcome
        notifier = Notifier(mechanism)
        try:
            if notifier.mechanism == "syncfd":
                from . import syncfd as _syncfd

                self._token, self._sync_fd = _syncfd.watch_fence(notifier, target)
            else:
                self._token = notifier.watch(target)
        except BaseException:
            notifier.close()
            raise
        self._notifier = notifier
        self._fd = notifier._fd  # fileno() would start the poll mechanism's helper: only fileno() asks for it
        self._closed = False

    @property
    def mechanism(self) -> str:
        """The mechanism of the fence's Notifier ("event", "hostfunc", "spin", "poll" or "syncfd")."""
        return self._notifier.mechanism if self._notifier is not None else "?"

    def fileno(self) -> int:
        """An fd that turns readable once the point has been passed (or the work
        faulted) and stays readable until close(), whatever was called meanwhile.

        Any poller may watch it (select, poll, epoll, selectors, a loop's
        add_reader); reading it is not needed and not allowed (it belongs to
        the Fence). With the "poll" mechanism the first fileno() starts the
        Notifier's helper thread, which polls the driver until the point is
        passed (Notifier.fileno). With the "syncfd" mechanism it is the
        kernel's sync_file for the point (docs/jetson.md): whether that turns
        readable after a GPU fault is not documented, so wait(), result() and
        await, which also watch the driver, are the ones that report faults.
        The kernel also makes that sync_file readable 30 s after it is first
        polled, whether the point passed or not (its fence timeout): after it
        wakes, call done(); if that is False, the fd stays readable, so wait
        with wait() or await instead. Raises ClosedError after close().
        """
        if self._closed:
            raise ClosedError("the Fence is closed")
        if self._sync_fd is not None:
            return self._sync_fd
        notifier = self._notifier
        if notifier is not None and notifier.needs_polling and self._outcome is _PENDING:
            notifier.fileno()  # starts the helper that makes the fd readable by itself
        return self._fd

    def done(self) -> bool:
        """True once the point was passed, the work faulted, or the fence was closed. Never blocks."""
        if self._outcome is not _PENDING:
            return True
        notifier = self._notifier
        if notifier is None:
            return False
        with self._settling:  # (a close() on another thread runs done() too)
            if self._outcome is not _PENDING:
                return True
            notifier.poll()
            results = notifier.drain()
            if not results and notifier.closed:  # a close() on another thread since that drain:
                results = notifier.drain()  # its batch, whose drain lets the fd go
            for token, exc in results:
                if token == self._token:
                    # close() marks the fence closed before it closes the Notifier
                    self._outcome = ClosedError(_CLOSED) if self._closed and isinstance(exc, ClosedError) else exc
            if self._outcome is _PENDING:
                if not notifier.closed:
                    return False
                self._outcome = ClosedError(_CLOSED)
            else:
                self._keep_readable(notifier)
        if self._sync_fd is not None and self._outcome is not None:
            from . import syncfd as _syncfd

            _syncfd.make_readable(self)  # the sync_file may never signal after a fault
        return True

    def _keep_readable(self, notifier: Notifier) -> None:
        """The drain that settled the outcome read the eventfd: write it again,
        so the fd stays readable until close(). Nothing drains it after (done()
        answers from the outcome). The hold keeps a concurrent close() from
        releasing the fd, so the write never reaches another file's fd."""
        try:
            notifier.adapter_hold_fd()
        except ClosedError:
            return
        try:
            if not notifier.closed:
                os.write(self._fd, _ONE)
        finally:
            notifier.adapter_release_fd()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until done, at most ``timeout`` seconds (None: no limit).

        Takes any timeout threading.Event.wait takes but a bool, and larger
        ones: None, ``float('inf')`` and any huge number wait without limit;
        zero, a negative number or NaN look once. Raises TypeError for a
        timeout that is a bool or not a real number. Returns True when done, False on timeout.
        Raises CudaError if the awaited work faulted and ClosedError if the
        fence was closed. Releases the GIL while it sleeps. Called inside a
        running event loop where it would block, it warns (RuntimeWarning):
        a coroutine awaits the fence instead.
        """
        deadline = _deadline(timeout)
        if (deadline is None or deadline > time.monotonic()) and not self.done():
            _warn_if_in_loop()
        if not self.done():
            # The fd that turns readable: the point passed, or with the "poll" mechanism
            # also when done() is due to ask the driver again (the backend's timer). Held
            # while this thread sleeps on it, so a close() from another thread cannot
            # release the number to another file meanwhile; once released, done() knows.
            notifier = self._notifier
            try:
                fd = notifier.adapter_hold_fd()  # type: ignore[union-attr]
            except ClosedError:
                fd = -1
            if fd >= 0:
                try:
                    if not self._sleep_until_done(fd, deadline):
                        return False
                finally:
                    notifier.adapter_release_fd()  # type: ignore[union-attr]
        self.result()
        return True

    def _sleep_until_done(self, fd: int, deadline: float | None) -> bool:
        """Sleep on ``fd`` until done() (True) or the deadline (False)."""
        poller = None
        while not self.done():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            if poller is None:
                poller = select.poll()
                poller.register(fd, select.POLLIN)
            step = _SLEEP_MAX if remaining is None else min(remaining, _SLEEP_MAX)
            poller.poll(max(1, math.ceil(step * 1000)))
        return True

    def result(self) -> None:
        """None if the point was passed; raises its CudaError (fault) or ClosedError.

        Raises InvalidStateError if not done yet (see done()).
        """
        if not self.done():
            raise InvalidStateError("the Fence is not done yet: wait() or await it first")
        if self._outcome is not None:
            raise self._outcome  # type: ignore[misc]

    def close(self) -> None:
        """Release the fd. A pending wait is detached (the GPU work is not cancelled). Idempotent; any thread."""
        notifier = self._notifier
        if notifier is None:
            return
        self._closed = True
        notifier.close()
        if self._outcome is _PENDING:
            self.done()  # takes the ClosedError batch, which releases the fd unless awaited
        if self._sync_fd is not None:
            from . import syncfd as _syncfd

            _syncfd.close_fd(self)

    def __await__(self) -> Generator[Any, None, None]:
        return self._wait_async().__await__()

    async def _wait_async(self) -> None:
        """``await fence``: until done() through the running loop's adapter (cudafd._core.loop_hook),
        then result(). Several tasks may await one Fence; cancelling one detaches only that one."""
        notifier = self._notifier
        if notifier is not None and not self.done():
            await loop_hook.wait_until(notifier, self._settled)
        self.result()

    def _settled(self) -> bool:
        """done(), raising the fault (a CudaError; not ClosedError) once it is the outcome: what
        ``await fence`` waits on, so the adapter settles every awaiting task with the fault
        itself, and a cancellation that comes after that does not hide it."""
        if not self.done():
            return False
        outcome = self._outcome
        if outcome is not None and not isinstance(outcome, ClosedError):
            raise outcome  # type: ignore[misc]
        return True

    def __enter__(self) -> Fence:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        notifier = getattr(self, "_notifier", None)
        if notifier is not None:
            notifier.close()
        if getattr(self, "_sync_fd", None) is not None:
            from . import syncfd as _syncfd

            _syncfd.close_fd(self)

    def __repr__(self) -> str:
        if self._outcome is _PENDING:
            state = "closed" if self._closed else "pending"
        elif self._outcome is None:
            state = "done"
        else:
            state = f"failed: {type(self._outcome).__name__}"
        fd = -1 if self._closed else self._fd
        return f"<cudafd.Fence fd={fd} mechanism={self.mechanism!r} {state}>"


def fence(target: object, mechanism: str | None = None) -> Fence:
    """A one-shot Fence for the current end of a stream, or an event's latest record.

    The event may be re-recorded or destroyed once fence() returns, except with
    the "poll" mechanism, which asks about the event itself (its latest record
    then): there not until the fence is done. See Fence. ``mechanism`` as for Notifier (default $CUDAFD_MECHANISM unless blank, else "event").
    """
    return Fence(target, mechanism)
