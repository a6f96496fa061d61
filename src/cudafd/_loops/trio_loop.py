"""trio adapter (anyio's trio backend too): ``cudafd.wait()`` in a trio run.

What a wait does before it parks (the fast path, the asking again, the order
of the waits on one stream) is the shared policy, cudafd/_core/policy.py:
Dispatcher.wait runs its steps, turning each "yield" into a checkpoint. A
wait that ends without ever yielding still takes one checkpoint (trio wants
every await to be one). A wait that watched parks, and is woken, as
trio_waiters.py says.

Order: waits on one stream complete in watch order (the Notifier reports
them so), but trio runs the tasks woken together in no set order. So the
watched waits on one target form a policy.Lane (streams by handle, other
targets by equality), and a reported wait's task is woken only once every
earlier wait of its lane has returned (or left). Waits on different targets
are woken together.

A wait started on a closed Notifier raises ClosedError. The default
Notifier (``cudafd.wait(target)`` without notifier=) is one per trio run (a
RunVar), created on first use and closed at the end of the run by a system
task that sleeps until the run cancels it.

A Notifier serves one run at a time: a wait in a second run while the
first has waits pending (or an asyncio loop is waiting on it) raises
CudafdError, checked before the fast path, since one's drain would take
the other's tokens.
"""

from __future__ import annotations

import weakref
from collections.abc import Coroutine
from typing import Any

import trio
from trio.lowlevel import RunVar, spawn_system_task

from .._core.errors import ClosedError
from .._core.notifier import Notifier
from .._core.policy import Lane, WaitPolicy
from .._core.targets import Target, resolve
from .trio_waiters import _Slot, _Waiters

__all__ = ["Dispatcher", "default_dispatcher", "default_notifier", "dispatcher", "wait"]

_ORPHANED = "the Notifier was closed and its pending waits were drained elsewhere (the GPU work is not cancelled)"


class Dispatcher(_Waiters):
    """The waits of one Notifier in one trio run (see the module docstring)."""

    def __init__(self, notifier: Notifier) -> None:
        super().__init__(notifier)
        self._cancel = notifier.cancel
        self._drain = notifier.adapter_drain
        self._poll = notifier.poll
        self._policy = WaitPolicy()

    async def wait(self, target: object) -> None:
        """Wait for ``target`` (module docstring); cancellation detaches the wait (the GPU work goes on)."""
        notifier = self._notifier
        if not self.busy():
            notifier.adapter_claim(self)  # before the fast path: refusal must not depend on timing
        t = resolve(target)
        steps = self._policy.steps(notifier, t)
        checkpointed = False
        try:
            for token in steps:
                checkpointed = True
                if token is None:
                    await trio.lowlevel.checkpoint()
                else:
                    await self._wait_token(token, t, target)
        finally:
            steps.close()
        if not checkpointed:  # a wait on work already over: trio still wants a checkpoint
            await trio.lowlevel.checkpoint()

    async def _wait_token(self, token: int, t: Target, target: object) -> None:
        """Park until ``token`` is reported and first in its lane."""
        if t.kind == "stream":
            key: object = t.handle  # one stream's waits share a lane, whatever names the stream
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
            if self._polling:
                self._poll()
            results = self._drain()
        except Exception as exc:  # noqa: BLE001 - the native core failed: fail every waiter rather than hang
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


# ---- dispatcher lookup ------------------------------------------------------


class _Run:
    """A weak-referenceable stand-in for the current trio run (kept in a RunVar)."""

    __slots__ = ("__weakref__",)


_RUN: RunVar[_Run] = RunVar("cudafd.run")
_DEFAULT: RunVar[Dispatcher] = RunVar("cudafd.default_dispatcher")


def _run_key() -> _Run:
    try:
        return _RUN.get()
    except LookupError:
        key = _Run()
        _RUN.set(key)
        return key


async def _close_at_run_end(notifier: Notifier) -> None:
    try:
        await trio.sleep_forever()
    finally:
        notifier.close()


def default_dispatcher() -> Dispatcher:
    """The Dispatcher of the current run's default Notifier (created on first use, closed at run end)."""
    try:
        return _DEFAULT.get()
    except LookupError:
        pass
    notifier = Notifier()
    try:
        disp = Dispatcher(notifier)
        spawn_system_task(_close_at_run_end, notifier, name="cudafd: close the run's default Notifier")
    except BaseException:
        notifier.close()
        raise
    _DEFAULT.set(disp)
    return disp


def default_notifier(create: bool = False) -> Notifier | None:
    """The current run's default Notifier if one was created (or now, when ``create``)."""
    if create:
        return default_dispatcher()._notifier
    try:
        return _DEFAULT.get()._notifier
    except LookupError:
        return None


def dispatcher(notifier: Notifier | None) -> Dispatcher:
    """The Dispatcher of ``notifier`` (default: the run's own Notifier) in the current trio run."""
    if notifier is None:
        return default_dispatcher()
    key = _run_key()
    table = notifier.adapter_state(dispatcher, weakref.WeakKeyDictionary)
    disp = table.get(key)
    if disp is None:
        disp = table[key] = Dispatcher(notifier)
    return disp


def wait(target: object, notifier: Notifier | None = None) -> Coroutine[Any, Any, None]:
    """The coroutine of ``cudafd.wait(target, notifier=notifier)`` in the current trio run."""
    return dispatcher(notifier).wait(target)
