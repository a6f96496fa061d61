"""A hostfunc watch never creates a stream under load.

Now and then (about every 128th stream of a process on an H200) a stream
creation blocks until the device has no work in flight, and every call into
the context, from any thread, waits behind it (bench/hostfunc_stall.py; the
simulator blocks at every 128th stream of a context). The hostfunc mechanism
takes a side stream per stream it watches at once, so its first watch in a
context makes them all: a later watch, behind however much work, never makes
one. The test brings the context to one stream short of the simulator's
boundary, holds waits behind a gate, and checks that no watch blocked."""
from __future__ import annotations

import cudafd
from support import REAL, first_watch
from test_host_notifications import SLOW_WATCH_S, _complete_in_order, _gate, _watch_all

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


def test_hostfunc_watches_make_no_stream_under_load(dev):
    streams = [dev.stream() for _ in range(40)]
    with cudafd.Notifier("hostfunc") as n:
        first_watch(n, streams[0])
        made = cudafd.stats()["streams"]
        assert made > 1, "the first watch made at most one side stream: nothing was tested"
        _pad_to_boundary(dev)
        with _gate(dev, streams) as closed:
            # 80 waits on 40 streams: made one by one, more side streams would cross the boundary
            order, slowest = _watch_all(n, streams, 2)
            assert slowest < SLOW_WATCH_S, f"a watch blocked {slowest:.2f} s on a stream creation"
            assert closed(), "the gate opened before the watches ended: nothing was tested"
            assert cudafd.stats()["streams"] == made, "a watch under load made a stream"
            _complete_in_order(n, order)
