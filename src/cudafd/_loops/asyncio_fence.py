"""asyncio adapter for a Fence: futures waiting, on one loop, for the Fence's
fd to turn readable and its check to turn True or raise the fault
(cudafd._core.loop_hook's ``wait_until``).

Several coroutines may await one Fence; they share one reader (of the
Notifier's adapter_hold_fd(): with the "poll" mechanism its timer, which also
fires when it is time to ask the driver again). Cancelling one of them
unregisters only that one. One cancelled after its future got an error (the
fence's fault; not ClosedError), before it ran, raises that error, as a
cancelled ``await cudafd.wait()`` does (asyncio_loop.py). They await on one
loop at a time: another loop's await raises CudafdError while the first has
awaits pending, unless that loop is closed (nothing runs there: its awaits
are dropped).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from .._core.errors import ClosedError, CudafdError
from .._core.notifier import Notifier
from .asyncio_loop import _add_reader, _remove_reader

__all__ = ["wait_readiness"]


class _ReadinessWaiter:
    """Futures waiting, on one loop, for ``check()`` to turn True after the fd turns readable."""

    def __init__(self, notifier: Notifier, check: Callable[[], bool]) -> None:
        self._notifier = notifier
        self._check = check
        self._futures: list[asyncio.Future[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = -1

    def add(self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[None]) -> None:
        if self._loop is not None and self._loop is not loop:
            if not self._loop.is_closed():
                raise CudafdError("a Fence can be awaited on one event loop at a time")
            self._futures.clear()  # a closed loop's: nothing runs there, they never resolve
            self._disarm()
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
        self._fd = _add_reader(loop, self._notifier, self._fire)
        self._loop = loop

    def _disarm(self) -> None:
        loop, self._loop = self._loop, None
        fd, self._fd = self._fd, -1
        if fd >= 0 and loop is not None:
            _remove_reader(loop, self._notifier, fd)

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


def _new_holder(notifier: Notifier) -> list[_ReadinessWaiter | None]:
    """The Notifier's slot for its waiter, with a close hook: a waiter whose loop was
    closed (nothing runs there, its futures never resolve) gives the fd back when the
    Notifier closes, rather than when its tasks are collected."""
    holder: list[_ReadinessWaiter | None] = [None]

    def closed() -> None:
        waiter = holder[0]
        if waiter is not None and waiter._loop is not None and waiter._loop.is_closed():
            waiter._futures.clear()
            waiter._disarm()

    notifier.adapter_on_close(closed)
    return holder


async def wait_readiness(notifier: Notifier, check: Callable[[], bool]) -> None:
    """Wait on the running loop until ``check()`` is True, re-checking whenever the fd is
    readable; raises what ``check()`` raises.

    The waiter state is kept with the Notifier (Notifier.adapter_state) while
    anything awaits, so several coroutines can await the same Fence at once,
    and dropped after, so a Fence dropped without close() is freed at once.
    Cancellation unregisters only this waiter.
    """
    loop = asyncio.get_running_loop()
    holder = notifier.adapter_state(_ReadinessWaiter, lambda: _new_holder(notifier))
    waiter = holder[0]
    if waiter is None:
        waiter = holder[0] = _ReadinessWaiter(notifier, check)
    fut: asyncio.Future[None] = loop.create_future()
    try:
        waiter.add(loop, fut)
        await fut
    except asyncio.CancelledError:  # (Task.cancel() of a task whose future is done throws it in)
        exc = fut.exception() if fut.done() and not fut.cancelled() else None
        if exc is not None and not isinstance(exc, ClosedError):
            raise exc  # noqa: B904 (the cancellation stays its __context__)
        raise
    finally:
        waiter.discard(fut)
        if not waiter._futures and holder[0] is waiter:
            holder[0] = None  # (it refers to the Notifier and the Fence: no cycle is left behind)
