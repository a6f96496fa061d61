"""Cancellation detaches a waiter (the GPU work goes on, nothing leaks);
closing a notifier wakes every pending waiter with ClosedError. Every loop:
cancellation is the loop's own (a timeout: asyncio.wait_for, trio.move_on_after;
or a task's cancel: Task.cancel, CancelScope.cancel)."""
from __future__ import annotations

import time

import pytest

import cudafd
from support import REAL, RUNNING_S, first_watch, prepare, run, until



def test_cancellation_storm(dev, loop_flavor, mechanism):
    streams = [dev.stream() for _ in range(20)]

    async def body(api):
        for s in streams:
            # running through the whole storm (up to 2.5 s on a loaded CPU with the simulator,
            # 0.6 s on an H100's host), so every wait in it times out
            s.launch(5.0 if REAL else RUNNING_S)
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
        assert outcomes == {"cancelled": 1000, "done": 0}
        assert api.notifier.pending == 0
        assert not any(s.idle() for s in streams), "the GPU work goes on"

    run(loop_flavor, mechanism, body)


def test_task_cancel_detaches(dev, loop_flavor, mechanism):
    """A wait cancelled once it has watched leaves nothing pending; its kernel goes
    on, and a later wait on the stream is answered when the kernel ends (the
    detached wait's record completes first, unreported)."""
    s = dev.stream()

    async def body(api):
        s.launch(1.0)  # waited out below; the steps that need it running take milliseconds
        # cancelled as soon as the wait has watched (pending), however long that takes
        assert await api.cancelled_when(lambda: api.notifier.pending == 1, api.wait(s)), \
            "the wait finished before it was cancelled"
        assert api.notifier.pending == 0
        assert not s.idle(), "the kernel ended before the wait was cancelled: nothing was detached"
        await api.wait(s)
        assert s.idle()

    run(loop_flavor, mechanism, body)


def test_close_wakes_every_pending_waiter(dev, loop_flavor, mechanism):
    streams = [dev.stream() for _ in range(5)]

    async def body(api):
        if api.notifier is not None:  # its side streams made now, so the watches below are quick
            first_watch(api.notifier, streams[0])
        for s in streams:
            s.launch(RUNNING_S)

        async def close():  # once every wait has watched, on streams still busy
            seen = await api.until(lambda: api.notifier.pending == 20), any(s.idle() for s in streams)
            api.notifier.close()
            api.notifier.close()  # idempotent
            return seen

        results = await api.settle(*(api.wait(s) for s in streams for _ in range(4)), close())
        assert results[-1] == (True, False), "not every wait was pending, on a busy stream, at the close"
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
        s.launch(RUNNING_S)
        closer = threading.Thread(target=api.notifier.close)

        async def close():  # once the wait has watched
            watched = await api.until(lambda: api.notifier.pending == 1)
            closer.start()
            return watched

        [outcome, watched] = await api.settle(api.within(10, api.wait(s)), close())
        closer.join(10)
        assert watched is True, "the wait never watched"
        assert isinstance(outcome, cudafd.ClosedError), outcome
        assert not s.idle(), "the close, not the GPU, ended the wait"

    run(loop_flavor, "event", body)


def test_fence_close_and_timeout(dev, mechanism):
    s = dev.stream()
    prepare(s, mechanism)  # else the fence's watch may wait out the kernel (support.prepare)
    s.launch(RUNNING_S)
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


def test_a_wait_cancelled_after_close_gives_the_fd_back(dev, mechanism):
    """cancel() of a token that close() reported drops its ClosedError, and with it
    the last reason to keep the fd: it is released at once, as by a drain."""
    s = dev.stream()
    prepare(s, mechanism)
    s.launch(RUNNING_S)
    n = cudafd.Notifier(mechanism)
    token = n.watch(s)
    n.close()
    assert n.cancel(token) is False  # finished (by the close), its result discarded
    assert (n.pending, n.statistics()["fd_open"]) == (0, 0), n.statistics()
    assert n.drain() == []
    assert not s.idle(), "the close, not the GPU, finished the wait"


def test_fence_wait_holds_its_fd_while_another_thread_closes_the_fence(dev, mechanism):
    """A thread sleeping in Fence.wait() holds the fd, so a close() from another thread
    cannot release the number (to be reused by another file under the sleeper's poll);
    the sleeper wakes with ClosedError and the fd goes once it lets go."""
    import threading

    s = dev.stream()
    prepare(s, mechanism)
    s.launch(RUNNING_S)
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
    assert until(lambda: n.statistics()["fd_holds"] == 1), "the sleeping wait() holds no fd"
    f.close()
    t.join(10)
    assert not t.is_alive() and isinstance(outcome[0], cudafd.ClosedError), outcome
    assert n.statistics()["fd_open"] == 0
    assert not s.idle(), "the close, not the GPU, ended the wait"


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
