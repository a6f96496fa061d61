"""Side streams: a long wait must not hold up the notification of other streams.

The hostfunc mechanism, and the event mechanism's waits on a caller's event,
put work on side streams of cudafd's own. A side stream runs in order, so a
wait that sits behind a long kernel there delays everything queued after it.
Each stream (or event) in flight therefore gets a side stream to itself while
one is free (up to 32 per context)."""
from __future__ import annotations

import pytest
from support import REAL, drain_until
from test_fence_notifier import destroy_event, record_event

import cudafd
from cudafd._core import driver as _driver

LONG_S = 30.0  # the long kernel: never waited out (the context's destruction at teardown ends it)
SHORT_S = 0.01


def _drain_all(n: cudafd.Notifier, tokens: set[int]) -> dict[int, object]:
    """What came back for each of ``tokens`` (token: exception or None), and
    whatever else came back meanwhile; AssertionError if one of them has not
    within 10 s of the one before it."""
    got: dict[int, object] = {}
    for token in tokens:
        if token not in got:
            got.update(drain_until(n, token))
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
    """Short waits on 19 streams, watched after a wait on a stream busy for
    LONG_S, all come back while that stream is still busy: none sat behind
    the long one on a side stream. The long wait is left pending: the
    Notifier's close detaches it and the teardown destroys the context."""
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

        streams[0].launch(LONG_S)
        long_token = watch(streams[0])
        short = set()
        for s in streams[1:]:
            s.launch(SHORT_S)
            short.add(watch(s))
        got = _drain_all(n, short)
        assert not streams[0].idle(), "the long kernel ended before the short waits came back: nothing was tested"
        assert long_token not in got, "the long wait came back before its kernel ended"
        assert all(got[t] is None for t in short), {t: got[t] for t in short if got[t] is not None}
    for ev in events:
        destroy_event(dev, ev)
