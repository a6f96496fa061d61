"""Cancellation detaches a waiter (the GPU work goes on, nothing leaks);
closing a notifier wakes every pending waiter with ClosedError."""
from __future__ import annotations

import asyncio
import time

import pytest

import cudafd
from support import first_watch, run


def test_cancellation_storm(dev, loop_flavor, mechanism):
    streams = [dev.stream() for _ in range(20)]

    async def body(api):
        t0 = time.monotonic()
        for s in streams:
            s.launch(1.0)
        outcomes = {"cancelled": 0, "done": 0}
        for _ in range(5):
            tasks = []
            for i, s in enumerate(streams):
                for _ in range(10):
                    tasks.append(asyncio.ensure_future(
                        asyncio.wait_for(api.wait(s), timeout=0.001 * (1 + i % 5))))
            for r in await asyncio.gather(*tasks, return_exceptions=True):
                if isinstance(r, (asyncio.TimeoutError, TimeoutError)):
                    outcomes["cancelled"] += 1
                elif r is None:
                    outcomes["done"] += 1
                else:
                    raise r
        assert outcomes["cancelled"] > 0
        await api.gather(*(api.wait(s) for s in streams))
        assert all(s.idle() for s in streams)
        # the GPU work was not cancelled: every 1 s kernel ran to its end
        assert time.monotonic() - t0 >= 0.95
        assert api.notifier.pending == 0

    run(loop_flavor, mechanism, body)


def test_task_cancel_detaches(dev, loop_flavor, mechanism):
    s = dev.stream()

    async def body(api):
        s.launch(0.2)
        task = asyncio.ensure_future(api.wait(s))
        await asyncio.sleep(0.01)
        assert api.notifier.pending == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert api.notifier.pending == 0
        assert not s.idle()
        await api.wait(s)

    run(loop_flavor, mechanism, body)


def test_close_wakes_every_pending_waiter(dev, loop_flavor, mechanism):
    streams = [dev.stream() for _ in range(5)]

    async def body(api):
        if api.notifier is not None:  # its side streams made now, so the watches below are quick
            first_watch(api.notifier, streams[0])
        for s in streams:
            s.launch(0.3)
        tasks = [asyncio.ensure_future(api.wait(s)) for s in streams for _ in range(4)]
        await asyncio.sleep(0.01)
        api.notifier.close()
        api.notifier.close()  # idempotent
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        assert all(isinstance(r, cudafd.ClosedError) for r in results), results
        with pytest.raises(cudafd.ClosedError):
            await api.wait(streams[0])
        with pytest.raises(cudafd.ClosedError):
            api.notifier.watch(streams[0])

    run(loop_flavor, mechanism, body)


def test_close_from_another_thread(dev, loop_flavor):
    import threading

    s = dev.stream()

    async def body(api):
        s.launch(0.5)
        task = asyncio.ensure_future(api.wait(s))
        await asyncio.sleep(0.01)
        threading.Thread(target=api.notifier.close).start()
        with pytest.raises(cudafd.ClosedError):
            await asyncio.wait_for(task, 5)

    run(loop_flavor, "event", body)


def test_fence_close_and_timeout(dev, mechanism):
    s = dev.stream()
    s.launch(0.2)
    f = cudafd.fence(s, mechanism=mechanism)
    assert f.wait(timeout=0.01) is False
    assert not f.done()
    with pytest.raises(cudafd.CudafdError):
        f.result()
    f.close()
    f.close()
    with pytest.raises(cudafd.ClosedError):
        f.wait(timeout=1)
    assert not s.idle()  # the GPU work goes on
    s.synchronize()
