"""The asyncio adapter's per-stream order, and its path for busy loops.

Busy loops: when many tasks each launch work and await it (64 streams each
looping over a 100 µs kernel), the loop thread is the bottleneck, and a
watch (an event record, the core's lock, a future, a drain, and a poller
thread spinning on a second core) costs more than the work it waits for.
A polling loop (``while not query(): await sleep(0)``) beat cudafd there:
49,000 awaits/s on one core against 43,700 on 1.9 (H200, asyncio,
bench/throughput_probe.py). So a wait that is not lone first yields once:
the other tasks run, and by then its work is usually over; one driver query
(cuStreamQuery, no event) says so, and it returns without a watch. Only a
wait still running then is watched. Measured the same way, that one yield
and query per await gave 58,900 awaits/s on one core. The query need not be
the loop's: before its yield a wait announces its point on the Dispatcher's
answer board (_board), whose native thread makes the query while the other
tasks run, and after the yield it reads the answer as a word of memory; only
a point not answered by then is queried on the loop's thread.

Whether that pays is learnt per Dispatcher (its _busy_credit): each wait
that tries it counts a hit (over after the yield: a credit, up to
BUSY_CREDIT_MAX) or a miss (watched after all: the yield and query were
spent for nothing, a credit less); with no credit left it is off, and
tried again every BUSY_PROBE_EVERY waits, so it stays on while at least
half the tries hit. A loop whose tasks await
long work (2 ms) therefore pays one yield and one query per
BUSY_PROBE_EVERY waits.

Order: waits on one stream resume in the order they were started. A wait
that returns without a watch may therefore do so only while no earlier
wait on its stream is pending (Line: the stream's pending waits, oldest
first), and a wait must not watch while an earlier one on its stream has
not watched yet (it is yielding, or spinning ahead of its watch), or its
record would come first and its wait resume first: it yields until they
have. Waits on events are independent of each other and take no part.
"""

from __future__ import annotations

import types
from collections import deque
from collections.abc import Generator

__all__ = [
    "BUSY_CREDIT_MAX",
    "BUSY_PROBE_EVERY",
    "LINES_KEEP",
    "Line",
    "Place",
    "UNBOUND",
    "WATCHED",
    "ahead_unwatched",
    "yield_once",
]

BUSY_CREDIT_MAX = 8  # hits banked against later misses
BUSY_PROBE_EVERY = 64  # waits between tries while the busy path is off
LINES_KEEP = 256  # empty lines kept (one per stream seen) before they are dropped


@types.coroutine
def yield_once() -> Generator[None, None, None]:
    """``await yield_once()``: let every other ready task run once, as
    ``await asyncio.sleep(0)`` does, without its function call."""
    yield


class Place:
    """One wait's place in its stream's Line. Places are equal only to
    themselves, so a wait that leaves its line (done, cancelled) takes out
    its own place and no other, whatever state the others are in."""

    __slots__ = ("unwatched",)

    def __init__(self, unwatched: bool = True) -> None:
        self.unwatched = unwatched  # True until the wait's record is in (it watched)


WATCHED = Place(False)  # the place of a wait that keeps none (not on a stream)


UNBOUND = -2  # a Line's board slot before the busy path first asks for one


class Line:
    """The waits pending on one stream, oldest first, and the stream's slot
    on the Dispatcher's answer board (_board; -1: none, UNBOUND: not asked yet)."""

    __slots__ = ("waits", "slot")

    def __init__(self) -> None:
        self.waits: deque[Place] = deque()
        self.slot = UNBOUND


def ahead_unwatched(line: Line, me: Place) -> bool:
    """True while a wait started before ``me`` on its stream has not watched yet."""
    for w in line.waits:
        if w is me:
            return False
        if w.unwatched:
            return True
    return False
