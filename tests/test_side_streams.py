"""Side streams: a long wait must not hold up the notification of other streams.

The hostfunc mechanism, and the event mechanism's waits on a caller's event,
put work on side streams of cudafd's own. A side stream runs in order, so a
wait that sits behind a long kernel there delays everything queued after it.
Each stream (or event) in flight therefore gets a side stream to itself while
one is free (up to 32 per context)."""
from __future__ import annotations

import time

import pytest
from support import REAL
from test_fence_notifier import destroy_event, record_event

import cudafd
from cudafd._core import driver as _driver


def _collect(n: cudafd.Notifier, tokens: set[int], timeout: float) -> dict[int, float]:
    """When each token came back (monotonic seconds), within ``timeout``."""
    got: dict[int, float] = {}
    deadline = time.monotonic() + timeout
    while len(got) < len(tokens) and time.monotonic() < deadline:
        n.poll()
        for token, exc in n.drain():
            assert exc is None
            got[token] = time.monotonic()
        time.sleep(0.001)
    return got


# (the event mechanism watches a stream on that stream itself: no side stream)
@pytest.mark.skipif(
    REAL,
    reason="on a GPU, 20 user streams plus their side streams exceed CUDA_DEVICE_MAX_CONNECTIONS "
    "(8 hardware queues), so the long kernel holds up other streams' work itself; this checks "
    "cudafd's own side-stream assignment, which the simulator runs without that limit",
)
@pytest.mark.parametrize(("mechanism", "target"), [("hostfunc", "stream"), ("hostfunc", "event"), ("event", "event")])
def test_a_long_wait_does_not_hold_up_other_streams(dev, mechanism, target):
    streams = [dev.stream() for _ in range(20)]
    events = []
    with cudafd.Notifier(mechanism) as n:
        def watch(s):
            if target == "stream":
                return n.watch(s)
            ev = record_event(dev, s)
            events.append(ev)
            with _driver.pushed(dev.ctx):  # a bare CUevent waits in the current context
                return n.watch(ev)

        streams[0].launch(2.0)
        long_token = watch(streams[0])
        t0 = time.monotonic()
        short = set()
        for s in streams[1:]:
            s.launch(0.01)
            short.add(watch(s))
        got = _collect(n, short, 1.5)
        assert set(got) == short, f"{len(short) - len(got)} of {len(short)} short waits held up"
        assert max(got.values()) - t0 < 1.0
        assert long_token not in got
        assert _collect(n, {long_token}, 5.0)
    for ev in events:
        destroy_event(dev, ev)
