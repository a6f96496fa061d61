"""The asyncio Dispatcher's clock: long lone waits timed by the loop itself
(a mixin of _aio.Dispatcher, whose slots hold its state).

Long waits, timed by the loop: a lone wait that outlasted its spin window
(or found it off) asks the core to let the loop time it
(cudafd_watch_stream_timed, the event mechanism). The core answers with
when to ask, from the stream's history, and arms the Dispatcher's timerfd
for then itself (cudafd_set_clock: no timer call from Python; a precise
timer, where asyncio's own round to milliseconds). When it fires the loop
asks cudafd_check, which finds the wait over and returns its status (the
core disarms the clock), or re-arms it for a later check. The core aims
where about one check in 33 comes early, since each early check costs the
loop a wake. The poller's thread is not woken at all (its ~60 µs of CPU
per 2 ms wait on an H200); the loop woke 1.06 times per wait
(docs/performance.md). The wait also keeps its future, so whatever the
core reports through the fd instead (a second wait joined the stream, a
fault swept the context, the notifier closed) resolves it as for any other
wait.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

from ._notifier import Notifier
from ._timerfd import OneShot

IDLE_S = 0.02  # a Dispatcher stays registered this long (up to twice) after its last wait

__all__ = ["IDLE_S", "LoopClock", "weakly"]


class LoopClock:
    """The clock methods of _aio.Dispatcher."""

    __slots__ = ()

    def _clock_ready(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Make sure the clock exists, is watched by ``loop`` and is the one the
        core arms (cudafd_set_clock): then a wait can be timed by the loop.
        False where it cannot (no timerfd here, a polling Notifier)."""
        clock = self._clock
        if clock is not None and self._clock_ref is not None and self._notifier._clock_fd == clock.fileno():
            return True
        if self._polling:
            return False
        try:
            if clock is None:
                clock = OneShot()
                self._clock_close = weakref.finalize(self, _close_clock, self._notifier, clock)
                self._clock = clock
                self._clock_no = clock.fileno()
            if self._clock_ref is None:  # (a Dispatcher serves one loop)
                loop.add_reader(clock.fileno(), self._on_clock)
                self._clock_ref = weakly(loop)
            fd = clock.fileno()
            return self._notifier._clock_fd == fd or self._notifier._set_clock(fd, int(IDLE_S * 1e9))
        except OSError:
            return False

    def _on_clock(self) -> None:
        """The clock fired: ask the core after the timed wait. The core re-arms
        the clock (still running), arms it IDLE_S later (over), or disarms it
        (the fd reports it). Fired with no timed wait: no timed wait followed
        the last one for IDLE_S, so, unless others wait, the Dispatcher
        unregisters (_disarm): the idle timer of timed waits, which costs no
        call per wait (_aio._went_idle is that of the others)."""
        clock = self._clock
        if clock is None:
            return
        token = self._timed
        fut = self._futures.get(token) if token else None
        if fut is None or fut.done():
            self._timed = 0
            clock.disarm()
            if not self._busy():
                self._disarm()
            return
        try:
            due, exc = self._notifier._check(token)
        except Exception as err:  # the native core failed: this wait fails rather than hangs
            due, exc = 0, err
            clock.disarm()
        if due > 0:
            return
        self._timed = 0
        if due < 0:
            clock.disarm()  # (the core did, unless it no longer knew the token)
            return  # the core reports it through the fd
        del self._futures[token]
        if exc is None:
            fut.set_result(None)
        else:
            fut.set_exception(exc)
        # no _went_idle(): the core armed the clock IDLE_S from now, and that is the idle timer

    def _stop_clock(self) -> None:
        """Unregister the clock (on _disarm); close it too once the Notifier is closed."""
        ref, self._clock_ref = self._clock_ref, None
        loop = ref() if ref is not None else None
        self._timed = 0
        if loop is not None and self._clock is not None:
            try:
                loop.remove_reader(self._clock.fileno())
            except Exception:  # the loop is closed: nothing is registered any more
                pass
        if self._notifier.closed and self._clock_close is not None:
            self._clock_close()
            self._clock = self._clock_close = None
            self._clock_no = -2


def weakly(loop: asyncio.AbstractEventLoop) -> Callable[[], asyncio.AbstractEventLoop | None]:
    """A weak reference to ``loop`` (a strong one for a loop that refuses weak
    references): what a Dispatcher keeps of its loop, so an idle loop can go."""
    try:
        return weakref.ref(loop)
    except TypeError:
        return lambda: loop


def _close_clock(notifier: Notifier, clock: OneShot) -> None:
    """A Dispatcher's clock goes: the core must stop arming it first (its fd number may be reused)."""
    if notifier._clock_fd == clock.fileno():
        notifier._set_clock(-1)
    clock.close()
