"""The blocking and sans-io surfaces: fences, notifiers, and their fds in a
plain selector loop."""
from __future__ import annotations

import select
import selectors
import threading
import time


import cudafd
from support import drain_until, prepare


def test_fence_fd_becomes_readable(dev, mechanism):
    s = dev.stream()
    prepare(s, mechanism)  # else the fence's watch may wait out the kernel (support.prepare)
    s.launch(0.5)  # still running at the first asserts however loaded the machine
    with cudafd.fence(s, mechanism=mechanism) as f:
        assert not f.done()
        if mechanism != "poll":  # the poll mechanism is driven by whoever waits
            p = select.poll()
            p.register(f.fileno(), select.POLLIN)
            assert p.poll(10) == []
            assert p.poll(10_000), "fence fd never became readable"
        assert f.wait(timeout=10)
        assert f.done()
        assert f.result() is None
        assert s.idle()


def test_fence_wait_releases_the_gil(dev, mechanism):
    s = dev.stream()
    s.launch(1.0)
    ticks = 0
    stop = threading.Event()

    def spin():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=spin)
    t.start()
    try:
        with cudafd.fence(s, mechanism=mechanism) as f:
            assert f.wait(timeout=10)
    finally:
        stop.set()
        t.join()
    assert ticks > 20, f"another thread ran only {ticks} times during a 1 s wait"


def test_fence_on_recorded_event(dev, mechanism):
    s = dev.stream()
    s.launch(0.02)
    ev = record_event(dev, s)
    s.launch(0.5)  # later work: not part of the event's record
    from cudafd._core import driver as _driver

    with _driver.pushed(dev.ctx):  # a bare CUevent waits in the current context
        f = cudafd.fence(ev, mechanism=mechanism)
    with f:
        assert f.wait(timeout=10)
    assert not s.idle()
    s.synchronize()
    destroy_event(dev, ev)


def test_notifier_in_a_selector_loop(dev, mechanism):
    """The pattern for programs with their own loop: register fileno(), drain
    on readiness. Many streams, one fd."""
    streams = [dev.stream() for _ in range(16)]
    with cudafd.Notifier(mechanism) as n:
        tokens = {}
        for i, s in enumerate(streams):
            s.launch(0.001 * (i % 4))
            tokens[n.watch(s)] = i
        done = {}
        sel = selectors.DefaultSelector()
        sel.register(n.fileno(), selectors.EVENT_READ)
        deadline = time.monotonic() + 10
        while len(done) < len(tokens) and time.monotonic() < deadline:
            if n.needs_polling:
                n.poll()
            sel.select(timeout=0.001 if n.needs_polling else 1)
            for tok, err in n.drain():
                assert err is None
                assert tok not in done, "a completion was reported twice"
                done[tok] = tokens[tok]
        sel.close()
        assert len(done) == len(tokens)
        assert n.pending == 0


def test_drain_after_readiness_is_exactly_once(dev):
    s = dev.stream()
    with cudafd.Notifier("event") as n:
        toks = []
        for _ in range(100):
            s.launch(0.0)
            toks.append(n.watch(s))
        s.synchronize()
        seen = []
        deadline = time.monotonic() + 5
        while len(seen) < 100 and time.monotonic() < deadline:
            select.select([n.fileno()], [], [], 1)
            seen += [t for t, _ in n.drain()]
        assert sorted(seen) == sorted(toks)
        r, _, _ = select.select([n.fileno()], [], [], 0.05)
        assert r == [], "fd readable with nothing queued"
        assert n.drain() == []


def test_cancel_then_nothing_reported(dev, mechanism):
    s = dev.stream()
    with cudafd.Notifier(mechanism) as n:
        s.launch(0.5)  # still running when cancelled however loaded the machine
        tok = n.watch(s)
        assert n.cancel(tok) is True
        assert n.cancel(tok) is False
        s.synchronize()
        later = n.watch(s)  # found after the cancelled wait would have been: a barrier
        assert [t for t, _ in drain_until(n, later)] == [later]
        assert n.pending == 0


def test_notifier_repr_and_closed_state(mechanism):
    n = cudafd.Notifier(mechanism)
    assert mechanism in repr(n)
    n.close()
    assert "closed" in repr(n) or "released" in repr(n)


def record_event(dev, stream):
    """A recorded event as a framework would hand it over: a cudafd.sim.Event
    on the simulator, a cuda.bindings CUevent on a GPU."""
    import ctypes

    from cudafd._core import driver as _driver

    ev = ctypes.c_void_p()
    with _driver.pushed(dev.ctx):
        _driver.check(dev.drv.cuEventCreate(ctypes.byref(ev), 0))
        _driver.check(dev.drv.cuEventRecord(ev.value, stream.handle))
    if dev.sim is not None:
        return cudafd.sim.Event(dev.sim, ev.value)
    from cuda.bindings import driver

    return driver.CUevent(ev.value)


def destroy_event(dev, ev):
    dev.drv.cuEventDestroy(int(ev.handle) if hasattr(ev, "handle") else int(ev))


def test_an_awaited_fence_dropped_without_close_is_freed_at_once(dev, loop_flavor, mechanism):
    """Awaiting a Fence leaves no reference cycle behind: dropped without close(), it and
    its Notifier (with the fd) go as soon as the last reference does, not at a later
    garbage collection."""
    import gc
    import weakref

    from support import run

    s = dev.stream()

    async def body(api):
        s.launch(0.001)
        f = cudafd.fence(s, mechanism=mechanism)
        await f
        return weakref.ref(f), weakref.ref(f._notifier)

    gc.collect()
    gc.disable()
    try:
        refs = run(loop_flavor, mechanism, body)
        assert [r() for r in refs] == [None, None]
    finally:
        gc.enable()


def _awaited_in_a_closed_loop(s, mechanism, seconds):
    """A Fence of ``seconds`` of work on ``s``, awaited by a task of a loop closed since:
    (the fence, the task, still pending and referenced)."""
    import asyncio

    loop = asyncio.new_event_loop()
    s.launch(seconds)
    f = cudafd.fence(s, mechanism=mechanism)

    async def awaiting():
        await f

    task = loop.create_task(awaiting())

    async def until_awaited():
        while f._notifier.statistics()["fd_holds"] == 0:
            await asyncio.sleep(0)

    loop.run_until_complete(until_awaited())
    loop.close()
    task._log_destroy_pending = False  # (it never ends: its loop is closed)
    return f, task


def test_a_fence_awaited_in_a_closed_loop_gives_the_fd_back_on_close(dev, mechanism):
    """A loop closed while a task it ran awaits a Fence, the program still holding the
    task: the Fence's close gives the fd back at once (nothing runs on that loop to do it)."""
    s = dev.stream()
    f, task = _awaited_in_a_closed_loop(s, mechanism, 0.5)
    f.close()
    after = f._notifier.statistics()
    assert (after["fd_holds"], after["fd_open"]) == (0, 0), after
    assert not task.done()
    s.synchronize()


def test_a_fence_awaited_in_a_closed_loop_can_be_awaited_in_the_next_one(dev, mechanism):
    """A loop closed while a task it ran awaits a Fence, the program still holding the
    task: another loop may await the Fence (nothing runs on the closed one any more), and
    the closed one's registration gives the fd back meanwhile."""
    import asyncio

    s = dev.stream()
    f, task = _awaited_in_a_closed_loop(s, mechanism, 0.2)

    async def again():
        await asyncio.wait_for(f, 10)
        return f._notifier.statistics()

    try:
        after = asyncio.run(again())
    finally:
        f.close()
    assert s.idle()
    assert after["fd_holds"] == 0, after
    assert not task.done()
