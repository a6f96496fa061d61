"""A busy loop: many tasks each launching work and awaiting it (asyncio, uvloop).

A wait that is not lone yields once first; when its work is over by then (the
other tasks ran meanwhile) it returns without a watch, so neither an event
nor the poller's thread is spent on it (_aio_line). These tests pin down
that it does so when it pays and stops when it does not, that waits on one
stream still resume in the order they began, and that cancellation during
that yield leaves nothing behind (and the autouse no_leaks fixture).
"""
from __future__ import annotations

import asyncio

import pytest
from support import run

import cudafd
from cudafd import _aio, _aio_line

pytestmark = pytest.mark.asyncio_only


def _count_watches(notifier) -> dict:
    calls = {"watch": 0}
    real_watch, real_timed = notifier._watch, notifier._watch_timed

    def watch(t, unless_done):
        calls["watch"] += 1
        return real_watch(t, unless_done)

    def watch_timed(t):
        calls["watch"] += 1
        return real_timed(t)

    notifier._watch, notifier._watch_timed = watch, watch_timed
    return calls


def test_a_busy_loop_finds_most_waits_over_without_a_watch(dev, loop_flavor):
    streams = [dev.stream() for _ in range(16)]

    async def body(api):
        calls = _count_watches(api.notifier)
        before = cudafd.stats()

        async def worker(s):
            for _ in range(30):
                s.launch(10e-6)
                await api.notifier.wait(s)
                assert s.idle()

        await asyncio.gather(*(worker(s) for s in streams))
        after = cudafd.stats()
        awaits = 16 * 30
        assert calls["watch"] < awaits // 4, calls  # most never watched
        assert after["completed"] - before["completed"] == calls["watch"]  # the core saw only those
        assert _aio.dispatcher(asyncio.get_running_loop(), api.notifier)._busy_credit >= 0
        assert api.notifier.pending == 0

    run(loop_flavor, "event", body)


def test_long_waits_turn_the_busy_path_off(dev, loop_flavor):
    streams = [dev.stream() for _ in range(4)]

    async def body(api):
        d = _aio.dispatcher(asyncio.get_running_loop(), api.notifier)
        tries = {"n": 0}
        real_done_now = api.notifier._done_now

        def done_now(t):  # the busy path's query after its yield (lone waits ask too)
            if d._futures:
                tries["n"] += 1
            return real_done_now(t)

        api.notifier._done_now = done_now

        async def worker(s):
            for _ in range(20):
                s.launch(3e-3)
                await api.notifier.wait(s)

        await asyncio.gather(*(worker(s) for s in streams))
        awaits = 4 * 20
        assert d._busy_credit < 0  # off: a yield and a query per wait were not paying
        # a miss per task to turn it off (before the first miss lands), then one try per probe
        assert tries["n"] <= 4 + awaits // _aio_line.BUSY_PROBE_EVERY + 1, tries

    run(loop_flavor, "event", body)


def test_waits_on_one_stream_resume_in_order_in_a_busy_loop(dev, loop_flavor):
    shared = dev.stream()
    others = [dev.stream() for _ in range(8)]

    async def body(api):
        started, resumed = [], []

        async def on_shared(name, n):
            for i in range(n):
                shared.launch(20e-6 * (1 + (i % 3)))
                started.append((name, i))
                await api.notifier.wait(shared)
                resumed.append((name, i))

        async def busy(s):
            for _ in range(40):
                s.launch(10e-6)
                await api.notifier.wait(s)

        await asyncio.gather(on_shared("a", 30), on_shared("b", 30), *(busy(s) for s in others))
        assert sorted(resumed) == sorted(started)
        assert resumed == started  # one stream: resumed in the order the waits began
        assert api.notifier.pending == 0

    run(loop_flavor, "event", body)


def test_cancelling_a_wait_during_its_yield_leaves_nothing(dev, loop_flavor):
    streams = [dev.stream() for _ in range(3)]

    async def body(api):
        d = _aio.dispatcher(asyncio.get_running_loop(), api.notifier)
        streams[0].launch(0.05)
        parked = asyncio.ensure_future(api.notifier.wait(streams[0]))  # so the next is not lone
        await asyncio.sleep(0)
        streams[1].launch(0.05)
        task = asyncio.ensure_future(api.notifier.wait(streams[1]))
        await asyncio.sleep(0)  # task is in its one yield now
        assert d._joined >= 1 and not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await parked
        assert d._joined == 0 and not any(line.waits for line in d._lines.values())
        assert api.notifier.pending == 0
        streams[1].synchronize()

    run(loop_flavor, "event", body)
