"""trio adapter for a Fence (anyio's trio backend too): tasks of one trio run
waiting, through the Fence's Notifier, until its check (done(), raising the
fault) turns True (cudafd._core.loop_hook's ``wait_until``).

Several tasks may await one Fence at once; they take turns at its fd as the
waits of a Dispatcher do (trio_loop._Waiters), and are all resolved together.
Cancelling one detaches only that task.
"""

from __future__ import annotations

from collections.abc import Callable

from trio.lowlevel import current_trio_token, enable_ki_protection

from .._core.errors import CudafdError
from .._core.notifier import Notifier
from .trio_loop import _Slot, _Waiters

__all__ = ["wait_until"]


class _FenceWaiters(_Waiters):
    """Tasks of one trio run awaiting one Fence: all resolved once ``fence.done()``."""

    def __init__(self, notifier: Notifier, check: Callable[[], bool]) -> None:
        super().__init__(notifier)
        self._done = check
        self._next = 0

    async def wait(self) -> None:
        key = self._next
        self._next += 1
        slot = _Slot(key, None)  # every task of a fence returns at once
        self._slots[key] = slot
        await self._wait_slot(slot)

    def _detach(self, slot: _Slot) -> None:
        self._slots.pop(slot.key, None)

    def _pump(self) -> bool:
        try:
            done = self._done()
        except Exception as exc:  # noqa: BLE001 - the fence's wait failed: it is every task's result
            self._finish_all(exc)
            return True
        if done:
            self._finish_all()  # each task then raises the fence's own result
        return done


@enable_ki_protection  # (trio_loop's module docstring, "KeyboardInterrupt")
async def wait_until(notifier: Notifier, check: Callable[[], bool]) -> None:
    """``await fence`` under trio: return once ``check()`` (the Fence's done(), raising its fault) is True.

    Raises what check() raises, and CudafdError if the fence is being
    awaited in another trio run.
    """
    token = current_trio_token()
    holder = notifier.adapter_state(_FenceWaiters, lambda: [None])
    waiters = holder[0]
    if waiters is None or waiters._trio_token is not token:
        if waiters is not None and waiters._slots:
            raise CudafdError("a Fence can be awaited in one trio run (or event loop) at a time")
        waiters = holder[0] = _FenceWaiters(notifier, check)
    try:
        await waiters.wait()
    finally:
        if not waiters._slots and holder[0] is waiters:
            holder[0] = None  # (it refers to the Notifier and the Fence: no cycle is left behind)
