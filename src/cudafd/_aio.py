"""asyncio adapter (uvloop too): futures resolved from a Notifier's fd.

The path of one ``await cudafd.wait(stream)``:

1. Work already over (one cuStreamQuery / cuEventQuery, no event recorded):
   return without suspending, as awaiting a done future does. One such wait
   in QUICK_YIELD_EVERY yields to the loop anyway, so a coroutine that
   launches tiny kernels and awaits them in a loop cannot starve the others.
2. Otherwise the wait yields to the loop and asks again, for up to SPIN_S:
   a tiny kernel ends a few microseconds after its launch returns, sooner
   than any thread could be woken to tell the loop; and in a busy loop (many
   tasks each awaiting short kernels) the one yield lets the other tasks run,
   after which the work is usually over and no watch is needed at all.
3. Then it watches (the core records an event; its poller finds the end,
   native/core/waiters.c) and parks on a future. While any future is
   parked, the Dispatcher keeps ``loop.add_reader(fd)`` registered; its
   callback drains the Notifier and resolves the futures of the tokens it
   got, in the order the core found them.

Order: the waits on one stream resume in the order they started. Steps 1
and 2 apply only to a wait that is alone on its stream (no earlier wait on
it still pending), and a later wait watches only after the earlier one
stopped spinning, so a later wait never returns ahead of an earlier one:
the core completes one stream's watched waits in order, and futures resolved
in one callback resume in that order.

The "spin" mechanism spins in the loop too: while futures are parked, a
``call_soon`` callback runs at every pass of the loop and drains when the
core's completion count moved (Notifier._completions), so the loop never
sleeps (one core, like ``sleep(0)`` polling) and a completion reaches it
without a thread wake-up.

The "poll" mechanism has no thread writing the fd: a ``call_later`` timer
calls poll() then drains, starting at POLL_MIN and doubling up to POLL_MAX
while nothing finishes, back to POLL_MIN on progress. (asyncio's selector
rounds sub-millisecond timeouts up to 1 ms; uvloop does not.)

Cancellation (task.cancel(), asyncio.timeout) lands in the ``finally`` of
Dispatcher.wait, which cancels the token if it was not reported: the wait is
detached, the GPU work is not cancelled, nothing leaks.

Lifetimes. The loop's default Notifier is kept in a WeakKeyDictionary keyed
by the loop; it refers to nothing of the loop's, and a weakref.finalize on
the loop closes it. A Dispatcher (per loop and Notifier, in weak-keyed
tables) holds its Notifier weakly and its parked futures only through a
weak reference: they belong to a _Parked, which only the loop (through the
registered reader) and the parked coroutines hold. So no global reference
reaches a future or a loop: a loop closed with waits pending (closing drops
its readers) is collected, and its default Notifier closed, like any other;
a Notifier of the user's used under many loops keeps nothing of any.

Facts relied on: asyncio runs callbacks on the loop's thread only, so this
state needs no lock; the Notifier's fd is level-triggered, so a reader that
drains everything never misses a completion; a loop without add_reader (the
Windows proactor loop) raises NotImplementedError.

A Notifier serves one loop at a time: a wait from a second loop (or trio
run) while the first has waits pending raises CudafdError, checked before
anything else, the fast path included.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from time import perf_counter

from ._errors import CudafdError
from ._notifier import Notifier
from ._targets import INT_TARGETS, resolve

__all__ = [
    "Dispatcher",
    "dispatcher",
    "default_dispatcher",
    "default_notifier",
    "close_default_notifier",
    "POLL_MIN",
    "POLL_MAX",
    "SPIN_S",
]

POLL_MIN = 50e-6
POLL_MAX = 2e-3
SPIN_S = 30e-6  # a lone wait yields and asks again for this long before it watches
QUICK_YIELD_EVERY = 8  # a yield after this many waits in a row that did not need to suspend

_NO_READER = (
    "this event loop cannot watch file descriptors (no add_reader: the Windows "
    "ProactorEventLoop?): use a selector event loop or uvloop"
)


def _add_reader(loop: asyncio.AbstractEventLoop, notifier: Notifier, callback: Callable[[], object]) -> int:
    """Register ``callback`` for the Notifier's fd, holding the fd open while registered."""
    fd = notifier._hold_fd()
    try:
        loop.add_reader(fd, callback)
    except NotImplementedError:
        notifier._unhold_fd()
        raise CudafdError(_NO_READER) from None
    except BaseException:
        notifier._unhold_fd()
        raise
    return fd


def _remove_reader(loop: asyncio.AbstractEventLoop, notifier: Notifier, fd: int) -> None:
    """Undo _add_reader (the loop may be closed already)."""
    try:
        if not loop.is_closed():
            loop.remove_reader(fd)
    finally:
        notifier._unhold_fd()


def _stop_watching(
    loop: asyncio.AbstractEventLoop | None, notifier: Notifier, timer: asyncio.TimerHandle | None, fd: int
) -> None:
    """Undo an arming: cancel the poll timer and remove the reader, whichever was set (fd -1: none)."""
    if timer is not None:
        timer.cancel()
    if fd >= 0 and loop is not None:
        _remove_reader(loop, notifier, fd)


class _Parked:
    """The futures parked on one Notifier in one loop, and the reader (or poll
    timer) that resolves them. Only the loop (through the registered
    callback) and the parked coroutines hold it."""

    __slots__ = ("loop", "notifier", "futures", "fd", "timer", "delay", "seen", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop, notifier: Notifier) -> None:
        self.loop = loop
        self.notifier = notifier
        self.futures: dict[int, asyncio.Future[None]] = {}  # by token
        self.fd = -1  # registered with add_reader (>= 0) while futures are parked
        self.timer: asyncio.Handle | None = None  # the "poll" mechanism's timer, or the spin's callback
        self.delay = POLL_MIN
        self.seen = -1  # spin: the core's completion count at the last drain

    def park(self, token: int) -> asyncio.Future[None]:
        """A future for ``token``, resolved when a drain reports it; arms the reader (or timer) if need be."""
        if self.fd < 0 and self.timer is None:
            notifier = self.notifier
            if notifier.needs_polling:
                self.delay = POLL_MIN
                self.timer = self.loop.call_later(POLL_MIN, self.poll_tick)
            elif notifier.mechanism == "spin":
                self.seen = -1
                self.timer = self.loop.call_soon(self.spin_tick)
            else:
                self.fd = _add_reader(self.loop, notifier, self.on_readable)
        fut = self.futures[token] = self.loop.create_future()
        return fut

    def disarm(self) -> None:
        fd, timer = self.fd, self.timer
        self.fd, self.timer = -1, None
        _stop_watching(self.loop, self.notifier, timer, fd)

    def on_readable(self) -> bool:
        """Drain and resolve; True if anything was reported."""
        futures = self.futures
        try:
            results = self.notifier._adapter_drain()
        except Exception as exc:  # noqa: BLE001 - the native core failed: fail every waiter rather than hang
            for fut in futures.values():
                if not fut.done():
                    fut.set_exception(exc)
            futures.clear()
            self.disarm()
            return True
        for token, exc in results:
            fut = futures.pop(token, None)
            if fut is None or fut.done():
                continue
            if exc is None:
                fut.set_result(None)
            else:
                fut.set_exception(exc)
        if not futures:
            self.disarm()
        return bool(results)

    def spin_tick(self) -> None:
        """The spin mechanism: the loop never sleeps while waits are parked; each
        pass reads the core's completion count (no system call) and drains when
        it moved, so a completion reaches the loop in one pass, not a wake-up."""
        self.timer = None
        seq = self.notifier._completions()
        if seq != self.seen:
            self.seen = seq
            self.on_readable()
        if self.futures:
            self.timer = self.loop.call_soon(self.spin_tick)

    def poll_tick(self) -> None:
        self.timer = None
        self.notifier.poll()
        progress = self.on_readable()
        if self.futures:
            self.delay = POLL_MIN if progress else min(self.delay * 2, POLL_MAX)
            self.timer = self.loop.call_later(self.delay, self.poll_tick)


class Dispatcher:
    """The waits of one Notifier on one asyncio loop (loop thread only).

    It holds its loop and Notifier weakly and its parked futures only through
    a weak reference (see "Lifetimes" above)."""

    __slots__ = ("_notifier_ref", "_parked", "_streams", "_spinning", "_quick", "__weakref__")

    def __init__(self, notifier: Notifier) -> None:
        self._notifier_ref = weakref.ref(notifier)
        self._parked: Callable[[], _Parked | None] = _none
        self._streams: dict[int, int] = {}  # stream handle -> its waits started and not returned
        self._spinning: set[int] = set()  # streams whose lone wait has not watched yet
        self._quick = 0  # waits in a row that were over before they began

    def busy(self) -> bool:
        """True while a wait of this Dispatcher is in progress."""
        return bool(self._streams) or self._parked() is not None

    async def wait(self, loop: asyncio.AbstractEventLoop, target: object) -> None:
        """Wait for ``target`` (module docstring); cancellation detaches the wait (GPU work goes on)."""
        notifier = self._notifier_ref()
        if notifier is None:  # pragma: no cover - the caller holds it
            raise CudafdError("the Notifier is gone")
        if not self._streams:
            notifier._claim(self)  # before any drain, the fast path included
        t = INT_TARGETS.get(target) if type(target) is int else None  # type: ignore[call-overload]
        if t is None:
            t = resolve(target)
        key = t.handle if t.kind == "stream" else -1
        streams = self._streams
        lone = key not in streams
        if lone and notifier._done_now(t):
            self._quick += 1
            if self._quick >= QUICK_YIELD_EVERY:  # never starve the loop
                self._quick = 0
                await asyncio.sleep(0)
            return
        self._quick = 0
        streams[key] = streams.get(key, 0) + 1  # from here on a later wait on the stream is not lone
        try:
            if lone:
                spinning = self._spinning
                spinning.add(key)
                try:
                    until = perf_counter() + SPIN_S
                    while True:
                        await asyncio.sleep(0)
                        if notifier._done_now(t):
                            return
                        if perf_counter() >= until:
                            break
                    token = notifier._adapter_watch(t)
                finally:
                    spinning.discard(key)
            else:
                while key in self._spinning:  # the earlier wait records first, so it resumes first
                    await asyncio.sleep(0)
                if streams[key] == 1 and notifier._done_now(t):  # alone now, and over
                    return
                token = notifier._adapter_watch(t)
            await self._park(loop, notifier, token)
        finally:
            left = streams[key] - 1
            if left:
                streams[key] = left
            else:
                del streams[key]

    async def _park(self, loop: asyncio.AbstractEventLoop, notifier: Notifier, token: int) -> None:
        parked = self._parked()
        if parked is None:
            parked = _Parked(loop, notifier)
            self._parked = weakref.ref(parked)
        try:
            fut = parked.park(token)
        except BaseException:
            notifier.cancel(token)
            raise
        futures = parked.futures
        try:
            await fut
        finally:
            if token in futures:  # not reported: cancelled, or the coroutine was closed
                del futures[token]
                notifier.cancel(token)
            if not futures:
                parked.disarm()
                if self._parked() is parked:
                    self._parked = _none


def _none() -> None:
    return None


# ---- lookup -----------------------------------------------------------------

_defaults: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Notifier] = weakref.WeakKeyDictionary()
_dispatchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.WeakKeyDictionary[Notifier, Dispatcher]]
_dispatchers = weakref.WeakKeyDictionary()


def dispatcher(loop: asyncio.AbstractEventLoop, notifier: Notifier | None) -> Dispatcher:
    """The Dispatcher of ``notifier`` (default: the loop's own) on ``loop``."""
    if notifier is None:
        notifier = default_notifier(loop, create=True)
        assert notifier is not None
    elif not isinstance(notifier, Notifier):
        raise TypeError(f"notifier= takes a cudafd.Notifier, not {type(notifier).__qualname__}")
    table = _dispatchers.get(loop)
    if table is None:
        table = _dispatchers[loop] = weakref.WeakKeyDictionary()
    disp = table.get(notifier)
    if disp is None:
        if not notifier.needs_polling:  # refused at the first wait, whether or not it needs the fd
            _remove_reader(loop, notifier, _add_reader(loop, notifier, _none))
        disp = table[notifier] = Dispatcher(notifier)
    return disp


def default_dispatcher(loop: asyncio.AbstractEventLoop) -> Dispatcher:
    """The Dispatcher of the loop's default Notifier (created on first use)."""
    return dispatcher(loop, None)


def default_notifier(loop: asyncio.AbstractEventLoop, create: bool = False) -> Notifier | None:
    """The loop's default Notifier: created on first use when ``create``, closed when the loop is collected."""
    notifier = _defaults.get(loop)
    if (notifier is None or notifier.closed) and create:
        notifier = Notifier()
        _defaults[loop] = notifier
        weakref.finalize(loop, notifier.close)
    return notifier


def close_default_notifier(loop: asyncio.AbstractEventLoop) -> None:
    """Close the loop's default Notifier now, if it has one (its pending waits raise ClosedError)."""
    notifier = _defaults.pop(loop, None)
    if notifier is not None:
        notifier.close()
