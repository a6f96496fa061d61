"""The spin mechanism under asyncio and uvloop: the loop asks the streams of
its parked waits at every pass, and an idle stream ends its waits there
(cudafd/_loops/asyncio_loop.py, _Parked.ask_streams); whatever the loop's
ask does not end, the core reports as for any mechanism.
"""
from __future__ import annotations

import asyncio
import importlib.util

import pytest
from support import run

from cudafd._core.targets import Target
from cudafd._loops.asyncio_loop import _Parked

ASYNCIO_LOOPS = ["asyncio"] + (["uvloop"] if importlib.util.find_spec("uvloop") else [])


class _StubNotifier:
    """What _Parked uses of a spin Notifier, with the streams' answers set by the test."""

    mechanism = "spin"

    def __init__(self) -> None:
        self.idle: dict[int, bool] = {}
        self.asked: list[int] = []
        self.cancelled: list[int] = []

    def adapter_done_now(self, t: Target) -> bool:
        self.asked.append(t.handle)
        return self.idle.get(t.handle, False)

    def adapter_progress(self) -> int:
        return 0

    def adapter_poll(self) -> None:
        pass

    def adapter_drain(self) -> list:
        return []

    def cancel(self, token: int) -> bool:
        self.cancelled.append(token)
        return True


def test_an_idle_stream_ends_its_parked_waits_in_order_and_cancels_their_tokens():
    loop = asyncio.new_event_loop()
    try:
        n = _StubNotifier()
        p = _Parked(loop, n)  # type: ignore[arg-type]
        a1 = p.park(1, Target("stream", 0xA, None))
        b = p.park(2, Target("stream", 0xB, None))
        a2 = p.park(3, Target("stream", 0xA, None))
        ev = p.park(4, Target("event", 0xE, None))
        order: list[int] = []
        for token, fut in ((1, a1), (2, b), (3, a2), (4, ev)):
            fut.add_done_callback(lambda _f, token=token: order.append(token))

        p.spin_tick()
        assert not any(f.done() for f in (a1, b, a2, ev)), "a busy stream ended a wait"
        assert sorted(set(n.asked)) == [0xA, 0xB], "an event target was asked, or a stream was not"
        assert n.asked.count(0xA) == 1, "one stream was asked twice in one pass"

        n.idle[0xA] = True
        n.asked.clear()
        p.spin_tick()
        assert a1.done() and a2.done()
        assert n.cancelled == [], "the core's lock was taken before the resumed tasks ran"
        loop.run_until_complete(asyncio.sleep(0))  # the done callbacks, then the cancels, run
        assert a1.done() and a2.done() and not b.done() and not ev.done()
        assert order == [1, 3]
        assert n.cancelled == [1, 3], "the core would report the waits the loop ended"
        assert set(p.asks) == {2} and set(p.futures) == {2, 4}

        n.idle[0xB] = True
        p.spin_tick()
        loop.run_until_complete(asyncio.sleep(0))
        assert n.cancelled == [1, 3, 2]
        assert b.done() and not ev.done() and set(p.futures) == {4} and not p.asks
        assert p.timer is not None, "the spin callback stopped while a wait is parked"
        p.futures.pop(4).cancel()
        p.disarm()
    finally:
        loop.close()


@pytest.mark.parametrize("flavor", ASYNCIO_LOOPS)
def test_a_spin_wait_on_a_stream_kept_busy_ends_with_its_own_work(dev, flavor):
    """A wait whose stream gets more work after the wait began is not held until
    the stream is idle: the core reports its point, as for any mechanism."""
    s = dev.stream()

    async def body(api):
        n = api.notifier
        s.launch(0.05)
        waiter = asyncio.ensure_future(api.wait(s))
        while n.pending == 0:  # the wait watched: its point is behind the 50 ms kernel only
            await asyncio.sleep(0)
        s.launch(2.0)  # later work: the stream stays busy for 2 s more
        await waiter
        busy = not s.idle()
        s.synchronize()
        return busy

    assert run(flavor, "spin", body), "the wait ended only once the later work had"


@pytest.mark.parametrize("flavor", ASYNCIO_LOOPS)
def test_spin_waits_on_many_streams_all_end_and_leave_nothing(dev, flavor):
    streams = [dev.stream() for _ in range(6)]

    async def body(api):
        async def task(i, st):
            for r in range(15):
                st.launch(200e-6 * (1 + (i + r) % 4))
                await api.wait(st)
                assert st.idle()

        await asyncio.gather(*(task(i, st) for i, st in enumerate(streams)))
        return api.notifier.pending, api.notifier.statistics()

    pending, stats = run(flavor, "spin", body)
    assert pending == 0
    assert stats["awaited"] == 0 and stats["fd_holds"] == 0, stats
