"""How every event loop waits: the policy the loop adapters share, sans-io.

An adapter (cudafd/_loops/) only parks a task and wakes it; what it does
between ``cudafd.wait(target)`` and the park is decided here, the same for
asyncio, uvloop, trio and anyio. One :class:`WaitPolicy` belongs to one
adapter object (the waits of one Notifier in one loop or trio run). Its
``steps(notifier, t)`` is a generator the adapter runs: each ``None`` it
yields means "yield to the loop once, then go on"; an int is a token to park
on until a drain reports it; when it ends, the wait is over. The adapter
closes the generator when its wait ends, however it ends (return,
exception, cancellation), so the bookkeeping here is undone.

1. Fast path. A wait that starts while no other wait is in progress here
   and whose work is already over (one cuStreamQuery or cuEventQuery,
   Notifier.adapter_done_now) is over at once: no event is recorded and
   nothing is parked. One such wait in QUICK_YIELD_EVERY in a
   row yields to the loop anyway, so a task that launches tiny kernels and
   awaits them in a loop cannot starve the others; during that yield it
   counts as in progress on its stream, as a wait asking again does.
   A wait that starts while others are in progress (a busy loop) does not
   ask before it yields: its work was almost always launched just before
   (on the H200 a kernel was over when its launch returned in 19-65 of
   3000), and each ask is a driver query on the loop's thread (1.4 µs with
   32 hardware queues there, 3-4 µs per await with the Notifier's part),
   which a loop of tasks that launch and await would
   pay on every wait for nothing: on 64 streams of 100 µs kernels, in the
   same rounds, 0.90x the awaits per second of sleep(0) polling without it
   and 0.81x with it under asyncio, 0.85x and 0.83x under uvloop
   (docs/performance.md).
   Work already over then costs it one yield, as any await that yields.
   An adapter whose every await must yield (trio's checkpoint) makes its
   policy with ``fast_yields``: the fast path then always yields once, in
   progress on its stream as above.
2. Ask again. Otherwise a lone wait yields to the loop once and asks:
   a tiny kernel ends a few microseconds after its launch returns, sooner
   than any thread could be woken to tell the loop, and within one pass of
   an idle loop; in a busy loop the one yield lets the other tasks run,
   after which the work is often over and no watch is needed at all. Asking
   for longer costs the loop's CPU for nothing: on the H200 a 30 µs window
   of asks was later than one ask on 13 of 16 workloads, earlier on 3 by no
   more than the spread between runs, and up to 0.09 cores dearer
   (docs/performance.md).
3. Watch. Then it watches (Notifier.adapter_watch: the core records an event
   and its poller finds the end) and parks on the token.
4. Or asks until over. A Notifier whose tasks ask about their waits
   themselves (``adapter_asks``: the spin mechanism) is never parked on: the
   wait yields to the loop and asks about its token (Notifier.adapter_ask,
   one event query on the loop's thread) until it is over. The loop never
   sleeps, and the task resumes in the pass whose ask found the end, as a
   task polling an event of its own with ``sleep(0)`` does; a task resumed
   by someone else's callback would run a pass later. Of the waits asking
   on one target only the first (in watch order) asks, so they return in
   that order (for any loop: trio's too), one query per target per pass.

Order: the waits on one stream return in the order they started. Steps 1
and 2 apply only to a wait that is alone on its stream; the waits of a
stream that have not watched yet stand in a line in start order, and only
the first of it watches, or ends because its work is over (then only if
no earlier wait is still in progress). So a later wait never returns
ahead of an earlier one: the core completes one stream's watched waits in
order, and of the waits asking about themselves (step 4) only the first of
a target asks. Waits on events share one such line (key
-1) per adapter object. An adapter whose loop runs the tasks it wakes
together in no set order (trio) also keeps the watched waits of each target
in a :class:`Lane` and wakes a reported wait only when it is first in its
lane.

Asking again: the "poll" mechanism's backend (whose timer the loop adapters,
a Fence's blocking wait and its helper thread sleep on) asks about a wait it
did not find over again after :func:`ask_interval_ns` of the wait's age: 1/ASK_RATIO of it,
but not sooner than a quarter of the wait's budget (its Notifier's
max_lateness) nor later than the budget. The native core's poller uses the
same schedule (native/core/waiters.c, cfd_poll_interval). A wait is found
at most its budget after its work ended, plus the machine's wake-up time,
whatever the other waits do; docs/performance.md has the measurements.

Facts relied on: a stream runs its work in order, so a record completes no
later than any record made after it on the same stream; the adapters run
on their loop's thread only, so nothing here needs a lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from typing import Any

__all__ = ["ASK_RATIO", "QUICK_YIELD_EVERY", "Lane", "WaitPolicy", "ask_interval_ns"]

ASK_RATIO = 16  # a wait is asked again after 1/16 of its age (within a quarter of its budget and the budget)
QUICK_YIELD_EVERY = 8  # a yield after this many waits in a row that were over before they began


def ask_interval_ns(age_ns: int, budget_ns: int) -> int:
    """How long after asking about a wait of this age (ns) that was not over to ask again (ns)."""
    return min(max(age_ns // ASK_RATIO, budget_ns // 4), budget_ns)


class WaitPolicy:
    """The waits in progress of one adapter object, by stream (module docstring)."""

    __slots__ = ("_streams", "_unwatched", "_quick", "_asking", "_fast_yields")

    def __init__(self, fast_yields: bool = False) -> None:
        self._fast_yields = fast_yields  # the fast path yields once every time (trio's checkpoint)
        self._streams: dict[object, int] = {}  # stream key (steps; -1: events) -> its waits started and not over
        self._unwatched: dict[object, list] = {}  # stream key -> its waits that have not watched, in start order
        self._quick = 0  # waits in a row that were over before they began
        self._asking: dict[object, deque] = {}  # stream key or event handle -> tokens asking (step 4), in watch order

    def busy(self) -> bool:
        """True while a wait that went past the fast path is in progress."""
        return bool(self._streams)

    def asking_tokens(self) -> list[int]:
        """The tokens of the waits asking about themselves (step 4) now."""
        return [token for line in self._asking.values() for token in line]

    def steps(self, notifier: Any, t: Any) -> Generator[int | None, None, None]:
        """The steps of one wait on the resolved target ``t`` (module docstring): yields
        None (yield to the loop once) or a token (park until it is reported); ends when over."""
        # a stream's handle, with the context it names where it carries one (handle 0
        # names a default stream of every context); events share one key
        key = ((t.ctx, t.handle) if t.ctx else t.handle) if t.kind == "stream" else -1
        streams = self._streams
        lone = key not in streams
        if not streams and notifier.adapter_done_now(t):  # (busy: step 2 asks after the yield)
            self._quick += 1
            if self._quick < QUICK_YIELD_EVERY and not self._fast_yields:
                return
            self._quick = 0
            # Never starve the loop: yield once. Meanwhile this wait is in
            # progress on its stream, first in its line, so a later wait
            # there returns after it.
            streams[key] = 1
            unwatched = self._unwatched
            me = object()
            unwatched[key] = line = [me]  # (no wait was in progress: the line is new)
            try:
                yield None
            finally:
                line.remove(me)
                if not line:
                    del unwatched[key]
                self._leave(key)
            return
        self._quick = 0
        streams[key] = streams.get(key, 0) + 1  # from here on a later wait on the stream is not lone
        try:
            # last in the stream's line of waits that have not watched yet
            unwatched = self._unwatched
            me = object()
            line = unwatched.get(key)
            if line is None:
                unwatched[key] = line = [me]
            else:
                line.append(me)
            try:
                if lone:
                    yield None  # step 2: then ask again
                while line[0] is not me:  # an earlier wait watches (or ends) first
                    yield None
                if streams[key] == len(line) and notifier.adapter_done_now(t):  # none earlier in progress
                    return
                asks = notifier.adapter_asks
                if asks:  # (before the watch: a failure here leaves no wait behind)
                    lkey = notifier.adapter_stream_key(t) if t.kind == "stream" else t.handle
                token = notifier.adapter_watch(t)
            finally:
                line.remove(me)
                if not line:
                    del unwatched[key]
            if asks:
                line = self._asking.get(lkey)
                if line is None:
                    line = self._asking[lkey] = deque()
                try:
                    yield from _ask_until_over(notifier, token, line)
                finally:
                    if not line:
                        del self._asking[lkey]
            else:
                yield token
        finally:
            self._leave(key)

    def _leave(self, key: object) -> None:
        left = self._streams[key] - 1
        if left:
            self._streams[key] = left
        else:
            del self._streams[key]


def _ask_until_over(notifier: Any, token: int, line: deque) -> Generator[None, None, None]:
    """Step 4 of a Notifier whose waits their tasks ask about themselves (spin): yield,
    then ask about the wait (Notifier.adapter_ask) once it is first in ``line`` (the
    asking waits of its target, in watch order), until it is over; raise its error."""
    line.append(token)
    over = False
    try:
        while True:
            yield None
            if line[0] == token:
                over, exc = notifier.adapter_ask(token)
                if over:
                    if exc is not None:
                        raise exc
                    return
    finally:
        line.remove(token)
        if not over:  # cancelled or closed meanwhile (or the core failed): detach the wait
            notifier.cancel(token)


class Lane(deque):  # deque of the adapter's per-wait objects
    """The watched waits on one target, in watch order; only the first may return."""

    __slots__ = ("key",)

    def __init__(self, key: object) -> None:
        super().__init__()
        self.key = key
