"""Lateness from GPU timing events: the host time a kernel ended, and how late its waiter resumed.

A kernel's end is read from a timing event recorded right after it on the
same stream: ``cuEventElapsedTime(ref, end)`` gives the GPU milliseconds
since a reference event. The reference is mapped to the host clock
(``time.perf_counter``) by recording it on an idle stream and querying it in
a tight loop: the GPU passed it after the last query that said "not yet"
began and before the first one that said "done" returned, so the midpoint of
those two host times is its host time, give or take half the bracket
(:func:`anchor`). Over the few seconds one anchor serves, the drift between
the GPU's and the host's clocks stays far below a microsecond per second, so
each round of a method takes a fresh anchor.

Lateness is the host time the awaiting coroutine resumed minus the kernel's
end, in µs (:func:`lateness_us`). Every sample of one method carries the same
anchor error, which a spin on the end event's query in the same rounds (the
same-thread spin floor) carries too: :func:`net` subtracts the floor's p50.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter

__all__ = ["anchor", "end_on_host", "lateness_us", "net"]


def anchor(done: Callable[[], bool], clock: Callable[[], float] = perf_counter, started: float | None = None):
    """Spin on ``done()`` (the reference event's query) until it is true.

    ``started``: the host time taken just before the reference was
    recorded (the GPU cannot pass it earlier); default: now. Returns
    ``(host_time, half_width)``: the midpoint of the bracket that holds the
    moment the GPU passed the reference, and half its width (the error bound).
    """
    lo = clock() if started is None else started
    while True:
        t = clock()
        if done():
            hi = clock()
            return (lo + hi) / 2, (hi - lo) / 2
        lo = t


def end_on_host(anchor_s: float, elapsed_ms: float) -> float:
    """The host time of an event ``elapsed_ms`` GPU milliseconds after the anchored reference."""
    return anchor_s + elapsed_ms / 1e3


def lateness_us(resumed_s: float, end_s: float) -> float:
    """How long after the kernel's end (host seconds) its waiter resumed, in µs (negative: before it)."""
    return (resumed_s - end_s) * 1e6


def net(stats: dict, floor_p50: float | None, digits: int = 2) -> dict | None:
    """``stats``' p50 and p99 minus the spin floor's p50 (the same shift for both); None without a floor."""
    if floor_p50 is None or stats.get("n", 0) == 0:
        return None
    return {q: round(stats[q] - floor_p50, digits) for q in ("p50", "p99")}
