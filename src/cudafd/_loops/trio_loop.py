"""trio adapter (anyio's trio backend too): tasks woken from a Notifier's fd.

Trio lets one task at a time wait for a given fd (a second one gets
BusyResourceError), so the waits of one Notifier in one trio run share a
Dispatcher, and its waiting tasks take turns at the fd. The first waiter
becomes the *reader*: it sleeps in ``trio.lowlevel.wait_readable(fd)``,
drains the Notifier and reschedules the tasks of the tokens it got. Every
other waiter is parked (``trio.lowlevel.wait_task_rescheduled``). When the
reader's own wait is over, or cancelled, while others still wait, it hands
the role to one of them. There is no system task and no task per wait, and
a lone waiter is woken by the fd itself. The tasks awaiting one Fence do the
same (trio_fence.py); trio_run.py finds the Dispatcher of a run.

What a wait does before it parks (the fast path, the asking again, the order
of the waits on one stream) is the shared policy, cudafd/_core/policy.py:
Dispatcher.wait runs its steps, turning each "yield" into a checkpoint. A
wait on work already over takes its checkpoint inside the policy (its
``fast_yields``), while it still counts on its stream, so a wait started
meanwhile returns after it whatever order trio runs them in.

Order: waits on one target complete in watch order (the Notifier reports
them so), but trio runs the tasks woken together in no set order. So the
watched waits on one target form a *lane* (a policy.Lane: streams by
their stream key, the driver's id for the stream; other targets by
equality), and a reported wait's task is woken
only once every earlier wait of its lane has returned (or left): waits on
one stream return in the order they were started, as under asyncio. Waits
on different targets are woken together.

With the "spin" mechanism no task parks: each waiting task takes a
checkpoint and asks about its own wait at every pass (the policy's step 4,
Notifier.adapter_ask), so the run never sleeps and a task resumes in the
batch that found its end; a stream's waits end in watch order, since of
the asking waits of a target only the first asks.

With the "poll" mechanism no thread writes the fd: the reader waits on the
Notifier's timer instead (adapter_hold_fd), which the backend arms for when
the next wait is due to be asked (a new wait moves it earlier), or at once
while the Notifier's fd is readable, and asks (adapter_poll) before it drains.

Cancellation (``trio.move_on_after``, ``fail_after``, any cancel scope,
anyio's scopes) detaches the wait: the abort callback cancels the token at
once, the GPU work is not cancelled, nothing stays registered. A wait whose
task was already woken returns its result (trio does not cancel a task
between reschedule() and its next checkpoint); one reported but still
waiting for its lane's turn is cancelled like any other.

KeyboardInterrupt: trio raises it wherever unprotected code runs when
SIGINT comes. Dispatcher.wait (and trio_fence.wait_until) is KI-protected,
and so is everything it calls, so it never lands inside the bookkeeping (a
token made and not yet kept, a hold on the fd not yet kept, completions
drained whose tasks are not yet woken): trio raises it in the run's main
task at that task's next checkpoint instead, and a wait it lands in leaves
as a cancelled one does.

Closing: close() wakes every waiter with ClosedError (the Notifier reports
the pending tokens at the next drain). If the reader is blocked on the fd at
that moment it is woken with ``trio.lowlevel.notify_closing(fd)``, directly
when close() runs on the run's thread, through the run's TrioToken
otherwise. The reader holds the fd open (``Notifier.adapter_hold_fd``) while it
waits on it, so the number cannot be reused under trio's epoll. A wait
started on a closed Notifier raises ClosedError.

Facts relied on: a trio run executes its tasks on one thread, so the state
here needs no lock; abort callbacks run synchronously on that thread and
never after reschedule(); the fd the reader waits on is level-triggered
(readable exactly while completions are queued, and after close; the "poll"
mechanism's timer also while an ask is due), so a reader that asks and
drains after every wake never misses a completion, whoever held the role
before it.

A Notifier serves one run at a time: a wait in a second run while the
first has waits pending (or an asyncio loop is waiting on it) raises
CudafdError, checked before the fast path, since one's drain would take
the other's tokens.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref

import trio
from trio.lowlevel import (
    Abort,
    current_task,
    current_trio_token,
    enable_ki_protection,
    notify_closing,
    reschedule,
    wait_readable,
    wait_task_rescheduled,
)

from .._core.errors import ClosedError
from .._core.notifier import Notifier
from .._core.policy import Lane, WaitPolicy
from .._core.targets import Target, resolve

__all__ = ["Dispatcher"]

_ORPHANED = "the Notifier was closed and its pending waits were drained elsewhere (the GPU work is not cancelled)"


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
        self._thread = threading.get_ident()
        self._trio_token = current_trio_token()
        _on_close(notifier, self)

    # ---- one task's wait ----

    async def _wait_slot(self, slot: _Slot) -> None:
        """Wait until ``slot`` is reported and first in its lane, reading the fd when no task does.

        Raises the slot's error (CudaError, ClosedError) if it has one.
        """
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
        """Be the reader until ``slot`` is reported: wait for the fd, then pump."""
        self._reader = slot
        try:
            notifier = self._notifier
            try:
                fd = notifier.adapter_hold_fd()
            except ClosedError:  # released with a close since this task was handed the role:
                self._pump()  # what the fd would have told is known now (a fence's outcome)
                if slot.done:
                    return
                raise
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


class Dispatcher(_Waiters):
    """The waits of one Notifier in one trio run (see the module docstring)."""

    def __init__(self, notifier: Notifier) -> None:
        super().__init__(notifier)
        self._cancel = notifier.cancel
        self._drain = notifier.adapter_drain
        self._poll = notifier.adapter_poll
        self._policy = WaitPolicy(fast_yields=True)  # its checkpoint in progress on the stream, so in order

    async def wait(self, target: object) -> None:
        """Wait for ``target`` (module docstring); cancellation detaches the wait (the GPU work goes on)."""
        notifier = self._notifier
        if not self.busy():
            notifier.adapter_claim(self)  # before the fast path: refusal must not depend on timing
        t = resolve(target)
        steps = self._policy.steps(notifier, t)  # (every wait yields or parks at least once)
        try:
            for token in steps:
                if token is None:
                    await trio.lowlevel.checkpoint()
                else:
                    await self._wait_token(token, t, target)
        finally:
            steps.close()

    async def _wait_token(self, token: int, t: Target, target: object) -> None:
        """Park until ``token`` is reported and first in its lane."""
        if t.kind == "stream":
            # One stream's waits share a lane, whatever names the stream; by the
            # stream's id, not its handle (a new stream may get a destroyed one's).
            try:
                key: object = self._notifier.adapter_stream_key(t)
            except BaseException:  # (a context that cannot be made current): the token goes
                self._cancel(token)
                raise
        else:
            try:
                hash(target)
                key = ("target", target)  # equal targets share a lane
            except TypeError:
                key = ("id", id(target))
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = Lane(key)
        slot = _Slot(token, lane)
        lane.append(slot)
        self._slots[token] = slot
        await self._wait_slot(slot)

    def busy(self) -> bool:
        """True while a wait of this Dispatcher is in progress."""
        return bool(self._slots) or self._policy.busy()

    def _detach(self, slot: _Slot) -> None:
        if self._slots.pop(slot.key, None) is not None:
            self._cancel(slot.key)

    def _pump(self) -> bool:
        try:
            self._poll()  # ("poll": ask the waits that are due; else nothing)
            results = self._drain()
            if not results and self._slots and self._notifier.closed:
                results = self._drain()  # a close on another thread since that drain: its batch
        except Exception as exc:  # noqa: BLE001 - the native core failed: fail every waiter rather than hang
            for token in list(self._slots):  # their waits go too: nothing would take their results
                with contextlib.suppress(Exception):
                    self._cancel(token)
            self._finish_all(exc)
            return True
        slots = self._slots
        for token, exc in results:
            slot = slots.pop(token, None)
            if slot is not None:
                self._resolve(slot, exc)
        if not results and slots and self._notifier.closed:  # nothing can report them any more
            for slot in list(slots.values()):
                del slots[slot.key]
                self._resolve(slot, ClosedError(_ORPHANED))
        return bool(results)


Dispatcher.wait.__qualname__ = "cudafd.wait"  # what a never-awaited wait's warning names
Dispatcher.wait = enable_ki_protection(Dispatcher.wait)  # (module docstring) after the renaming: an older trio returns a wrapper
