"""trio and anyio: cancellation detaches a wait (the GPU work goes on,
nothing leaks), close wakes every waiter with ClosedError, any number of
tasks share one Notifier's fd (trio allows one waiter per fd), anyio works on
both of its backends, and the async library is detected per call."""
from __future__ import annotations

import threading
import time

import pytest
from support import REAL, run

import cudafd

trio = pytest.importorskip("trio")


def run_trio(mechanism, body):
    return run("trio", mechanism, body)


async def waits_in_nursery(n, fn):
    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(fn, i)


# ---- cancellation -----------------------------------------------------------

def test_move_on_after_detaches(dev, mechanism):
    s = dev.stream()

    async def body(api):
        s.launch(1.0)  # still running after the cancelled wait, under any load
        with trio.move_on_after(0.01) as scope:
            await api.wait(s)
        assert scope.cancelled_caught
        assert api.notifier.pending == 0
        assert not s.idle(), "the GPU work must not be cancelled"
        await api.wait(s)
        assert s.idle()

    run_trio(mechanism, body)


def test_an_already_cancelled_scope_detaches_at_once(dev, mechanism):
    """wait() is a checkpoint: in a cancelled scope it raises Cancelled, even for an idle stream."""
    s = dev.stream()

    async def body(api):
        for seconds in (0.0, 0.05):
            s.launch(seconds)
            with trio.CancelScope() as scope:
                scope.cancel()
                await api.wait(s)
            assert scope.cancelled_caught
            assert api.notifier.pending == 0
        await api.wait(s)

    run_trio(mechanism, body)


def test_fail_after_with_many_waiters(dev, mechanism):
    streams = [dev.stream() for _ in range(6)]

    async def body(api):
        t0 = time.monotonic()
        for s in streams:
            s.launch(1.0)  # outlasts every deadline below, under any load
        timed_out = 0

        async def one(i):
            nonlocal timed_out
            try:
                with trio.fail_after(0.002 * (1 + i % 4)):
                    await api.wait(streams[i % len(streams)])
            except trio.TooSlowError:
                timed_out += 1

        await waits_in_nursery(120, one)
        assert timed_out == 120
        assert api.notifier.pending == 0
        assert not any(s.idle() for s in streams)
        await api.gather(*(api.wait(s) for s in streams))
        assert all(s.idle() for s in streams)
        assert time.monotonic() - t0 >= 0.98, "the kernels must run to their end"

    run_trio(mechanism, body)


def test_cancellation_storm(dev, mechanism):
    """Rounds of waits with short deadlines, on long and on short kernels at
    once, plus a whole nursery cancelled mid-flight: some waits finish, the
    rest are detached, nothing is left pending, no kernel is cut short."""
    slow = [dev.stream() for _ in range(5)]
    fast = [dev.stream() for _ in range(5)]

    async def body(api):
        t0 = time.monotonic()
        for s in slow:
            s.launch(1.0)
        outcomes = {"cancelled": 0, "done": 0}

        async def one(i):
            # The short kernels' waits get a deadline no machine reaches, so some
            # waits finish however loaded it is; the long kernels outlast the
            # rounds, so the short deadlines on them cancel.
            streams = slow if i % 2 else fast
            with trio.move_on_after(0.001 * (1 + i % 5) if i % 2 else 30.0) as scope:
                await api.wait(streams[i % 5])
            outcomes["cancelled" if scope.cancelled_caught else "done"] += 1

        for _ in range(5):
            for s in fast:
                s.launch(0.0002)
            await waits_in_nursery(200, one)
        async with trio.open_nursery() as nursery:
            for i in range(100):
                nursery.start_soon(one, i)
            await trio.sleep(0.0005)
            nursery.cancel_scope.cancel()
        assert outcomes["cancelled"] > 0 and outcomes["done"] > 0, outcomes
        assert api.notifier.pending == 0
        await api.gather(*(api.wait(s) for s in slow + fast))
        assert all(s.idle() for s in slow + fast)
        assert time.monotonic() - t0 >= 0.98
        assert api.notifier.pending == 0

    run_trio(mechanism, body)


def test_reader_cancelled_or_done_hands_over(dev, mechanism):
    """The task reading the fd leaves (cancelled, or its own wait done) while
    others still wait: one of them takes over and every wait completes."""
    long_s, short_s, mid_s = dev.stream(), dev.stream(), dev.stream()

    async def body(api):
        long_s.launch(0.5)
        short_s.launch(0.01)
        mid_s.launch(0.05)
        finished = []

        async def waiter(name, stream):
            await api.wait(stream)
            finished.append(name)

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                reader_scope = trio.CancelScope()

                async def reader():
                    with reader_scope:
                        await api.wait(long_s)  # the first waiter: it reads the fd

                nursery.start_soon(reader)
                await trio.sleep(0.002)
                nursery.start_soon(waiter, "short", short_s)
                nursery.start_soon(waiter, "mid", mid_s)
                await trio.sleep(0.002)
                reader_scope.cancel()
        # (not in kernel order: with hostfunc, a stream hashed onto the long
        # one's side stream is notified only after it)
        assert sorted(finished) == ["mid", "short"]
        assert api.notifier.pending == 0
        await api.wait(long_s)

    run_trio(mechanism, body)


# ---- close ------------------------------------------------------------------

def test_close_wakes_every_waiter_with_closed_error(dev, mechanism):
    streams = [dev.stream() for _ in range(5)]

    async def body(api):
        for s in streams:
            s.launch(1.0)  # still running when the close lands, under any load
        errors = []

        async def one(i):
            try:
                await api.wait(streams[i % 5])
            except cudafd.ClosedError as e:
                errors.append(e)

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(one, i)
                await trio.sleep(0.01)
                api.notifier.close()
                api.notifier.close()  # idempotent
        assert len(errors) == 20
        with pytest.raises(cudafd.ClosedError):
            await api.wait(streams[0])
        with pytest.raises(cudafd.ClosedError):
            api.notifier.watch(streams[0])
        assert not any(s.idle() for s in streams), "the GPU work must not be cancelled"

    run_trio(mechanism, body)


def test_close_from_another_thread(dev, mechanism):
    s = dev.stream()

    async def body(api):
        s.launch(0.5)
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:

                async def one():
                    with pytest.raises(cudafd.ClosedError):
                        await api.wait(s)

                for _ in range(3):
                    nursery.start_soon(one)
                await trio.sleep(0.01)
                threading.Thread(target=api.notifier.close).start()

    run_trio(mechanism, body)


def test_default_notifier_is_per_run_and_closed_at_its_end(dev):
    from cudafd._loops import trio_run as _trio

    s = dev.stream()
    seen = []

    async def main():
        assert _trio.default_notifier() is None
        for _ in range(3):
            s.launch(0.001)
            await cudafd.wait(s)
            assert s.idle()
        seen.append(_trio.default_notifier())
        assert not seen[-1].closed

    trio.run(main)
    trio.run(main)
    assert seen[0] is not seen[1]
    assert all(n.closed for n in seen)


# ---- many waiters, one fd ------------------------------------------------------

def test_many_concurrent_waiters_share_one_fd(dev, mechanism):
    """2000 tasks wait at once on one Notifier (and more on the default one):
    trio would raise BusyResourceError if two of them waited on the fd."""
    streams = [dev.stream() for _ in range(50)]

    async def body(api):
        done = 0

        async def one(i):
            nonlocal done
            s = streams[i % len(streams)]
            s.launch((0.0, 0.0002, 0.001, 0.005)[i % 4])
            await (api.wait(s) if i % 10 else cudafd.wait(s))
            done += 1

        with trio.fail_after(30):
            await waits_in_nursery(2000, one)
        assert done == 2000
        assert api.notifier.pending == 0
        assert all(s.idle() for s in streams)

    run_trio(mechanism, body)


def test_a_notifier_serves_one_run_at_a_time(dev):
    s1, s2 = dev.stream(), dev.stream()
    n = cudafd.Notifier()
    failures = []

    async def first():
        s1.launch(1.0)  # still pending while the second run tries
        await n.wait(s1)

    thread = threading.Thread(target=lambda: trio.run(first))
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while n.pending == 0 and time.monotonic() < deadline:
            time.sleep(0.001)

        async def second():
            s2.launch(0.001)
            try:
                await n.wait(s2)
            except cudafd.CudafdError as e:
                failures.append(e)

        trio.run(second)
    finally:
        thread.join()
        n.close()
    assert len(failures) == 1 and "another" in str(failures[0])


# ---- fences -------------------------------------------------------------------

def test_fence_awaited_by_several_tasks(dev, mechanism):
    s = dev.stream()

    async def main():
        s.launch(0.5)  # outlasts the first task's 5 ms however loaded the machine
        with cudafd.fence(s, mechanism=mechanism) as f:
            results = []

            async def one(i):
                with trio.move_on_after(0.005 if i == 0 else 5) as scope:
                    await f
                results.append("cancelled" if scope.cancelled_caught else "done")

            await waits_in_nursery(5, one)
            assert sorted(results) == ["cancelled"] + ["done"] * 4
            assert s.idle()
            await f  # done: returns at once

    trio.run(main)


def test_fence_closed_while_awaited(dev, mechanism):
    s = dev.stream()

    async def main():
        s.launch(0.3)
        f = cudafd.fence(s, mechanism=mechanism)
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:

                async def one():
                    with pytest.raises(cudafd.ClosedError):
                        await f

                nursery.start_soon(one)
                nursery.start_soon(one)
                await trio.sleep(0.01)
                f.close()
        assert not s.idle()

    trio.run(main)


@pytest.mark.skipif(REAL, reason="a fault on a real GPU ends every context of the process")
def test_fault_under_trio_raises_cuda_error(mechanism):
    d = cudafd.sim.Device(1)
    try:
        s = d.stream()

        async def main():
            s.launch(0.05, fault=True)
            # from await (or from the watch, when a slow machine lets the fault come first)
            with pytest.raises(cudafd.CudaError) as info, cudafd.fence(s, mechanism=mechanism) as f:
                await f
            assert info.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
            with pytest.raises(cudafd.CudaError):
                await cudafd.wait(s)

        trio.run(main)
    finally:
        d.close()


# ---- anyio ----------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_anyio_on_both_backends(dev, backend):
    anyio = pytest.importorskip("anyio")
    streams = [dev.stream() for _ in range(4)]

    async def main():
        with cudafd.Notifier() as n:
            for s in streams:
                s.launch(0.002)
            async with anyio.create_task_group() as tg:
                for s in streams:
                    tg.start_soon(n.wait, s)
                    tg.start_soon(cudafd.wait, s)
            assert all(s.idle() for s in streams)

            streams[0].launch(0.2)
            with anyio.move_on_after(0.01) as scope:
                await n.wait(streams[0])
            assert scope.cancelled_caught
            assert n.pending == 0
            assert not streams[0].idle()
            with cudafd.fence(streams[0]) as f:
                await f
            assert streams[0].idle()

    anyio.run(main, backend=backend)


# ---- detection --------------------------------------------------------------------

def test_each_library_gets_its_adapter_directly(dev):
    """cudafd.wait() returns the adapter's own coroutine (no detection layer)."""
    import asyncio

    from cudafd._loops import asyncio_loop as _aio, trio_run as _trio

    s = dev.stream()

    async def under_asyncio():
        coro = cudafd.wait(s)
        assert coro.cr_code is _aio.Dispatcher.wait.__code__
        await coro

    async def under_trio():
        coro = cudafd.wait(s)
        assert coro.cr_code is _trio.Dispatcher.wait.__code__
        await coro

    asyncio.run(under_asyncio())
    trio.run(under_trio)


def test_an_unknown_library_is_refused_by_name(dev):
    sniffio = pytest.importorskip("sniffio")
    import asyncio

    s = dev.stream()

    async def main():
        token = sniffio.current_async_library_cvar.set("curio")
        try:
            with pytest.raises(cudafd.CudafdError, match="curio.*asyncio, uvloop, trio"):
                await cudafd.wait(s)
        finally:
            sniffio.current_async_library_cvar.reset(token)

    asyncio.run(main())


# ---- order ------------------------------------------------------------------

def test_waits_on_one_stream_return_in_start_order(dev, mechanism):
    """Tasks started one after another, each awaiting the same stream, return in
    that order, whatever order trio runs the tasks it wakes together in: on work
    already over (the fast path's checkpoint) and on running work."""
    s = dev.stream()

    async def body(api):
        returned = []

        async def one(i):
            await api.wait(s)
            returned.append(i)

        for kernel in (0.0, 0.0005, 0.0, 0.002):
            for _ in range(10):
                returned.clear()
                if kernel:
                    s.launch(kernel)
                async with trio.open_nursery() as nursery:
                    for i in range(8):
                        nursery.start_soon(one, i)
                        await trio.lowlevel.checkpoint()  # each task starts its wait before the next
                assert returned == sorted(returned), (kernel, returned)

    run_trio(mechanism, body)


def test_a_wait_cancelled_in_the_pass_its_notifier_closes_leaves_nothing(dev, mechanism):
    s = dev.stream()
    n = cudafd.Notifier(mechanism)

    async def main():
        s.launch(0.3)
        scope = trio.CancelScope()
        outcome = []

        async def waiter():
            with scope:
                try:
                    await cudafd.wait(s, notifier=n)
                except cudafd.ClosedError as exc:  # the close may win
                    outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            for _ in range(5):
                await trio.lowlevel.checkpoint()
            assert n.statistics()["awaited"] == 1
            n.close()
            scope.cancel()
        return n.statistics()

    after = trio.run(main)
    assert (after["pending"], after["fd_holds"], after["fd_open"]) == (0, 0, 0), after
    s.synchronize()
