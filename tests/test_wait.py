"""Awaiting stream progress: one body per behaviour, run under every loop
flavor (asyncio, uvloop, trio, blocking) and every mechanism."""
from __future__ import annotations

import random
import time

import pytest

import cudafd
from cudafd._core import driver as _driver, kernels as _kernels
from support import REAL, run


def test_wait_returns_after_the_work(dev, flavor, mechanism):
    s = dev.stream()

    async def body(api):
        for seconds in (0.0, 0.002, 0.02):
            s.launch(seconds)
            await api.wait(s)
            assert s.idle(), "wait returned before the stream's work finished"

    run(flavor, mechanism, body)


@pytest.mark.parametrize("handle", [0, 1, 2], ids=["null", "legacy", "per-thread"])
def test_wait_on_a_default_stream(dev, flavor, mechanism, handle):
    """The current context's default streams, named by their handles (0 and 1: the legacy
    stream; 2: this thread's)."""
    drv = _driver.get()

    async def body(api):
        for seconds in (0.0, 0.002, 0.02):
            _kernels.launch_spin(handle, seconds)
            await api.wait(handle)
            assert drv.cuStreamQuery(handle) == 0, "wait returned before the default stream's work finished"

    with drv.current(dev.ctx):
        run(flavor, mechanism, body)


def test_wait_does_not_return_early_on_a_busy_stream(dev, flavor, mechanism):
    s = dev.stream()

    async def body(api):
        for _ in range(20):
            s.launch(0.001)
        s.launch(0.05)
        await api.wait(s)
        assert s.idle()

    run(flavor, mechanism, body)


def test_ordering_across_many_streams(dev, flavor, mechanism):
    """Hundreds of streams, thousands of waits: every wait completes, and on
    each stream in the order the points were marked."""
    streams = [dev.stream() for _ in range(200)]
    rounds = 10 if flavor != "blocking" else 2
    rng = random.Random(7)

    async def body(api):
        order: dict[int, list[int]] = {i: [] for i in range(len(streams))}

        async def one(i, k):
            await api.wait(streams[i])
            order[i].append(k)

        waits = []
        for k in range(rounds):
            for i, s in enumerate(streams):
                s.launch(rng.choice((0.0, 0.0001, 0.0005, 0.002)))
                waits.append(one(i, k))
        await api.gather(*waits)
        return order

    order = run(flavor, mechanism, body)
    for i, seen in order.items():
        assert seen == list(range(rounds)), f"stream {i}: completions out of order: {seen}"
    assert all(s.idle() for s in streams)


def test_threads_stay_under_the_cap(dev, mechanism):
    """Many long waits on many streams: native threads stay bounded. A thread
    samples the live counts from before the first wait until the last has
    returned (the core keeps no high-water mark); all 100 waits are in flight
    at once in one of the samples."""
    import asyncio
    import threading

    streams = [dev.stream() for _ in range(100)]
    peak_threads = peak_waits = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak_threads, peak_waits
        while True:
            done = stop.is_set()  # one more sample after the last wait returned
            s = cudafd.stats()
            peak_threads = max(peak_threads, s["threads"])
            peak_waits = max(peak_waits, s["pending"] + s["poll_events"])  # poll: the Python mechanism's
            if done:
                return
            time.sleep(0.0005)

    async def body(api):
        # The side streams first: made by the first watch, one of them would be the
        # context's 128th stream, which the simulator (and now and then a GPU) makes
        # only once the context's queued work is over, so that watch would wait out
        # the 100 kernels with no other wait in flight (test_stream_creation.py).
        api.notifier.prepare(streams[0])
        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            for s in streams:
                s.launch(0.5 if REAL else 2.0)  # outlasts the 100 launches and watches (an emulated CPU: 2 s)
            await asyncio.gather(*(api.wait(s) for s in streams))
        finally:
            stop.set()
            sampler.join()

    run("asyncio", mechanism, body)
    assert peak_waits == len(streams), f"at most {peak_waits} of the {len(streams)} waits were in flight at once"
    # cudafd's native threads are the poller (event, spin, syncfd) and hostfunc's watchdog
    assert peak_threads <= 2, f"{peak_threads} native threads for 100 pending waits"


def test_default_wait_uses_one_notifier_per_loop(dev, loop_flavor):
    s = dev.stream()

    async def body(api):
        s.launch(0.001)
        await cudafd.wait(s)
        before = cudafd.stats()["notifiers"]
        s.launch(0.001)
        await cudafd.wait(s)
        assert cudafd.stats()["notifiers"] == before
        assert s.idle()

    run(loop_flavor, "event", body)


@pytest.mark.asyncio_only
def test_waits_on_one_stream_return_in_start_order(dev, loop_flavor, mechanism):
    """Waits on one stream return in the order they started: A and B start in one
    pass, C in the next, in which A may find its short kernel over and end before B
    goes on (C must not watch ahead of B); work already over too. The sequence is
    tried at several kernel lengths, so that some round hits each case.
    trio: test_trio_anyio.py."""
    import asyncio

    s = dev.stream()

    async def body(api):
        returned = []

        async def one(i, late=False):
            if late:
                await asyncio.sleep(0)  # its wait starts a pass after the others'
            await api.wait(s)
            returned.append(i)

        for kernel in (0.0, 0.00002, 0.00005, 0.0001, 0.0003, 0.001):
            for _ in range(10):
                returned.clear()
                if kernel:
                    s.launch(kernel)
                tasks = [asyncio.ensure_future(one(0)), asyncio.ensure_future(one(2, late=True)),
                         asyncio.ensure_future(one(1))]
                await asyncio.gather(*tasks)
                assert returned == [0, 1, 2], (kernel, returned)

    run(loop_flavor, mechanism, body)
