"""asyncio adapter (uvloop too): futures resolved from a Notifier's fd.

What one ``await cudafd.wait(stream)`` does before it parks (the fast path,
the asking again, the order of the waits on one stream) is the shared policy,
cudafd/_core/policy.py: Dispatcher.wait runs its steps, turning each "yield"
into a bare yield to the loop (what ``asyncio.sleep(0)`` does, without its
coroutine). What is left here is parking and waking. A parked
wait waits on a future. While any future is parked, the Dispatcher keeps
``loop.add_reader(fd)`` registered; its callback drains the Notifier and
resolves the futures of the tokens it got, in the order the core found
them, and futures resolved in one callback resume in that order. Once none
is parked the reader stays registered until a pass of the loop finds no
wait of the Dispatcher in progress: a task that awaits its GPU work in a
loop parks its next wait a pass or two after the last one ended, and
keeping the reader costs one callback per wait (the end of each wait
schedules a look at the next pass; a wait in progress then looks again when
it ends) where removing and adding it again costs two selector changes: on
the H200 host back-to-back waits on 50 µs kernels cost 0.54 cores with the
reader kept against 0.62 re-registered per wait (docs/performance.md).

With the "spin" mechanism nothing is parked: each waiting task yields
(``sleep(0)``) and asks about its own wait at every pass (the policy's step
4, Notifier.adapter_ask), so the loop never sleeps (one core, like
``sleep(0)`` polling) and a task resumes in the pass that found its end.

With the "poll" mechanism no thread writes the fd: the reader is registered
on the Notifier's timer instead (adapter_hold_fd), which the backend arms
for when the next wait is due to be asked, and the callback asks
(adapter_poll) before it drains. The loop's own thread asks the driver,
woken by that timer.

Cancellation (task.cancel(), asyncio.timeout) lands in the ``finally`` of
Dispatcher._park, which cancels the token if it was not reported: the wait is
detached, the GPU work is not cancelled, nothing leaks; a task cancelled after
its future got an error (a fault; not ClosedError), before it ran, raises it.

Lifetimes. The loop's default Notifier is kept in a WeakKeyDictionary keyed by the loop, with
a weakref.finalize on the loop that closes it; it refers to nothing of the loop's. One closed is
let go: close_default_notifier() detaches its finalizer, and so does the next wait after its own
close(), which makes a new one. A Dispatcher (per loop and Notifier, in weak-keyed tables)
holds its Notifier weakly and its parked futures only through a weak reference: they belong to a
_Parked, which only the loop (through the registered reader) and the parked coroutines hold. So
no global reference reaches a future or a loop: a loop closed with waits pending (closing drops
its readers) is collected, and its default Notifier closed, like any other; a Notifier of the
user's used under many loops keeps nothing of any.

Facts relied on: asyncio runs callbacks on the loop's thread only, so this
state needs no lock; the fd the reader registers is level-triggered (the
"poll" mechanism's timer stays readable until re-armed, and is readable
while the Notifier's fd is), so a reader that asks and drains everything
never misses a completion; a loop without add_reader (the
Windows proactor loop) raises NotImplementedError.

A Notifier serves one loop at a time: a wait from a second loop (or trio
run) while the first has waits pending raises CudafdError, checked before
anything else, the fast path included.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import types
import weakref
from asyncio.events import _get_running_loop
from collections.abc import Callable, Generator

from .._core.errors import ClosedError, CudafdError
from .._core.notifier import Notifier
from .._core.policy import WaitPolicy
from .._core.targets import INT_TARGETS, resolve

__all__ = ["Dispatcher", "dispatcher", "default_notifier", "close_default_notifier"]

_OTHER_LOOP = "this cudafd.wait() was called in one event loop and awaited in another: call it where it is awaited"
_NO_READER = ("this event loop cannot watch file descriptors (no add_reader: the Windows ProactorEventLoop?): "
              "use a selector event loop or uvloop")


def _add_reader(loop: asyncio.AbstractEventLoop, notifier: Notifier, callback: Callable[[], object]) -> int:
    """Register ``callback`` for the Notifier's fd, holding the fd open while registered."""
    fd = notifier.adapter_hold_fd()
    try:
        loop.add_reader(fd, callback)
    except BaseException as exc:
        notifier.adapter_release_fd()
        if isinstance(exc, NotImplementedError):
            raise CudafdError(_NO_READER) from None
        raise
    return fd


def _remove_reader(loop: asyncio.AbstractEventLoop, notifier: Notifier, fd: int) -> None:
    """Undo _add_reader (the loop may be closed already)."""
    try:
        if not loop.is_closed():
            loop.remove_reader(fd)
    finally:
        notifier.adapter_release_fd()


class _Parked:
    """The futures parked on one Notifier in one loop, and the reader that resolves them.
    Only the loop (through the registered callback) and the parked coroutines hold it."""

    __slots__ = ("loop", "notifier", "busy", "futures", "fd", "check", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop, notifier: Notifier, busy: Callable[[], bool]) -> None:
        self.loop = loop
        self.notifier = notifier
        self.busy = busy  # whether a wait of the Dispatcher is in progress (WaitPolicy.busy)
        self.futures: dict[int, asyncio.Future[None]] = {}  # by token
        self.fd = -1  # registered with add_reader (>= 0) while futures are parked, and a pass or two after
        self.check: asyncio.Handle | None = None  # the scheduled _idle

    def park(self, token: int) -> asyncio.Future[None]:
        """A future for ``token``, resolved when a drain reports it; registers the reader if need be."""
        if self.fd < 0:
            self.fd = _add_reader(self.loop, self.notifier, self.on_readable)
        fut = self.futures[token] = self.loop.create_future()
        return fut

    def forget(self, token: int) -> None:
        """``token`` was not reported and its wait ends (cancelled): drop it, cancel it in the core."""
        del self.futures[token]
        self.notifier.cancel(token)

    def linger(self) -> None:
        """A wait ended, none is parked: unregister the reader next pass, unless a wait is in progress (its end looks)."""
        if self.check is not None or self.fd < 0:
            return
        if self.loop.is_closed():  # a coroutine closed after its loop: nothing will run
            self.disarm()
        else:
            self.check = self.loop.call_soon(self._idle)

    def _idle(self) -> None:
        self.check = None
        if self.futures or self.fd < 0:
            return
        if self.busy():  # a wait in progress: when it ends, it looks again (Dispatcher.wait)
            return
        self.disarm()

    def disarm(self) -> None:
        fd, self.fd = self.fd, -1
        if self.check is not None:
            self.check.cancel()
            self.check = None
        if fd >= 0:
            _remove_reader(self.loop, self.notifier, fd)

    def __del__(self) -> None:
        if self.fd >= 0:  # collected registered: its loop was closed (which dropped the reader)
            self.fd = -1
            self.notifier.adapter_release_fd()  # (from inside the Notifier's own call: put off, Notifier)

    def fail(self, exc: BaseException) -> None:
        """The native core failed: fail every waiter rather than hang, and let their waits go."""
        for token, fut in self.futures.items():
            with contextlib.suppress(Exception):
                self.notifier.cancel(token)  # (if the core fails here too, exc is still the error)
            if not fut.done():
                fut.set_exception(exc)
        self.futures.clear()
        self.disarm()

    def on_readable(self) -> bool:
        """Drain and resolve; True if anything was reported. A reader with nothing parked
        has no token to find, a wait in progress or not (a wait parks its token before the
        loop's next pass): what is queued is another owner's (another loop's, that claimed
        the Notifier meanwhile, or the sans-io side's), and a drain here would lose it. It
        unregisters instead; the next park registers it again."""
        if not self.futures:
            self.disarm()
            return False
        try:
            notifier = self.notifier
            notifier.adapter_poll()  # ("poll": ask the waits that are due; else nothing)
            results = notifier.adapter_drain()
        except Exception as exc:  # noqa: BLE001
            self.fail(exc)
            return True
        self.resolve(results)
        return bool(results)

    def resolve(self, results: list[tuple[int, BaseException | None]]) -> None:
        """Settle the futures of reported tokens, in order (their waits' ends look at the reader)."""
        futures = self.futures
        for token, exc in results:
            fut = futures.pop(token, None)
            if fut is None or fut.done():
                continue
            if exc is None:
                fut.set_result(None)
            else:
                fut.set_exception(exc)


class Dispatcher:
    """The waits of one Notifier on one asyncio loop (loop thread only).

    It holds its loop and Notifier weakly and its parked futures only through
    a weak reference (see "Lifetimes" above)."""

    __slots__ = ("_loop_ref", "_notifier_ref", "_parked", "_policy", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop, notifier: Notifier) -> None:
        self._loop_ref = weakref.ref(loop)
        self._notifier_ref = weakref.ref(notifier)
        self._parked: Callable[[], _Parked | None] = _none
        self._policy = WaitPolicy()

    def serves(self) -> bool:
        """True while its Notifier lives and is open."""
        notifier = self._notifier_ref()
        return notifier is not None and not notifier.closed

    def busy(self) -> bool:
        """True while a wait of this Dispatcher is in progress (a reader left registered
        with nothing parked does not count: it never drains, on_readable), and its loop
        is not closed (a wait left there never goes on)."""
        parked = self._parked()
        if not self._policy.busy() and (parked is None or not parked.futures):
            return False
        loop = self._loop_ref()
        return loop is not None and not loop.is_closed()

    def notifier_closed(self) -> None:
        """Close hook (any thread): unregister a reader left with nothing parked now where
        that is safe (the loop is stopped, or running on this thread), else at the loop's
        next pass. A reader with futures parked drains their ClosedErrors first, except on
        a closed loop, where nothing runs: its waits are forgotten, the parked ones and
        those whose tasks ask (spin), which would hold the fd as long as the tasks live."""
        loop, notifier = self._loop_ref(), self._notifier_ref()
        if loop is not None and loop.is_closed() and notifier is not None:
            for token in self._policy.asking_tokens():
                notifier.cancel(token)
        parked = self._parked()
        if parked is None or parked.fd < 0:
            return
        loop = parked.loop
        if loop.is_closed():  # nothing will run there: its parked waits go (their futures too)
            for token in list(parked.futures):
                parked.forget(token)
            parked.disarm()
        elif parked.futures:
            return
        elif not loop.is_running() or _running_loop() is loop:
            parked.disarm()
        else:
            try:
                loop.call_soon_threadsafe(parked.linger)
            except RuntimeError:  # closed meanwhile
                parked.disarm()

    async def wait(self, loop: asyncio.AbstractEventLoop, target: object) -> None:
        """Wait for ``target`` (module docstring); cancellation detaches the wait (GPU work goes on)."""
        if _get_running_loop() is not loop:  # made by cudafd.wait() in one loop, awaited in another
            raise CudafdError(_OTHER_LOOP)
        notifier = self._notifier_ref()
        if notifier is None:  # pragma: no cover - the caller holds it
            raise CudafdError("the Notifier is gone")
        policy = self._policy
        if not policy.busy():
            notifier.adapter_claim(self)  # before any drain, the fast path included
        t = INT_TARGETS.get(target) if type(target) is int else None  # type: ignore[call-overload]
        if t is None:
            t = resolve(target)
        steps = policy.steps(notifier, t)
        try:
            for token in steps:
                if token is None:
                    await _yield()
                else:
                    await self._park(loop, notifier, token)
        finally:
            steps.close()
            parked = self._parked()
            if parked is not None and not parked.futures:
                parked.linger()

    async def _park(self, loop: asyncio.AbstractEventLoop, notifier: Notifier, token: int) -> None:
        parked = self._parked()
        if parked is None:
            parked = _Parked(loop, notifier, self._policy.busy)
            self._parked = weakref.ref(parked)
        try:
            fut = parked.park(token)
        except BaseException:
            notifier.cancel(token)
            raise
        futures = parked.futures
        try:
            await fut
        except asyncio.CancelledError:  # (Task.cancel() of a task whose future is done throws it in)
            exc = fut.exception() if fut.done() and not fut.cancelled() else None
            if exc is not None and not isinstance(exc, ClosedError):
                raise exc  # noqa: B904 (the cancellation stays its __context__)
            raise
        finally:
            if token in futures:  # not reported: cancelled, or the coroutine was closed
                parked.forget(token)
            if not futures:  # (by this reference: the weak one may be cleared when a closed loop's task is collected)
                parked.linger()


def _none() -> None:
    return None


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


_ON_CLOSE = object()  # adapter_state's key: the Dispatchers to tell when a Notifier closes


def _close_group(notifier: Notifier) -> weakref.WeakSet[Dispatcher]:
    group: weakref.WeakSet[Dispatcher] = weakref.WeakSet()
    notifier.adapter_on_close(functools.partial(_closed, group))
    return group


def _closed(group: weakref.WeakSet[Dispatcher]) -> None:
    for disp in list(group):
        disp.notifier_closed()


@types.coroutine
def _yield() -> Generator[None, None, None]:
    """Yield to the loop once: the task runs again in the next pass (as ``asyncio.sleep(0)``)."""
    yield


# ---- lookup -----------------------------------------------------------------

_defaults: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Notifier, weakref.finalize]]
_defaults = weakref.WeakKeyDictionary()
_dispatchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.WeakKeyDictionary[Notifier, Dispatcher]]
_dispatchers = weakref.WeakKeyDictionary()


# The Dispatcher of the last wait (weakly, with its loop and Notifier, None for the
# loop's default): a task awaiting in a loop finds it with three weakref calls
# instead of two lookups in the weak tables. One tuple, swapped whole, so a
# thread running another loop never sees half of it.
_last: tuple[weakref.ref, weakref.ref | None, weakref.ref] | None = None


def dispatcher(loop: asyncio.AbstractEventLoop, notifier: Notifier | None) -> Dispatcher:
    """The Dispatcher of ``notifier`` (default: the loop's own) on ``loop``."""
    global _last
    last = _last
    if last is not None and last[0]() is loop:
        ref = last[1]
        if (notifier is None and ref is None) or (ref is not None and ref() is notifier):
            disp = last[2]()
            if disp is not None and disp.serves():
                return disp
    default = notifier is None
    if default:
        notifier = default_notifier(loop, create=True)
        assert notifier is not None
    elif not isinstance(notifier, Notifier):
        raise TypeError(f"notifier= takes a cudafd.Notifier, not {type(notifier).__qualname__}")
    table = _dispatchers.get(loop)
    if table is None:
        table = _dispatchers[loop] = weakref.WeakKeyDictionary()
    disp = table.get(notifier)
    if disp is None:
        # a loop without add_reader is refused at the first wait, whether or not it needs the fd
        _remove_reader(loop, notifier, _add_reader(loop, notifier, _none))
        disp = table[notifier] = Dispatcher(loop, notifier)
        notifier.adapter_state(_ON_CLOSE, functools.partial(_close_group, notifier)).add(disp)
    _last = (weakref.ref(loop), None if default else weakref.ref(notifier), weakref.ref(disp))
    return disp


def default_notifier(loop: asyncio.AbstractEventLoop, create: bool = False) -> Notifier | None:
    """The loop's default Notifier: created on first use when ``create``, closed when the loop is collected."""
    notifier, at_collect = _defaults.get(loop, (None, None))
    if (notifier is None or notifier.closed) and create:
        if at_collect is not None:  # (a closed one is let go, not kept for the loop's collection)
            at_collect.detach()
        notifier = Notifier()
        _defaults[loop] = (notifier, weakref.finalize(loop, notifier.close))
    return notifier


def close_default_notifier(loop: asyncio.AbstractEventLoop) -> None:
    """Close the loop's default Notifier now, if it has one (its pending waits raise ClosedError)."""
    notifier, at_collect = _defaults.pop(loop, (None, None))
    if notifier is not None:
        at_collect.detach()
        notifier.close()
