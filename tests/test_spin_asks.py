"""The spin mechanism under asyncio and uvloop: the loop asks the core about
its parked waits at every pass (Notifier.adapter_ask, cudafd_ask), and the
core's poller, told so by the claim (asks=True), backs it up on the event
schedule instead of spinning (cudafd/_loops/asyncio_loop.py, native/core/ask.c).
"""
from __future__ import annotations

import asyncio
import importlib.util
import time

import pytest
from support import REAL, run

import cudafd
from cudafd._core.errors import CudafdError
from cudafd._loops.asyncio_loop import _Parked

ASYNCIO_LOOPS = ["asyncio"] + (["uvloop"] if importlib.util.find_spec("uvloop") else [])
LATE_S = 5.0  # a max_lateness whose poller asks first after 1.25 s: an earlier end is the loop's ask


class _Owner:
    def busy(self) -> bool:
        return True


def _queries_during_unasked_wait(dev, asks: bool) -> int:
    """The core's queries while one spin wait on a 300 ms kernel runs and nothing but the poller asks."""
    s = dev.stream()
    with cudafd.Notifier("spin") as n:
        owner = _Owner()
        n.adapter_claim(owner, asks=asks)
        s.launch(0.3)
        before = cudafd.stats()["queries"]
        token = n.watch(s)
        s.synchronize()
        during = cudafd.stats()["queries"] - before
        deadline = time.monotonic() + 10
        while token not in {t for t, _ in n.drain()}:  # the poller finds it either way
            assert time.monotonic() < deadline, "a wait left to its caller's asks was never found"
            time.sleep(0.001)
    return during


def test_a_spin_notifier_left_to_its_loop_is_not_spun_on(dev):
    """While the loop asks (the claim's asks=True), the poller asks on the event
    schedule (~800 queries over 300 ms), not in every round."""
    asked = _queries_during_unasked_wait(dev, asks=True)
    spun = _queries_during_unasked_wait(dev, asks=False)
    assert asked < 2000, f"{asked} queries: the poller spun on a wait its loop asks about"
    assert spun > 5 * asked, f"spinning made {spun} queries against {asked}: the count shows nothing"


def test_the_spin_callback_asks_at_every_pass_and_a_failed_ask_fails_the_waits():
    class Stub:
        mechanism = "spin"

        def __init__(self) -> None:
            self.asks = 0
            self.broken = False

        def adapter_ask(self) -> list:
            self.asks += 1
            if self.broken:
                raise CudafdError("the core failed")
            return []

        def adapter_poll(self) -> None:
            pass

        def adapter_drain(self) -> list:
            return []

        def cancel(self, token: int) -> bool:
            return True

    loop = asyncio.new_event_loop()
    try:
        n = Stub()
        p = _Parked(loop, n)  # type: ignore[arg-type]
        fut = p.park(7)
        loop.run_until_complete(asyncio.sleep(0.01))
        assert n.asks > 1 and not fut.done(), "the loop did not ask at every pass"
        n.broken = True
        loop.run_until_complete(asyncio.sleep(0.01))
        assert fut.done() and isinstance(fut.exception(), CudafdError), "a failed ask left the wait hanging"
        assert p.timer is None and not p.futures
    finally:
        loop.close()


async def _timed_wait(s, n, seconds: float) -> tuple[float, bool]:
    s.launch(seconds)
    t0 = time.monotonic()
    await cudafd.wait(s, notifier=n)
    return time.monotonic() - t0, s.idle()


@pytest.mark.parametrize("flavor", ASYNCIO_LOOPS)
def test_the_loops_ask_ends_a_spin_wait_before_the_poller_would(dev, flavor):
    s = dev.stream()

    async def body(api):
        with cudafd.Notifier("spin", max_lateness=LATE_S) as n:
            return [await _timed_wait(s, n, 0.02) for _ in range(3)]

    for took, idle in run(flavor, "spin", body):
        assert idle, "a wait ended before its work"
        assert took < LATE_S / 4, f"the wait took {took:.3f} s: nothing but the poller found it"


@pytest.mark.parametrize("flavor", ASYNCIO_LOOPS)
def test_a_spin_wait_on_a_stream_kept_busy_ends_with_its_own_work(dev, flavor):
    """A wait whose stream gets more work after the wait began ends with its own
    point, found by the loop's ask (its event), not once the stream is idle."""
    s = dev.stream()

    async def body(api):
        with cudafd.Notifier("spin", max_lateness=LATE_S) as n:
            s.launch(0.05)
            t0 = time.monotonic()
            waiter = asyncio.ensure_future(cudafd.wait(s, notifier=n))
            while n.pending == 0:  # the wait watched: its point is behind the 50 ms kernel only
                await asyncio.sleep(0)
            s.launch(3.0)  # later work: the stream stays busy for 3 s more
            await waiter
            took, busy = time.monotonic() - t0, not s.idle()
            s.synchronize()
            return took, busy

    took, busy = run(flavor, "spin", body)
    assert busy, "the wait ended only once the later work had"
    assert took < LATE_S / 4, f"the wait took {took:.3f} s: the loop's ask did not find it"


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


@pytest.mark.skipif(REAL, reason="a fault poisons the GPU's primary context: test_faults runs real faults in subprocesses")
@pytest.mark.parametrize("flavor", ASYNCIO_LOOPS)
def test_a_fault_reaches_a_spin_wait_through_the_loops_ask(dev, flavor):
    s = dev.stream()

    async def body(api):
        with cudafd.Notifier("spin", max_lateness=LATE_S) as n:
            s.launch(0.01, fault=True)
            t0 = time.monotonic()
            with pytest.raises(cudafd.CudaError):
                await cudafd.wait(s, notifier=n)
            return time.monotonic() - t0

    took = run(flavor, "spin", body)
    assert took < LATE_S / 4, f"the fault took {took:.3f} s to reach the wait"
