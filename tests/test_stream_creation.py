"""A watch never creates a stream under load.

About every 128th stream a process creates blocks until the device has no
work in flight, and every call into the context, from any thread, waits
behind it (bench/hostfunc_stall.py on an H200; the simulator blocks at every
128th stream of a context). The core's side streams are therefore made all
at once, at the first watch in a context that needs them (hostfunc: its side
streams; event: the blocking waiters' bridges; a wait on a caller's event:
the side streams): a later watch, behind however much work, never makes one.
Each test brings the context to one stream short of the
simulator's boundary, holds waits behind a gate, and checks that no watch
blocked."""
from __future__ import annotations

import time

import cudafd
from cudafd import _driver
from support import REAL, first_watch
from test_fence_notifier import destroy_event, record_event
from test_host_notifications import SLOW_WATCH_S, _complete_in_order, _gate

BOUNDARY = 128  # the simulator's CUDAFDSIM_STREAM_BLOCK


def _pad_to_boundary(dev, made_by_gate: int = 1) -> None:
    """Create streams until the next one the context makes after the gate's
    is the simulator's blocking one (on a GPU: another 100, a boundary or not)."""
    if REAL:
        for _ in range(100):
            dev.stream()
        return
    while len(dev.streams) + cudafd.stats()["streams"] + made_by_gate < BOUNDARY - 1:
        dev.stream()


def _no_stream_made_under_load(dev, mechanism: str, target, per_stream: int) -> None:
    """Watches of ``target(stream)`` on 40 streams behind a gate, one stream
    short of the boundary, after one warm-up wait of the same kind."""
    streams = [dev.stream() for _ in range(40)]
    with cudafd.Notifier(mechanism) as n:
        with _driver.pushed(dev.ctx):
            first_watch(n, target(streams[0]))
        made = cudafd.stats()["streams"]
        assert made > 0, "the first wait made no side stream: nothing was tested"
        _pad_to_boundary(dev)
        with _gate(dev, streams) as closed:
            order, slowest = [], 0.0
            for _ in range(per_stream):
                for i, s in enumerate(streams):
                    what = target(s)
                    t0 = time.monotonic()
                    with _driver.pushed(dev.ctx):  # (an event's context must be current)
                        order.append((n.watch(what), i))
                    slowest = max(slowest, time.monotonic() - t0)
            assert slowest < SLOW_WATCH_S, f"a watch blocked {slowest:.2f} s on a stream creation"
            assert closed(), "the gate opened before the watches ended: nothing was tested"
            assert cudafd.stats()["streams"] == made, "a watch under load made a stream"
            _complete_in_order(n, order)


def test_hostfunc_watches_make_no_stream_under_load(dev):
    # 80 waits on 40 streams: made one by one, more side streams would have crossed the boundary
    _no_stream_made_under_load(dev, "hostfunc", lambda s: s, 2)


def test_event_target_watches_make_no_stream_under_load(dev):
    """A wait on a caller's event takes a side stream too (the side stream waits for the event)."""
    events: list = []

    def recorded(s):
        events.append(record_event(dev, s))
        return events[-1]

    try:
        _no_stream_made_under_load(dev, "event", recorded, 1)
    finally:
        for ev in events:
            destroy_event(dev, ev)
