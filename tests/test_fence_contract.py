"""What a Fence promises whatever has been called on it before: its fd stays
readable once the point was passed, wait() takes every timeout that
threading.Event.wait takes, and the poll mechanism's fd turns readable by
itself, so a plain select() loop never sleeps past the point."""
from __future__ import annotations

import selectors
import threading
import time

import pytest

import cudafd
from support import REAL, RUNNING_S, prepare, readable, until

LONG_TIMEOUTS = [3e6, 1e300, 10**30, float("inf"), None]



@pytest.mark.parametrize("how", ["done", "wait", "result"])
def test_fence_fd_stays_readable_after_done(dev, mechanism, how):
    s = dev.stream()
    s.launch(0.02)
    with cudafd.fence(s, mechanism=mechanism) as f:
        assert f.wait(timeout=10)
        if how == "done":
            assert f.done()
        elif how == "result":
            assert f.result() is None
        else:
            assert f.wait(0)
        for _ in range(3):  # for good: however often it is asked
            assert f.done()
            assert readable(f.fileno(), 0), f"the fd went quiet after {how}() ({mechanism})"
        sel = selectors.DefaultSelector()
        sel.register(f.fileno(), selectors.EVENT_READ)
        try:
            assert sel.select(timeout=5), "a selector sleeps on a fence that is done"
            assert sel.select(timeout=5), "the second select sleeps"
        finally:
            sel.close()


@pytest.mark.skipif(REAL, reason="a fault ends CUDA for the process on a GPU: tests/test_faults.py runs faults in a subprocess")
def test_fence_fd_stays_readable_after_a_fault(dev, mechanism):
    s = dev.stream()
    s.launch(0.5)  # the fault comes after the fence is made, however loaded the machine
    s.launch(0.01, fault=True)
    with cudafd.fence(s, mechanism=mechanism) as f:
        with pytest.raises(cudafd.CudaError):
            f.wait(timeout=10)
        assert f.done()
        assert readable(f.fileno(), 0)


def test_fence_fd_is_readable_on_a_first_done(dev, mechanism):
    """done() called before anyone polled the fd: still readable after."""
    s = dev.stream()
    with cudafd.fence(s, mechanism=mechanism) as f:
        deadline = time.monotonic() + 10
        while not f.done():
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert readable(f.fileno(), 1)


@pytest.mark.parametrize("timeout", LONG_TIMEOUTS, ids=repr)
def test_fence_wait_takes_long_timeouts(dev, mechanism, timeout):
    s = dev.stream()
    s.launch(0.02)
    with cudafd.fence(s, mechanism=mechanism) as f:
        assert f.wait(timeout) is True
        assert f.wait(timeout) is True  # done already: at once


@pytest.mark.parametrize("timeout", LONG_TIMEOUTS, ids=repr)
def test_fence_long_wait_on_pending_work_is_not_cut_short(dev, mechanism, timeout):
    """A long timeout behind work that takes a while: it waits, then succeeds."""
    s = dev.stream()
    s.launch(0.3)
    with cudafd.fence(s, mechanism=mechanism) as f:
        assert f.wait(timeout) is True
        assert s.idle(), "wait() returned before the work ended"


@pytest.mark.parametrize("timeout", [0, 0.0, -1, -1e300, float("-inf"), 1e-9, float("nan")])
def test_fence_wait_takes_short_and_negative_timeouts(dev, mechanism, timeout):
    """As threading.Event.wait: zero, negative or NaN means look once."""
    assert threading.Event().wait(timeout) is False  # the reference accepts it
    s = dev.stream()
    s.launch(5.0)
    with cudafd.fence(s, mechanism=mechanism) as f:
        t0 = time.monotonic()
        assert f.wait(timeout) is False
        assert time.monotonic() - t0 < 2.5, "a wait that should look once slept"


@pytest.mark.parametrize("timeout", ["1", object(), [1]])
def test_fence_wait_rejects_what_threading_rejects(dev, mechanism, timeout):
    with pytest.raises((TypeError, ValueError)):
        threading.Event().wait(timeout)
    s = dev.stream()
    with cudafd.fence(s, mechanism=mechanism) as f:
        with pytest.raises((TypeError, ValueError)):
            f.wait(timeout)
        assert f.wait(10)


def test_fence_wait_timeout_is_kept(dev, mechanism):
    s = dev.stream()
    s.launch(5.0)
    with cudafd.fence(s, mechanism=mechanism) as f:
        t0 = time.monotonic()
        assert f.wait(0.1) is False
        took = time.monotonic() - t0
        assert 0.099 <= took < 2.5, f"wait(0.1) took {took:.3f} s"


def test_poll_fence_fd_becomes_readable_by_itself(dev):
    """A plain select() loop on a poll-mechanism fence, nothing else called:
    it wakes once the point was passed."""
    s = dev.stream()
    s.launch(0.5)  # still running at the first assert however loaded the machine
    with cudafd.fence(s, mechanism="poll") as f:
        fd = f.fileno()
        assert not readable(fd, 0)
        assert readable(fd, 10), "the poll fence's fd never became readable by itself"
        assert s.idle()
        assert f.done()
        assert f.result() is None
        assert readable(fd, 0)
        _helper_ends()
        assert readable(fd, 0)


@pytest.mark.skipif(REAL, reason="it ends with a fault, which ends CUDA for the process on a GPU")
def test_poll_notifier_fd_becomes_readable_by_itself(dev):
    s1, s2 = dev.stream(), dev.stream()
    with cudafd.Notifier("poll") as n:
        fd = n.fileno()
        s1.launch(0.03)
        t1 = n.watch(s1)
        assert readable(fd, 10), "the poll Notifier's fd never became readable by itself"
        assert [t for t, _ in n.drain()] == [t1]
        assert not readable(fd, 0)
        # later watches are found too, after the helper went idle
        _helper_ends()
        s2.launch(0.03)
        s1.launch(0.5)  # the fault comes after both watches, however loaded the machine
        s1.launch(0.01, fault=True)
        t2, t3 = n.watch(s2), n.watch(s1)
        got: dict[int, object] = {}
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            if readable(fd, 1):
                got.update(n.drain())
        assert set(got) == {t2, t3}
        assert isinstance(got[t3], cudafd.CudaError)
    _helper_ends()


def _helper_ends() -> None:
    """The poll helper thread ends once nothing is pending."""
    deadline = time.monotonic() + 10
    while any(t.name == "cudafd-poll" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the poll helper thread never ended"
        time.sleep(0.01)


def test_poll_fd_readable_in_a_plain_selector_loop_with_many_fences(dev):
    streams = [dev.stream() for _ in range(4)]
    for i, s in enumerate(streams):
        s.launch(0.01 * (i + 1))
    fences = [cudafd.fence(s, mechanism="poll") for s in streams]
    sel = selectors.DefaultSelector()
    try:
        for f in fences:
            sel.register(f.fileno(), selectors.EVENT_READ, f)
        left = set(fences)
        deadline = time.monotonic() + 10
        while left and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=1):
                f = key.data
                if f in left:
                    assert f.done()
                    left.discard(f)
                    sel.unregister(f.fileno())
        assert not left, f"{len(left)} poll fences never woke a selector"
    finally:
        sel.close()
        for f in fences:
            f.close()


@pytest.mark.skipif(REAL, reason="a destroyed handle is undefined behaviour in the real driver (a crash inside it, seen on the H200)")
def test_poll_prepare_refuses_a_dead_stream(dev):
    s = dev.stream()
    handle = s.handle
    dev.drv.cuStreamDestroy(handle)
    dev.streams.remove(s)
    with cudafd.Notifier("poll") as n:
        with pytest.raises(cudafd.CudaError):
            n.prepare(handle)
        with pytest.raises(cudafd.CudaError):
            n.prepare(0xDEAD0000)


@pytest.mark.skipif(REAL, reason="a destroyed handle is undefined behaviour in the real driver (a crash inside it, seen on the H200)")
def test_prepare_refuses_a_dead_stream_on_every_mechanism(dev, mechanism):
    s = dev.stream()
    handle = s.handle
    dev.drv.cuStreamDestroy(handle)
    dev.streams.remove(s)
    with cudafd.Notifier(mechanism) as n, pytest.raises(cudafd.CudaError):
        n.prepare(handle)


@pytest.mark.parametrize("mechanism", ["event", "hostfunc", "spin"])
def test_a_close_beside_a_done_keeps_its_success(dev, mechanism):
    """done() on this thread drains the fence's success; close() on another thread
    runs done() too, and may find the Notifier closed and nothing drained. The
    success stands: result() returns. The threads are held where a switch of the
    GIL would let the close's done() write ClosedError after the success."""
    from cudafd._core import fence as fence_mod
    from cudafd._core.notifier import Notifier

    s = dev.stream()
    s.launch(0.01)
    f = cudafd.fence(s, mechanism)
    s.synchronize()
    n = f._notifier
    assert readable(n._fd, 5)  # queued, not drained
    me = threading.get_ident()
    drained, closer_looks = threading.Event(), threading.Event()
    real_drain = n.drain

    def drain():
        out = real_drain()
        if threading.get_ident() == me and out:  # this thread's drain took the success
            drained.set()
            closer_looks.wait(0.5)  # the close's done() may look at the outcome meanwhile
        return out

    def close_once_drained():
        drained.wait(5)
        f.close()

    class Held(Notifier):
        @property
        def closed(self):  # the close's done(): found the outcome pending, about to write ClosedError
            if threading.get_ident() != me and not closer_looks.is_set():
                closer_looks.set()
                deadline = time.monotonic() + 0.5
                while f._outcome is fence_mod._PENDING and time.monotonic() < deadline:
                    time.sleep(0.001)
            return self._closed

    n.drain = drain
    n.__class__ = Held
    try:
        closer = threading.Thread(target=close_once_drained)
        closer.start()
        assert f.done() is True
        closer.join(10)
    finally:
        n.__class__ = Notifier
    assert f.result() is None


def test_a_close_on_another_thread_during_done_lets_the_fd_go(dev, mechanism):
    """close() on another thread lands between done()'s drain, which found the fence
    pending, and its look at whether the Notifier is closed. done() reports the
    ClosedError and takes the close's batch, so the fd and what the Notifier holds go
    now, as after any close(), not once the Fence is collected."""
    s = dev.stream()
    prepare(s, mechanism)
    s.launch(RUNNING_S)
    f = cudafd.fence(s, mechanism=mechanism)
    n = f._notifier
    real_drain = n.drain
    closers = []

    def drain():
        out = real_drain()
        if not closers:  # done()'s first drain, on this thread: the close lands now
            closer = threading.Thread(target=f.close)
            closers.append(closer)
            closer.start()
            assert until(lambda: n.closed), "the other thread's close() never closed the Notifier"
        return out

    n.drain = drain
    assert f.done() is True
    closers[0].join(10)
    assert not closers[0].is_alive()
    with pytest.raises(cudafd.ClosedError):
        f.result()
    assert (n.pending, n.statistics()["fd_open"]) == (0, 0), n.statistics()
    assert not s.idle(), "the close, not the GPU, ended the wait"
