"""Fence: a one-shot "the GPU has passed this point", with its own file descriptor.

``fence(target)`` watches the target at once (the point is the stream's end
*now*, or the event's latest record now) on a Notifier of its own, so
``fileno()`` can be handed to any poller: it turns readable once the point is
passed (or the fence is closed) and stays readable.

Blocking use: ``wait(timeout)`` sleeps in poll(2) on the fd (no GIL held, no
thread of ours busy); with the "poll" mechanism it queries with a backoff of
50 µs doubling to 2 ms. Async use: ``await fence`` waits through the running
loop's adapter. A fault in the awaited work raises CudaError from wait(),
result() and await. close() detaches the wait (the GPU work is not
cancelled); a fence closed before it finished reports ClosedError.

A Fence is meant to be used by one thread at a time; close() may be called
from any thread.
"""

from __future__ import annotations

import select
import time
from collections.abc import Generator
from typing import Any

from ._errors import ClosedError, InvalidStateError
from ._notifier import Notifier

__all__ = ["Fence", "fence"]

_POLL_MIN = 50e-6
_POLL_MAX = 2e-3
_PENDING = object()


class Fence:
    """One GPU point, observable through ``fileno()``, ``done()``, ``wait()``, ``result()`` or ``await``."""

    def __init__(self, target: object, mechanism: str | None = None) -> None:
        self._closed = True  # first: a half-built object is safe to collect
        self._notifier: Notifier | None = None
        self._outcome: object = _PENDING  # None, or the exception to raise
        notifier = Notifier(mechanism)
        try:
            self._token = notifier.watch(target)
        except BaseException:
            notifier.close()
            raise
        self._notifier = notifier
        self._fd = notifier.fileno()
        self._closed = False

    @property
    def mechanism(self) -> str:
        """The mechanism of the fence's Notifier ("event", "hostfunc", "spin" or "poll")."""
        return self._notifier.mechanism if self._notifier is not None else "?"

    def fileno(self) -> int:
        """An fd that is readable once the point has been passed (or the fence closed).

        With the "poll" mechanism nothing writes it until ``done()`` is called:
        poll with a timeout and call ``done()``, or use ``wait()``. Raises
        ClosedError after close().
        """
        if self._closed:
            raise ClosedError("the Fence is closed")
        return self._fd

    def done(self) -> bool:
        """True once the point was passed, the work faulted, or the fence was closed. Never blocks."""
        if self._outcome is not _PENDING:
            return True
        notifier = self._notifier
        if notifier is None:
            return False
        notifier.poll()
        for token, exc in notifier.drain():
            if token == self._token:
                self._outcome = exc
        if self._outcome is _PENDING and notifier.closed:
            self._outcome = ClosedError("the Fence was closed before the GPU passed its point")
        return self._outcome is not _PENDING

    def wait(self, timeout: float | None = None) -> bool:
        """Block until done, at most ``timeout`` seconds (None: no limit).

        Returns True when done, False on timeout. Raises CudaError if the
        awaited work faulted and ClosedError if the fence was closed. Releases
        the GIL while it sleeps.
        """
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        notifier = self._notifier
        if notifier is not None and notifier.needs_polling:
            delay = _POLL_MIN
            while not self.done():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                time.sleep(delay if remaining is None else min(delay, remaining))
                delay = min(delay * 2, _POLL_MAX)
        else:
            poller = None
            while not self.done():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                if poller is None:
                    poller = select.poll()
                    poller.register(self._fd, select.POLLIN)
                ms = None if remaining is None else max(1, int(remaining * 1000 + 0.999))
                poller.poll(ms)
        self.result()
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

    def __await__(self) -> Generator[Any, None, None]:
        from ._wait import wait_fence

        return wait_fence(self).__await__()

    def __enter__(self) -> Fence:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        notifier = getattr(self, "_notifier", None)
        if notifier is not None:
            notifier.close()

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

    See Fence. ``mechanism`` as for Notifier (default "event", or $CUDAFD_MECHANISM).
    """
    return Fence(target, mechanism)
