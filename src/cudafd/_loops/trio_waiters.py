"""trio's parking and waking (anyio's trio backend too): tasks of one trio run
woken from a Notifier's fd. Dispatcher (trio_loop.py) and the Fence's waiters
(trio_fence.py) are _Waiters.

Trio lets one task at a time wait for a given fd (a second one gets
BusyResourceError), so the waits of one Notifier in one trio run share one
_Waiters, and its waiting tasks take turns at the fd. The first waiter
becomes the *reader*: it sleeps in ``trio.lowlevel.wait_readable(fd)``,
drains the Notifier and reschedules the tasks of the tokens it got. Every
other waiter is parked (``trio.lowlevel.wait_task_rescheduled``). When the
reader's own wait is over, or cancelled, while others still wait, it hands
the role to one of them. There is no system task and no task per wait, and
a lone waiter is woken by the fd itself. A reported wait whose lane (a
policy.Lane: the watched waits on one target, in watch order) has an
earlier wait still waiting is woken only once that one returned or left.

The "poll" mechanism has no thread writing the fd: the reader calls poll()
then drains at the policy's poll intervals, back to the shortest when a new
wait starts (it moves the deadline of the reader's sleep).

Cancellation (``trio.move_on_after``, ``fail_after``, any cancel scope,
anyio's scopes) detaches the wait: the abort callback cancels the token at
once, the GPU work is not cancelled, nothing stays registered. A wait whose
task was already woken returns its result (trio does not cancel a task
between reschedule() and its next checkpoint); one reported but still
waiting for its lane's turn is cancelled like any other.

Closing: close() wakes every waiter with ClosedError (the Notifier reports
the pending tokens at the next drain). If the reader is blocked on the fd at
that moment it is woken with ``trio.lowlevel.notify_closing(fd)``, directly
when close() runs on the run's thread, through the run's TrioToken
otherwise. The reader holds the fd open (``Notifier.adapter_hold_fd``) while it
waits on it, so the number cannot be reused under trio's epoll.

Facts relied on: a trio run executes its tasks on one thread, so the state
here needs no lock; abort callbacks run synchronously on that thread and
never after reschedule(); the Notifier's fd is level-triggered (readable
exactly while completions are queued, and after close), so a reader that
drains after every wake never misses a completion, whoever held the role
before it.
"""

from __future__ import annotations

import functools
import threading
import weakref

import trio
from trio.lowlevel import (
    Abort,
    current_task,
    current_trio_token,
    notify_closing,
    reschedule,
    wait_readable,
    wait_task_rescheduled,
)

from .._core.notifier import Notifier
from .._core.policy import POLL_MIN, Lane, next_delay

__all__ = ["_Slot", "_Waiters"]


class _Slot:
    """One waiting task: done/error once its wait is reported; parked while it sleeps."""

    __slots__ = ("done", "error", "key", "lane", "parked", "task")

    def __init__(self, key: int, lane: Lane | None) -> None:
        self.key = key
        self.lane = lane  # the waits on its target, in watch order (None: no order to keep)
        self.task: trio.lowlevel.Task | None = None
        self.parked = False
        self.done = False
        self.error: BaseException | None = None


class _Waiters:
    """Tasks of one trio run waiting for progress on one Notifier; one at a time reads its fd.

    Subclasses say what progress is (``_pump``) and how a wait is detached
    (``_detach``). Run's thread only, except ``_notifier_closed``.
    """

    def __init__(self, notifier: Notifier) -> None:
        self._notifier = notifier
        self._slots: dict[int, _Slot] = {}  # waits not reported yet
        self._lanes: dict[object, Lane] = {}  # of _Slot
        self._reader: _Slot | None = None
        self._fd = -1  # the fd the reader is blocked on (held open meanwhile), else -1
        self._polling = notifier.needs_polling
        self._nap: trio.CancelScope | None = None  # the polling reader's current sleep
        self._delay = POLL_MIN
        self._thread = threading.get_ident()
        self._trio_token = current_trio_token()
        _on_close(notifier, self)

    # ---- one task's wait ----

    async def _wait_slot(self, slot: _Slot) -> None:
        """Wait until ``slot`` is reported and first in its lane, reading the fd when no task does.

        Raises the slot's error (CudaError, ClosedError) if it has one.
        """
        if self._nap is not None:
            self._poll_soon()
        try:
            while True:
                if slot.done:
                    lane = slot.lane
                    if lane is None or lane[0] is slot:
                        break
                    # reported, but an earlier wait on the same target has not returned yet
                elif self._reader is None:
                    await self._read(slot)
                    continue
                if self._reader is None and self._slots:
                    self._hand_over()  # this task just stopped reading: another must
                await self._park(slot)
        finally:
            self._leave(slot)
            if self._reader is None and self._slots:
                self._hand_over()
        if slot.error is not None:
            raise slot.error

    async def _park(self, slot: _Slot) -> None:
        """Sleep until woken: reported and first in its lane, or handed the reader's role."""
        slot.task = current_task()
        slot.parked = True

        def abort(_raise_cancel: object) -> Abort:
            slot.parked = False
            self._leave(slot)
            return Abort.SUCCEEDED

        await wait_task_rescheduled(abort)

    def _leave(self, slot: _Slot) -> None:
        """The task of ``slot`` is leaving (returning, raising, cancelled): detach it, pass its lane on.

        Idempotent.
        """
        if not slot.done:
            self._detach(slot)
        lane = slot.lane
        if lane is None:
            return
        slot.lane = None
        if lane[0] is slot:
            lane.popleft()
        else:
            lane.remove(slot)
        if not lane:
            del self._lanes[lane.key]
        elif lane[0].done:
            self._wake(lane[0])

    async def _read(self, slot: _Slot) -> None:
        """Be the reader until ``slot`` is reported: wait for the fd (or poll), then pump."""
        self._reader = slot
        try:
            if self._polling:
                await self._poll_until(slot)
                return
            notifier = self._notifier
            fd = notifier.adapter_hold_fd()  # ClosedError if the fd was released
            self._fd = fd
            try:
                while not slot.done:
                    try:
                        await wait_readable(fd)
                    except trio.ClosedResourceError:
                        pass  # notify_closing(): the Notifier was closed; the drain reports it
                    self._pump()
            finally:
                self._fd = -1
                notifier.adapter_release_fd()
        finally:
            self._reader = None

    async def _poll_until(self, slot: _Slot) -> None:
        """The reader of a "poll" Notifier: pump with backoff; a new wait cuts the current nap short."""
        self._delay = POLL_MIN
        try:
            while not slot.done:
                with trio.CancelScope(deadline=trio.current_time() + self._delay) as nap:
                    self._nap = nap
                    await trio.sleep_forever()
                self._nap = None
                self._delay = next_delay(self._delay, self._pump())
        finally:
            self._nap = None

    def _poll_soon(self) -> None:
        """A wait was added: have the polling reader look within POLL_MIN, and back off from there."""
        nap = self._nap
        if nap is not None:
            self._delay = POLL_MIN / 2  # doubled back to POLL_MIN if that look finds nothing
            nap.deadline = min(nap.deadline, trio.current_time() + POLL_MIN)

    # ---- completion ----

    def _wake(self, slot: _Slot) -> None:
        if slot.parked:
            slot.parked = False
            reschedule(slot.task)  # type: ignore[arg-type]

    def _resolve(self, slot: _Slot, error: BaseException | None) -> None:
        """Report ``slot`` (already removed from _slots); wake its task if it is first in its lane."""
        slot.done = True
        slot.error = error
        lane = slot.lane
        if lane is None or lane[0] is slot:
            self._wake(slot)

    def _finish_all(self, error: BaseException | None = None) -> None:
        """Report every waiting slot, with ``error`` (shared) or successfully."""
        slots = list(self._slots.values())
        self._slots.clear()
        for slot in slots:
            self._resolve(slot, error)

    def _hand_over(self) -> None:
        """Wake one parked unreported waiter so that it becomes the reader (nobody reads now)."""
        for slot in self._slots.values():
            if slot.parked:
                self._wake(slot)
                return

    def _pump(self) -> bool:  # pragma: no cover - abstract
        """Look for progress and resolve the slots it concerns; True if anything finished."""
        raise NotImplementedError

    def _detach(self, slot: _Slot) -> None:  # pragma: no cover - abstract
        """Forget an unfinished slot (idempotent)."""
        raise NotImplementedError

    # ---- close ----

    def _notifier_closed(self) -> None:
        """Close hook (any thread): wake a reader blocked on the fd with notify_closing()."""
        if self._fd < 0:
            return
        if threading.get_ident() == self._thread:
            self._notify_closing()
            return
        try:
            self._trio_token.run_sync_soon(self._notify_closing)
        except trio.RunFinishedError:
            pass

    def _notify_closing(self) -> None:
        fd = self._fd
        if fd >= 0:  # still held by the reader: the number is still ours
            try:
                notify_closing(fd)
            except RuntimeError:  # not inside the run after all: the close wrote the fd anyway
                pass


def _on_close(notifier: Notifier, waiters: _Waiters) -> None:
    """Call ``waiters._notifier_closed()`` when ``notifier`` closes (one hook per Notifier, weak refs)."""
    notifier.adapter_state(_on_close, functools.partial(_close_group, notifier)).add(waiters)


def _close_group(notifier: Notifier) -> weakref.WeakSet[_Waiters]:
    group: weakref.WeakSet[_Waiters] = weakref.WeakSet()
    notifier.adapter_on_close(functools.partial(_closed, group))
    return group


def _closed(group: weakref.WeakSet[_Waiters]) -> None:
    for waiters in list(group):
        waiters._notifier_closed()
