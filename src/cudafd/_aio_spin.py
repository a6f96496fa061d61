"""The asyncio Dispatcher's inline spin: lone waits that end soon, found
without a future (a mixin of _aio.Dispatcher, whose slots hold its state).

Work about to be over: on an H200 a tiny kernel is rarely over when its
launch returns (31 of 3000), but ends 4-6 µs later: less than one asyncio
pass (sleep(0) and a query, ~5 µs), so a spin that yields before each query
noticed it a whole pass late, and that pass was most of the gap between
cudafd and the floor (bench/results/2026-11-30-h200-verify). So while lone
waits keep ending that soon, a lone wait inside its spin window first asks
the driver back to back for up to TIGHT_MAX without yielding: the loop is
held for at most about two of its own passes. One such wait that is not
over by then turns this off; it is tried again every TIGHT_PROBE_EVERY lone
waits, so a program awaiting longer work holds its loop ~0.2 µs per wait.
A wait found over this way counts as one that did not suspend.

Short waits: waking a loop thread that sleeps in epoll costs 10-50 µs on
the virtual machines most GPUs live in (DESIGN.md, "Floor"): as much as the
whole wait, and a future plus its task switch costs several more. So a wait
first runs inline: the waiting coroutine itself yields to the loop
(``sleep(0)``: other tasks and callbacks run in between, the loop is never
blocked) and checks the Notifier's completion counter, a plain memory read,
draining only when it moved. Only when the spin window runs out does it
park on a future and leave the rest to the fd. The first AHEAD_MAX of the
window is spent before any watch, asking the driver alone (cuStreamQuery,
~0.9 µs): a tiny kernel ends a few µs after its launch returns, sooner than
a watch (~3.6 µs on an H200) is set up, and that watch was the gap left
between cudafd and the floor (bench/results/2026-11-30-h200). A wait
spinning ahead keeps its place on its stream, so another wait meanwhile is
not lone and does not watch before it (_aio_line). Measured on an H200 before
this path: a future-based await cost ~28 µs over the core's own detection
(bench/await_breakdown.py). The window adapts: it
grows while waits finish inside it and halves each time one does not, down
to off, with a short probe every SPIN_PROBE_EVERY waits. Long waits (a 2 ms
kernel) therefore turn it off and cost ~0 CPU; back-to-back short waits get
sleep(0)-polling latency without its endless CPU.
"""

from __future__ import annotations

import time

from ._aio_line import yield_once
from ._targets import Target

__all__ = ["InlineSpin"]

SPIN_MAX = 200e-6  # the longest loop-side spin window
SPIN_START = 100e-6
SPIN_MIN = 10e-6  # below this the window is off
AHEAD_MAX = 30e-6  # the part of the window spent before the watch is set up
SPIN_PROBE = 30e-6
SPIN_PROBE_EVERY = 64  # waits between probes while the window is off
TIGHT_MAX = 10e-6  # a lone wait's back-to-back queries before its first yield
TIGHT_PROBE_EVERY = 64  # lone waits between tries while back-to-back queries are off

_now = time.perf_counter
_PENDING = object()  # an inline wait not reported yet


class InlineSpin:
    """The spin methods of _aio.Dispatcher."""

    __slots__ = ()

    def _inline_window(self) -> float:
        """A lone wait's spin window in seconds (0: park on a future at once),
        once its window is off (under SPIN_MIN, _aio.Dispatcher.wait counts
        the waits in _since_probe): SPIN_PROBE every SPIN_PROBE_EVERY waits.

        Only a lone wait spins inline: with others pending, futures keep the
        waits on one stream resuming in the order they were started.
        """
        window = self._window
        if window >= SPIN_MIN:
            return window
        if self._since_probe < SPIN_PROBE_EVERY:
            return 0.0
        self._since_probe = 0
        return SPIN_PROBE

    def _spin_tight(self, t: Target) -> bool:
        """Ask the driver back to back, without yielding, for up to TIGHT_MAX
        (while that keeps paying): True once ``t`` is over (the window grows)."""
        if not self._tight:
            self._since_tight += 1
            if self._since_tight < TIGHT_PROBE_EVERY:
                return False
            self._since_tight = 0
        done_now = self._notifier._done_now
        deadline = _now() + TIGHT_MAX
        while not done_now(t):
            if _now() >= deadline:
                self._tight = False
                return False
        self._tight = True
        self._window_hit()
        return True

    async def _spin_ahead(self, t: Target, window: float) -> float:
        """Spin on the driver's answer alone, before any watch: a tiny kernel is
        over a few µs after its launch returned, sooner than a watch (event
        record, lock, queue: ~3.6 µs on an H200) would even be set up.

        Returns -1 once ``t`` is over (the window then grows), else the
        seconds spent (the caller watches and spins on for the rest). Kept
        short (AHEAD_MAX): the watch records at the stream's end *then*, so
        work other tasks enqueue meanwhile would be waited for too.
        """
        done_now = self._notifier._done_now
        inline = self._inline
        key = object()  # marks this wait as pending (not lone for others; _fail_all reaches it)
        inline[key] = _PENDING
        start = _now()
        deadline = start + window
        try:
            while True:
                await yield_once()
                failed = inline[key]
                if failed is not _PENDING:
                    raise failed  # type: ignore[misc]
                if done_now(t):
                    self._window_hit()
                    return -1.0
                now = _now()
                if now >= deadline:
                    return now - start
        finally:
            del inline[key]

    async def _wait_inline(self, token: int, t: Target, window: float) -> bool:
        """Spin for ``token`` by yielding to the loop; True once it is reported,
        or once the driver says the target is over (the wait is then dropped:
        with no other wait pending, nothing else depends on its report).

        Returns False when the window ran out (the caller then parks on a
        future); raises the wait's exception (CudaError, ClosedError).
        """
        inline = self._inline
        inline[token] = _PENDING
        deadline = _now() + window
        notifier = self._notifier
        done_now = notifier._done_now
        try:
            while True:
                result = inline[token]
                if result is not _PENDING:
                    del inline[token]
                    self._window_hit()
                    if result is None:
                        return True
                    raise result  # type: ignore[misc]
                seq = self._seq
                if seq is None or notifier._closed or seq.value != self._seen:
                    if seq is not None and not notifier._closed:
                        self._seen = seq.value  # read before draining: a later push is seen next time
                    if self._polling:
                        self._poll()
                    self._resolve(self._drain())
                    if inline[token] is not _PENDING:
                        continue
                if done_now(t):  # ahead of the core's own report
                    inline[token] = None
                    self._cancel(token)
                    continue
                if _now() >= deadline:
                    break
                await yield_once()
        except BaseException:
            if inline.pop(token, _PENDING) is _PENDING:
                self._cancel(token)  # cancelled while spinning: detach (GPU work goes on)
            raise
        del inline[token]
        self._window_missed()
        return False

    def _window_hit(self) -> None:
        """A lone wait ended inside its spin window: grow it by half, up to SPIN_MAX."""
        self._window = min(max(self._window, SPIN_PROBE) * 1.5, SPIN_MAX)

    def _window_missed(self) -> None:
        """A lone wait outlasted its spin window: halve it, down to off."""
        self._window = self._window / 2 if self._window >= SPIN_MIN else 0.0
