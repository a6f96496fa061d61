"""asyncio adapter (uvloop too): futures resolved from a Notifier's fd.

One Dispatcher per (event loop, Notifier). While it has pending futures it
keeps ``loop.add_reader(fd, ...)`` registered; the callback drains the
Notifier and resolves the futures of the tokens it returns (futures already
done or cancelled are skipped). When the count drops to zero the reader
stays registered while waits keep coming, so a coroutine that awaits again
soon pays neither an unregister/register pair nor a callback per wait; it
is removed once IDLE_S (20 ms) went by without a wait: the core's clock
tells that after timed waits (_aio_clock), a loop timer after the others
(_went_idle). Meanwhile the Dispatcher holds its loop weakly (an idle loop
can be collected) and never drains (the queue may be another loop's now).

The "poll" mechanism has no thread writing the fd: a ``call_later`` timer
calls poll() then drains, starting at 50 µs and doubling up to 2 ms while
nothing finishes, back to 50 µs on progress. (Known limit: asyncio's
selector rounds sub-millisecond timeouts up to 1 ms, so under plain asyncio
"poll" wakes at best once per millisecond; uvloop does not round up.)

Work already over: a lone wait first asks the driver whether the target has
finished (one cuStreamQuery / cuEventQuery, no event recorded). If so it
returns without suspending, as awaiting a done future does; one such wait
in QUICK_YIELD_EVERY yields to the loop anyway, so a coroutine that launches
tiny kernels and awaits them in a loop cannot starve the other tasks. It
yields as a pending wait (_yield_pending), so a wait started meanwhile on
its stream is not lone and cannot return ahead of it.

Work about to be over and short waits: a lone wait spins inline in its
coroutine before any future (_aio_spin). Long lone waits: the loop times
them on a timerfd the core arms (_aio_clock). Busy loops and the order of
waits on one stream: _aio_line.

Cancellation (task.cancel(), asyncio.timeout) lands in the ``finally`` of
Dispatcher.wait, which cancels the token if it was not reported: the wait is
detached, the GPU work is not cancelled, nothing leaks.

Facts relied on: asyncio runs callbacks on the loop's thread only, so the
futures map needs no lock; the Notifier's fd is level-triggered, so a reader
that drains everything never misses a completion; a loop without add_reader
(the Windows proactor loop) raises NotImplementedError.

A Notifier serves one loop at a time: a wait from a second loop (or trio
run) while the first has waits pending raises CudafdError, checked before
anything else, the fast path included (a drain there would swallow the
other loop's tokens). When the Notifier is closed, a close hook gives the fd
back at once if nothing waits, so close() releases it synchronously.

Lifetimes: dispatchers live in WeakKeyDictionaries keyed by the loop (the
default Notifier's, module-level; a given Notifier's, on that Notifier) and
refer to the loop only weakly (pending futures hold it while they wait), so
an idle loop can be collected, even one closed while its Dispatcher was
still registered; the default Notifier of a loop is closed by a
weakref.finalize on the loop.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable

from . import _aio_spin
from ._aio_clock import IDLE_S, LoopClock, weakly
from ._aio_line import (
    BUSY_CREDIT_MAX,
    BUSY_PROBE_EVERY,
    LINES_KEEP,
    UNBOUND,
    WATCHED,
    Line,
    Place,
    ahead_unwatched,
    yield_once,
)
from ._aio_spin import InlineSpin
from ._board import Board
from ._errors import CudafdError
from ._notifier import Notifier
from ._targets import INT_TARGETS, resolve
from ._timerfd import OneShot

__all__ = [
    "IDLE_S",
    "Dispatcher",
    "dispatcher",
    "default_dispatcher",
    "default_notifier",
    "close_default_notifier",
    "POLL_MIN",
    "POLL_MAX",
]

POLL_MIN = 50e-6
POLL_MAX = 2e-3
QUICK_YIELD_EVERY = 8  # a yield after this many waits in a row that did not need to suspend

_NO_READER = (
    "this event loop cannot watch file descriptors (no add_reader: the Windows "
    "ProactorEventLoop?): use a selector event loop or uvloop"
)


def _no_loop() -> None:
    """A Dispatcher's loop while it is not armed: none."""
    return None


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


def _stop_watching(
    loop: asyncio.AbstractEventLoop | None, notifier: Notifier, timer: asyncio.TimerHandle | None, fd: int
) -> None:
    """Undo an arming: cancel the poll timer and remove the reader, whichever was set (fd -1: none)."""
    if timer is not None:
        timer.cancel()
    if fd >= 0:
        _remove_reader(loop, notifier, fd)


def _remove_reader(loop: asyncio.AbstractEventLoop | None, notifier: Notifier, fd: int) -> None:
    """Undo _add_reader (the loop may be closed already)."""
    try:
        if loop is not None and not loop.is_closed():
            loop.remove_reader(fd)
    finally:
        notifier._unhold_fd()


class Dispatcher(InlineSpin, LoopClock):
    """Resolves the futures of one Notifier's waits on one asyncio loop (loop thread only)."""

    __slots__ = (
        "_notifier",
        "_futures",
        "_watch",
        "_cancel",
        "_drain",
        "_poll",
        "_polling",
        "_loop_ref",
        "_thread",
        "_armed",
        "_fd",
        "_timer",
        "_delay",
        "_idle_pending",
        "_idles",
        "_idles_seen",
        "_window",
        "_since_probe",
        "_inline",
        "_seq",
        "_seen",
        "_quick",
        "_tight",
        "_since_tight",
        "_clock",
        "_clock_ref",
        "_clock_no",
        "_clock_close",
        "_timed",
        "_lines",
        "_joined",
        "_busy_credit",
        "_busy_since",
        "_board",
        "__weakref__",
    )

    def __init__(self, notifier: Notifier) -> None:
        self._notifier = notifier
        self._futures: dict[int, asyncio.Future[None]] = {}
        self._watch = notifier._watch
        self._cancel = notifier.cancel
        self._drain = notifier.drain
        self._poll = notifier.poll
        self._polling = notifier.needs_polling
        self._loop_ref: Callable[[], asyncio.AbstractEventLoop | None] = _no_loop  # while armed: the loop, weakly
        self._armed = False
        self._fd = -1
        self._timer: asyncio.TimerHandle | None = None
        self._delay = POLL_MIN
        self._idle_pending = False  # an _idle_check is scheduled
        self._idles = 0  # times the last future went (the check compares)
        self._idles_seen = 0
        self._thread = 0
        self._window = _aio_spin.SPIN_START
        self._since_probe = 0
        self._inline: dict[int, object] = {}  # token -> _PENDING, None or the exception
        backend = notifier._backend
        self._seq = getattr(backend, "seq", None)  # the core's completion counter, if native
        self._seen = -1
        self._quick = 0  # waits in a row that were over before they began
        self._tight = True  # lone waits query back to back first (_spin_tight)
        self._since_tight = 0
        self._clock: OneShot | None = None  # the timerfd of waits the loop times (made on first use)
        self._clock_ref: Callable[[], asyncio.AbstractEventLoop | None] | None = None  # registered: the loop, weakly
        self._clock_no = -2  # its fd number (-2: none; the Notifier's _clock_fd is >= -1)
        self._clock_close: weakref.finalize | None = None
        self._timed = 0  # the token the clock is armed for (0: none)
        self._lines: dict[int, Line] = {}  # stream handle -> its pending waits, in order (_aio_line)
        self._joined = 0  # waits in self._lines
        self._busy_credit = 0  # a wait that is not lone yields once before its watch while >= 0 (_aio_line)
        self._busy_since = 0  # waits since the busy path was last tried while off
        self._board: Board | None | bool = False  # the answer board (_board): made on first use; None: none
        notifier._add_close_hook(self._notifier_closed)

    async def wait(self, loop: asyncio.AbstractEventLoop, target: object) -> None:
        """Watch ``target`` and wait for it; cancellation detaches the wait (GPU work goes on)."""
        state = self._notifier.__dict__
        if state.get("_aio_owner") is not self or state.get("_trio_owner") is not None:
            self._claim()  # before any drain, the fast path included: refusal must not depend on timing
        t = INT_TARGETS.get(target) if type(target) is int else None  # type: ignore[call-overload]
        if t is None:
            t = resolve(target)
        window = 0.0
        lone = not self._futures and not self._inline and not self._joined
        if lone:  # a lone wait: resume order is not at stake
            done = self._notifier._done_now(t)  # work already over: no event, no yield
            if not done:
                window = self._window
                if window < _aio_spin.SPIN_MIN:  # off (waits are long): probed now and then (_inline_window)
                    self._since_probe += 1
                    window = self._inline_window() if self._since_probe >= _aio_spin.SPIN_PROBE_EVERY else 0.0
                done = window > 0 and self._spin_tight(t)
            if done:
                self._quick += 1
                if self._quick >= QUICK_YIELD_EVERY:  # but never starve the loop
                    self._quick = 0
                    await self._yield_pending()
                return
            self._quick = 0
        line = None
        me = WATCHED
        if t.kind == "stream":  # from its first suspension on, it keeps its place (_aio_line)
            line = self._lines.get(t.handle)
            if line is None:
                line = self._lines[t.handle] = Line()
            me = Place()
            line.waits.append(me)
            self._joined += 1
        try:
            if window:
                spent = await self._spin_ahead(t, min(window, _aio_spin.AHEAD_MAX))
                if spent < 0:
                    return
                window -= spent
                if window <= 0:  # the whole window went by ahead of the watch: a miss
                    self._window_missed()
            elif not lone and line is not None:  # a busy loop, maybe (_aio_line)
                head = line.waits[0] is me
                if (self._busy_credit >= 0 or self._busy_probe()) if head else ahead_unwatched(line, me):
                    slot = line.slot
                    if slot == UNBOUND:
                        slot = line.slot = self._bind(t.handle)
                    if slot >= 0:  # the board asks the driver while the other tasks run
                        board = self._board
                        w = board.want(board.ptr, slot)  # type: ignore[union-attr]
                    await yield_once()  # the other tasks run: by then its work is likely over
                    while line.waits[0] is not me and ahead_unwatched(line, me):
                        await yield_once()
                    over = line.waits[0] is me and (
                        (slot >= 0 and board.done[slot] == w and not self._notifier._closed)  # type: ignore[union-attr]
                        or self._notifier._done_now(t)
                    )
                    if head:  # learn whether it pays: a hit banks credit, a miss spends it
                        credit = self._busy_credit
                        if over:
                            credit = 1 if credit < 0 else credit + 1 if credit < BUSY_CREDIT_MAX else credit
                        else:
                            credit = credit - 1 if credit >= 0 else -1
                        self._busy_credit = credit
                    if over:  # no watch at all
                        return
            due = 0
            if (
                lone
                and window <= 0
                and not self._futures
                and not self._inline
                and self._joined == (line is not None)
                and (
                    (self._clock_ref is not None and self._notifier._clock_fd == self._clock_no)
                    or self._clock_ready(loop)
                )
            ):
                token, due = self._notifier._watch_timed(t)  # a long wait: the loop may time it
            else:
                token = self._watch(t, False)
            me.unwatched = False  # its record is in: later waits on the stream may watch
            if window > 0 and await self._wait_inline(token, t, window):
                return
            fut = loop.create_future()
            futures = self._futures
            futures[token] = fut
            try:
                if not self._armed:
                    self._arm(loop)
                if due > 0:
                    self._timed = token  # the core armed the clock for it
            except BaseException:
                del futures[token]
                self._cancel(token)
                if not futures:
                    self._went_idle()
                raise
            try:
                await fut
            finally:
                if self._timed == token:
                    self._timed = 0
                    self._clock.disarm()  # type: ignore[union-attr]
                if token in futures:  # not reported: cancelled, or the coroutine was closed
                    del futures[token]
                    self._cancel(token)
                    if not futures:
                        self._went_idle()
        finally:
            if line is not None:
                self._joined -= 1
                waits = line.waits
                if waits[0] is me:
                    waits.popleft()
                else:
                    waits.remove(me)
                if not waits:
                    slot = line.slot
                    drop = len(self._lines) > LINES_KEEP
                    if slot >= 0:  # the board is to ask nothing of a stream nothing waits on
                        board = self._board
                        if drop or board.wants[slot] != board.done[slot]:  # type: ignore[union-attr]
                            board.settle(slot, drop)  # type: ignore[union-attr]
                    if drop:
                        self._lines.pop(t.handle, None)

    async def _yield_pending(self) -> None:
        """Yield once as a pending wait: one started meanwhile is then not
        lone, so it cannot return ahead of this one (order on a stream)."""
        key = object()
        self._inline[key] = None  # (a _fail_all meanwhile writes here; nothing reads it)
        try:
            await yield_once()
        finally:
            del self._inline[key]

    def _bind(self, stream: int) -> int:
        """The stream's slot on the answer board (made on first use), or -1."""
        board = self._board
        if board is False:
            board = self._board = Board.create(self)
        return board.bind(stream) if board is not None else -1  # type: ignore[union-attr]

    def _busy_probe(self) -> bool:
        """The busy path is off (it stopped paying): try it every BUSY_PROBE_EVERY waits."""
        self._busy_since += 1
        if self._busy_since < BUSY_PROBE_EVERY:
            return False
        self._busy_since = 0
        return True

    # ---- registration ----

    def _claim(self) -> None:
        """Refuse a Notifier that another event loop or a trio run is waiting on:
        a drain here would take their tokens, which would never be resolved."""
        state = self._notifier.__dict__
        owner = state.get("_aio_owner")
        ref = state.get("_trio_owner")  # the trio adapter's Dispatcher, weakly
        trio_owner = ref() if ref is not None else None
        if (owner is not None and owner is not self and owner._busy()) or (
            trio_owner is not None and trio_owner._slots
        ):
            raise CudafdError(
                "this Notifier is already waited on by another event loop or trio run; use one "
                "Notifier per loop (cudafd.wait() without notifier= does that)"
            )
        state["_aio_owner"] = self

    def _busy(self) -> bool:
        """Waits pending here (parked, spinning inline, or yielding before a watch)."""
        return bool(self._futures or self._inline or self._joined)

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._polling:
            self._delay = POLL_MIN
            self._timer = loop.call_later(POLL_MIN, self._on_timer)
        else:
            self._fd = _add_reader(loop, self._notifier, self._on_readable)
        self._loop_ref = weakly(loop)
        self._thread = threading.get_ident()
        self._armed = True

    def _went_idle(self) -> None:
        """The last future went. The reader stays registered while waits keep
        coming, so a coroutine that awaits again soon (most do) pays neither
        an unregister/register pair nor a callback per wait; _idle_check
        unregisters once IDLE_S went by without one. Meanwhile the loop is
        held only weakly, so an idle loop can still be collected."""
        self._idles += 1
        if not self._idle_pending and self._armed:
            self._check_idle_later()

    def _check_idle_later(self) -> None:
        loop = self._loop_ref()
        if loop is not None:
            try:
                loop.call_later(IDLE_S, self._idle_check)
                self._idle_pending = True
                return
            except RuntimeError:  # the loop is closed
                pass
        self._disarm()  # closed or gone: nothing is registered any more

    def _idle_check(self) -> None:
        self._idle_pending = False
        if not self._armed or self._busy():
            return  # disarmed already, or waiting again: its next idle schedules a check
        if self._idles != self._idles_seen:  # waits came and went since the last look
            self._idles_seen = self._idles
            self._check_idle_later()
            return
        self._disarm()

    def _maybe_disarm(self) -> None:
        if not self._futures:
            self._disarm()

    def _notifier_closed(self) -> None:
        """Close hook (any thread): give the fd back now if nothing waits, so close() releases it."""
        if not self._armed:
            return
        loop = self._loop_ref()
        if loop is None or loop.is_closed():  # nothing is registered any more
            self._disarm()
        elif threading.get_ident() == self._thread:
            if not self._futures:
                self._disarm()
        else:
            try:
                loop.call_soon_threadsafe(self._maybe_disarm)
            except RuntimeError:  # closed meanwhile
                self._disarm()

    def _disarm(self) -> None:
        if not self._armed:
            return
        self._stop_clock()
        loop = self._loop_ref()
        self._loop_ref = _no_loop
        self._armed = False
        timer, self._timer = self._timer, None
        fd, self._fd = self._fd, -1
        _stop_watching(loop, self._notifier, timer, fd)

    # ---- completion ----

    def _resolve(self, results: list[tuple[int, BaseException | None]]) -> None:
        futures = self._futures
        inline = self._inline
        for token, exc in results:
            fut = futures.pop(token, None)
            if fut is None:
                if token in inline:
                    inline[token] = exc
                continue
            if fut.done():
                continue
            if exc is None:
                fut.set_result(None)
            else:
                fut.set_exception(exc)

    def _fail_all(self, exc: BaseException) -> None:
        futures = list(self._futures.values())
        self._futures.clear()  # the same dict: wait() holds it
        for token in self._inline:
            self._inline[token] = exc
        for fut in futures:
            if not fut.done():
                fut.set_exception(exc)

    def _on_readable(self) -> None:
        if not self._futures and not self._inline:  # idle: whatever is queued is not ours to take
            self._disarm()  # (another loop or trio run may be waiting on this Notifier now)
            return
        try:
            results = self._drain()
        except Exception as exc:  # the native core failed: fail every waiter rather than hang
            self._fail_all(exc)
        else:
            self._resolve(results)
        if not self._futures:
            if self._notifier.closed:
                self._disarm()  # let the Notifier release its fd now
            else:
                self._went_idle()

    def _on_timer(self) -> None:
        self._timer = None
        try:
            self._poll()
            results = self._drain()
        except Exception as exc:
            self._fail_all(exc)
            results = []
        else:
            self._resolve(results)
        if not self._futures:
            self._disarm()
            return
        self._delay = POLL_MIN if results else min(self._delay * 2, POLL_MAX)
        loop = self._loop_ref()
        if loop is not None:
            self._timer = loop.call_later(self._delay, self._on_timer)


# ---- dispatcher lookup ------------------------------------------------------

_default: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Dispatcher] = weakref.WeakKeyDictionary()
_default_strong: dict[asyncio.AbstractEventLoop, Dispatcher] = {}  # loops that refuse weak references


def _check_loop(loop: asyncio.AbstractEventLoop, notifier: Notifier) -> None:
    """Refuse a loop that cannot watch fds, once, when its dispatcher is made:
    a wait that never needs the fd (work already over, a short inline spin)
    must not make a loop seem supported."""
    if not notifier.needs_polling:
        _remove_reader(loop, notifier, _add_reader(loop, notifier, _ignore))


def _ignore() -> None:
    pass


def _new_default_dispatcher(loop: asyncio.AbstractEventLoop) -> Dispatcher:
    notifier = Notifier()
    try:
        _check_loop(loop, notifier)
    except BaseException:
        notifier.close()
        raise
    disp = Dispatcher(notifier)
    try:
        _default[loop] = disp
    except TypeError:
        _default_strong[loop] = disp
    else:
        weakref.finalize(loop, notifier.close)
    return disp


# The last (loop, default dispatcher) pair looked up: most programs run one loop.
_last_loop: weakref.ReferenceType[asyncio.AbstractEventLoop] | None = None
_last_disp: Dispatcher | None = None


def default_dispatcher(loop: asyncio.AbstractEventLoop) -> Dispatcher:
    """The Dispatcher of the loop's default Notifier (created on first use)."""
    global _last_loop, _last_disp
    if _last_loop is not None and _last_loop() is loop:
        return _last_disp  # type: ignore[return-value]
    disp = _default.get(loop)
    if disp is None:
        disp = _default_strong.get(loop) or _new_default_dispatcher(loop)
    try:
        _last_loop, _last_disp = weakref.ref(loop), disp
    except TypeError:
        pass
    return disp


def dispatcher(loop: asyncio.AbstractEventLoop, notifier: Notifier | None) -> Dispatcher:
    """The Dispatcher of ``notifier`` (default: the loop's own Notifier, created lazily) on ``loop``."""
    if notifier is None:
        return default_dispatcher(loop)
    state = notifier.__dict__
    last = state.get("_aio_last")  # (weak loop, dispatcher): the common case is one loop
    if last is not None and last[0]() is loop:
        return last[1]  # type: ignore[no-any-return]
    table = state.get("_aio_dispatchers")
    if table is None:
        table = state["_aio_dispatchers"] = weakref.WeakKeyDictionary()
    disp = table.get(loop)
    if disp is None:
        _check_loop(loop, notifier)
        disp = Dispatcher(notifier)
        try:
            table[loop] = disp
        except TypeError:
            return disp  # a loop without weak references: a fresh dispatcher per call still works
    state["_aio_last"] = (weakref.ref(loop), disp)
    return disp


def default_notifier(loop: asyncio.AbstractEventLoop) -> Notifier | None:
    """The loop's default Notifier if one was created."""
    disp = _default.get(loop) or _default_strong.get(loop)
    return disp._notifier if disp is not None else None


def close_default_notifier(loop: asyncio.AbstractEventLoop) -> None:
    """Close and forget the loop's default Notifier (a later wait creates a new one)."""
    global _last_loop, _last_disp
    disp = _default.pop(loop, None) or _default_strong.pop(loop, None)
    if _last_disp is disp:
        _last_loop = _last_disp = None
    if disp is not None:
        disp._notifier.close()
