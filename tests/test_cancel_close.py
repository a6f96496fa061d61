"""Cancellation detaches a waiter (the GPU work goes on, nothing leaks);
closing a notifier wakes every pending waiter with ClosedError. Every loop:
cancellation is the loop's own (asyncio.wait_for, trio.move_on_after)."""
from __future__ import annotations

import time

import pytest

import cudafd
from support import first_watch, prepare, run


def test_cancellation_storm(dev, loop_flavor, mechanism):
    streams = [dev.stream() for _ in range(20)]

    async def body(api):
        t0 = time.monotonic()
        for s in streams:
            s.launch(1.0)
        outcomes = {"cancelled": 0, "done": 0}
        for _ in range(5):
            waits = [api.within(0.001 * (1 + i % 5), api.wait(s)) for i, s in enumerate(streams) for _ in range(10)]
            for r in await api.settle(*waits):
                if r is True:
                    outcomes["done"] += 1
                elif r is False:
                    outcomes["cancelled"] += 1
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
        s.launch(2.0)
        seen = []

        async def look():  # until the wait has watched (a loaded machine may take a while), then once
            for _ in range(180):
                await api.sleep(0.005)
                if api.notifier.pending:
                    break
            seen.append(api.notifier.pending)

        finished, _ = await api.gather(api.within(1.0, api.wait(s)), look())
        assert seen == [1] and finished is False
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

        async def close():
            await api.sleep(0.01)
            api.notifier.close()
            api.notifier.close()  # idempotent

        results = await api.settle(*(api.wait(s) for s in streams for _ in range(4)), close())
        assert all(isinstance(r, cudafd.ClosedError) for r in results[:-1]), results
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

        async def close():
            await api.sleep(0.01)
            threading.Thread(target=api.notifier.close).start()

        [outcome, _] = await api.settle(api.within(5, api.wait(s)), close())
        assert isinstance(outcome, cudafd.ClosedError), outcome

    run(loop_flavor, "event", body)


def test_fence_close_and_timeout(dev, mechanism):
    s = dev.stream()
    prepare(s, mechanism)  # else the fence's watch may wait out the kernel (support.prepare)
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


def test_a_wait_cancelled_after_close_gives_the_fd_back(dev, mechanism):
    """cancel() of a token that close() reported drops its ClosedError, and with it
    the last reason to keep the fd: it is released at once, as by a drain."""
    s = dev.stream()
    s.launch(0.3)
    n = cudafd.Notifier(mechanism)
    token = n.watch(s)
    n.close()
    assert n.cancel(token) is False  # finished (by the close), its result discarded
    assert (n.pending, n.statistics()["fd_open"]) == (0, 0), n.statistics()
    assert n.drain() == []
    s.synchronize()


def test_fence_wait_holds_its_fd_while_another_thread_closes_the_fence(dev, mechanism):
    """A thread sleeping in Fence.wait() holds the fd, so a close() from another thread
    cannot release the number (to be reused by another file under the sleeper's poll);
    the sleeper wakes with ClosedError and the fd goes once it lets go."""
    import threading

    s = dev.stream()
    prepare(s, mechanism)
    s.launch(1.0)
    f = cudafd.fence(s, mechanism=mechanism)
    n = f._notifier
    outcome = []

    def waiter():
        try:
            outcome.append(f.wait())
        except cudafd.CudafdError as exc:
            outcome.append(exc)

    t = threading.Thread(target=waiter)
    t.start()
    deadline = time.monotonic() + 10
    while n.statistics()["fd_holds"] == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert n.statistics()["fd_holds"] == 1, "the sleeping wait() holds no fd"
    f.close()
    t.join(10)
    assert not t.is_alive() and isinstance(outcome[0], cudafd.ClosedError), outcome
    assert n.statistics()["fd_open"] == 0
    s.synchronize()


def test_a_cancelled_wait_is_never_reported_though_the_other_side_took_it(dev, mechanism):
    """A Notifier serving watch() and await at once: a finished watch() wait whose
    completion the loop adapter's drain kept for drain() is not reported once cancelled,
    and leaves nothing behind (the fd is not signalled for it again)."""
    s = dev.stream()
    n = cudafd.Notifier(mechanism)
    s.launch(0.01)
    token = n.watch(s)
    deadline = time.monotonic() + 10
    while not n._kept and time.monotonic() < deadline:  # the adapter's drain takes it, for drain()
        n.adapter_poll()
        assert n.adapter_drain() == []
        time.sleep(0.001)
    assert n._kept, "the adapter's drain never took the finished wait"
    assert n.cancel(token) is False  # finished: its result is discarded
    assert n.drain() == [] and n.pending == 0
    n.close()
    assert n.statistics()["fd_open"] == 0


def test_cancel_of_a_negative_number_does_nothing_even_reentered(dev):
    """No token is negative: cancel(-1) and cancel(-2) return False, also when called
    back from inside the Notifier's own locked section (a finalizer), where the call
    is put off and must not be taken for the Notifier's own deferred work."""
    n = cudafd.Notifier()
    n.adapter_hold_fd()
    with n._lock:  # as a finalizer run by a collection inside a Notifier call is
        assert n.cancel(-1) is False and n.cancel(-2) is False
    assert n.drain() == []  # the next call runs what was put off
    assert (n.closed, n.statistics()["fd_holds"]) == (False, 1)
    n.adapter_release_fd()
    n.close()
    assert n.statistics()["fd_open"] == 0
