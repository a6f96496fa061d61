"""asyncio adapter for a Fence: futures waiting, on one loop, for the Fence's
fd to turn readable and ``fence.done()`` to turn True.

Several coroutines may await one Fence; they share one reader (or, for the
"poll" mechanism, one backoff timer from POLL_MIN to POLL_MAX). Cancelling
one of them unregisters only that one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ._aio import POLL_MAX, POLL_MIN, _add_reader, _stop_watching
from ._errors import CudafdError
from ._notifier import Notifier

__all__ = ["wait_readiness"]


class _ReadinessWaiter:
    """Futures waiting, on one loop, for ``check()`` to turn True after the fd turns readable."""

    def __init__(self, notifier: Notifier, check: Callable[[], bool]) -> None:
        self._notifier = notifier
        self._check = check
        self._futures: list[asyncio.Future[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = -1
        self._timer: asyncio.TimerHandle | None = None
        self._delay = POLL_MIN

    def add(self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[None]) -> None:
        if self._loop is not None and self._loop is not loop:
            raise CudafdError("a Fence can be awaited on one event loop at a time")
        self._futures.append(fut)
        if self._loop is None:
            try:
                self._arm(loop)
            except BaseException:
                self._futures.remove(fut)
                raise

    def discard(self, fut: asyncio.Future[None]) -> None:
        try:
            self._futures.remove(fut)
        except ValueError:
            pass
        if not self._futures:
            self._disarm()

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._notifier.needs_polling:
            self._delay = POLL_MIN
            self._timer = loop.call_later(POLL_MIN, self._on_timer)
        else:
            self._fd = _add_reader(loop, self._notifier, self._fire)
        self._loop = loop

    def _disarm(self) -> None:
        loop, self._loop = self._loop, None
        timer, self._timer = self._timer, None
        fd, self._fd = self._fd, -1
        _stop_watching(loop, self._notifier, timer, fd)

    def _fire(self) -> bool:
        try:
            ready = self._check()
        except Exception as exc:
            for fut in self._futures:
                if not fut.done():
                    fut.set_exception(exc)
            ready = True
        else:
            if ready:
                for fut in self._futures:
                    if not fut.done():
                        fut.set_result(None)
        if ready:
            self._futures.clear()
            self._disarm()
        return ready

    def _on_timer(self) -> None:
        self._timer = None
        if self._fire() or self._loop is None:
            return
        self._delay = min(self._delay * 2, POLL_MAX)
        self._timer = self._loop.call_later(self._delay, self._on_timer)


async def wait_readiness(owner: Any, notifier: Notifier, check: Callable[[], bool]) -> None:
    """Wait on the running loop until ``check()`` is True, re-checking whenever the fd is readable.

    The waiter state lives on ``owner`` (a Fence) so several coroutines can
    await the same owner at once. Cancellation unregisters only this waiter.
    """
    loop = asyncio.get_running_loop()
    waiter = owner.__dict__.get("_aio_waiter")
    if waiter is None:
        waiter = owner.__dict__["_aio_waiter"] = _ReadinessWaiter(notifier, check)
    fut: asyncio.Future[None] = loop.create_future()
    waiter.add(loop, fut)
    try:
        await fut
    finally:
        waiter.discard(fut)
