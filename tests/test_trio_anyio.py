"""trio and anyio: what the trio adapter does on its own. One task at a time
reads a Notifier's fd and hands the role on when it leaves; cancellation
detaches a wait (the GPU work goes on, nothing is left pending, the fd is
let go); close wakes every waiter with ClosedError, from any thread, and the
fd is released once the reader lets go; any number of tasks share one fd
(trio allows one waiter per fd); Fences, the per-run default Notifier, anyio
on both of its backends, the async library detected per call.

The cancel and close bodies that hold for every loop (a timeout that
detaches, close waking every pending waiter, close from another thread)
run under trio too, in test_cancel_close.py."""
from __future__ import annotations

import threading
import time
import warnings

import pytest
from support import MECHANISMS, REAL, RUNNING_S, prepare, run

import cudafd

trio = pytest.importorskip("trio")


def run_trio(mechanism, body):
    return run("trio", mechanism, body)


async def waits_in_nursery(n, fn):
    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(fn, i)


async def until(ready, what, timeout=10.0):
    """Sleep a millisecond at a time until ``ready()`` holds; returns in the step
    that saw it hold. AssertionError naming ``what`` after ``timeout`` s."""
    with trio.move_on_after(timeout):
        while not ready():
            await trio.sleep(0.001)
        return
    raise AssertionError(f"not within {timeout} s: {what}")


def not_cut_short(stream, launched_after, seconds):
    """False only if the kernel of ``seconds`` launched on ``stream`` after the
    monotonic time ``launched_after`` ended early: the stream is idle sooner
    than that. The stream is asked before the clock, so a loaded machine that
    delays this call can make it vacuous, never False."""
    idle = stream.idle()
    return not idle or time.monotonic() - launched_after >= seconds


def settled(n):
    """A Notifier's waits all gone: nothing pending, no wait in progress, no task on its fd."""
    stats = n.statistics()
    return (stats["pending"], stats["loop_busy"], stats["fd_holds"]) == (0, 0, 0)


# ---- cancellation -----------------------------------------------------------

def test_a_wait_in_a_cancelled_scope_leaves_at_its_first_checkpoint(dev, mechanism):
    """A wait on running work in an already cancelled scope raises Cancelled at
    once (trio's checkpoint), not when the work ends: it watches nothing, leaves
    no wait in progress (another run could use the Notifier) and the work runs
    on. On work already over: test_done_fast_path.py::test_trio_lone_wait_on_done_work_is_a_checkpoint."""
    s, after = dev.stream(), dev.stream()

    async def body(api):
        launched_after = time.monotonic()
        s.launch(RUNNING_S)
        for _ in range(3):
            with trio.CancelScope() as scope:
                scope.cancel()
                await api.wait(s)
                raise AssertionError("the wait returned inside a cancelled scope")
            assert scope.cancelled_caught
            assert settled(api.notifier), api.notifier.statistics()
        assert not_cut_short(s, launched_after, RUNNING_S), "the GPU work must not be cancelled"
        after.launch(0.001)
        with trio.fail_after(10):
            await api.wait(after)

    run_trio(mechanism, body)


def test_cancellation_storm(dev, mechanism):
    """Rounds of waits with deadlines of 1 to 81 ms on 1 s kernels beside waits
    that finish on kernels of 0.2 to 51 ms, then a whole nursery of waits on a
    kernel that outlasts the test, cancelled once some of them are parked:
    waits are cancelled before they watch, while parked and while reading the
    fd, and the reader leaves (cancelled or done) while others wait. No wait on
    a long kernel returns before its kernel's end, the others finish, nothing
    is left pending, no kernel is cut short."""
    slow = [dev.stream() for _ in range(5)]
    fast = [dev.stream() for _ in range(5)]
    parked = dev.stream()
    slow_s = 1.0  # 12x the longest deadline

    async def body(api):
        n = api.notifier
        launched_after = time.monotonic()
        for s in slow:
            s.launch(slow_s)
        outcomes = {"cancelled": 0, "done": 0}
        slow_returns = []  # seconds since the launch, of each wait on a long kernel that returned

        async def one(i):
            # The short kernels' waits get a deadline no machine reaches.
            streams = slow if i % 2 else fast
            with trio.move_on_after(0.001 * 3 ** (i % 5) if i % 2 else 30.0) as scope:
                await api.wait(streams[i % 5])
                if i % 2:
                    slow_returns.append(time.monotonic() - launched_after)
            outcomes["cancelled" if scope.cancelled_caught else "done"] += 1

        for _ in range(5):
            for j, s in enumerate(fast):
                s.launch(0.0002 * 4 ** j)
            await waits_in_nursery(200, one)
        parked.launch(RUNNING_S)
        async with trio.open_nursery() as nursery:
            for _ in range(100):
                nursery.start_soon(api.wait, parked)
            await until(lambda: n.statistics()["awaited"] >= 2, "two waits on the long kernel parked")
            nursery.cancel_scope.cancel()
        assert outcomes["cancelled"] > 0 and outcomes["done"] > 0, outcomes
        assert all(t >= slow_s for t in slow_returns), f"waits returned before their kernel's end: {slow_returns}"
        assert settled(n), n.statistics()
        assert all(not_cut_short(s, launched_after, slow_s) for s in slow), "the GPU work must not be cancelled"
        assert not parked.idle(), "the long kernel ended before its waits were cancelled"
        with trio.fail_after(30):
            await api.gather(*(api.wait(s) for s in fast))
        assert all(s.idle() for s in fast)
        assert settled(n), n.statistics()

    run_trio(mechanism, body)


@pytest.mark.parametrize("mechanism", [m for m in MECHANISMS if m != "spin"])  # (spin: no task reads the fd)
def test_the_readers_role_passes_on_when_it_is_cancelled_or_done(dev, mechanism):
    """One task at a time reads the fd. The reader is cancelled while two others
    wait: one of them takes over (else the second wait, whose kernel ends in a
    second, would never return); when that one's wait ends, the third, still
    waiting, holds the fd."""
    long_s, mid_s, last_s = dev.stream(), dev.stream(), dev.stream()

    async def body(api):
        n = api.notifier
        launched_after = time.monotonic()
        long_s.launch(RUNNING_S)
        mid_s.launch(1.0)  # ends after its wait has watched (milliseconds), before last_s's
        last_s.launch(2 * RUNNING_S)  # running when mid_s's wait returns (on a GPU, a second after)
        scopes = {"reader": trio.CancelScope(), "mid": trio.CancelScope(), "last": trio.CancelScope()}
        returned = []

        async def waiter(name, stream):
            with scopes[name]:
                await api.wait(stream)
                returned.append(name)

        def stats():
            return n.statistics()

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter, "reader", long_s)
                await until(lambda: (stats()["awaited"], stats()["fd_holds"]) == (1, 1), "the first wait reads the fd")
                nursery.start_soon(waiter, "mid", mid_s)
                await until(lambda: stats()["awaited"] == 2, "the second wait has watched")
                nursery.start_soon(waiter, "last", last_s)
                await until(lambda: stats()["awaited"] == 3, "the third wait has watched")
                scopes["reader"].cancel()  # in the step that saw all three pending
                await until(lambda: "mid" in returned, "the second wait returned: someone read the fd after the reader left")
                await until(lambda: (stats()["awaited"], stats()["fd_holds"]) == (1, 1), "the third wait reads the fd")
                scopes["last"].cancel()
        assert returned == ["mid"], returned
        assert scopes["reader"].cancelled_caught and scopes["last"].cancelled_caught
        assert settled(n), n.statistics()
        assert not_cut_short(long_s, launched_after, RUNNING_S) and not_cut_short(last_s, launched_after, 2 * RUNNING_S)

    run_trio(mechanism, body)


# ---- close ------------------------------------------------------------------

def test_close_from_another_thread_wakes_every_waiter_and_releases_the_fd(dev, mechanism):
    """close() on another thread reaches the run through its token: the task
    reading the fd (each mechanism's own; the poll mechanism's timer) and the
    parked ones get ClosedError, the fd, which the reader holds open meanwhile,
    is released once they have left, and the GPU work goes on. (One wait of the
    event mechanism, under every loop: test_cancel_close.py::test_close_from_another_thread.)"""
    s = dev.stream()

    async def body(api):
        n = api.notifier
        launched_after = time.monotonic()
        s.launch(RUNNING_S)
        closer = threading.Thread(target=n.close)
        outcomes = []

        async def one():
            try:
                await api.wait(s)
                outcomes.append("returned")
            except cudafd.ClosedError as exc:
                outcomes.append(exc)

        reading = int(mechanism != "spin")  # (spin: each task asks about its own wait; none reads the fd)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(one)
                await until(lambda: (n.statistics()["awaited"], n.statistics()["fd_holds"]) == (3, reading),
                            "three waits watched, one of them reading the fd")
                closer.start()
        closer.join(10)
        assert len(outcomes) == 3 and all(isinstance(o, cudafd.ClosedError) for o in outcomes), outcomes
        stats = n.statistics()
        assert (stats["pending"], stats["fd_holds"], stats["fd_open"]) == (0, 0, 0), stats
        assert not_cut_short(s, launched_after, RUNNING_S), "the GPU work must not be cancelled"

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
    assert all(n.closed and n.statistics()["fd_open"] == 0 for n in seen)


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
    """A wait in a second trio run is refused while the first run has one pending
    (one run's drain would take the other's tokens); a close from outside ends
    the first run's wait."""
    s1, s2 = dev.stream(), dev.stream()
    n = cudafd.Notifier()
    n.prepare(s1)
    first_outcome, failures = [], []

    async def first():
        try:
            await n.wait(s1)
            first_outcome.append("returned")
        except cudafd.ClosedError as exc:
            first_outcome.append(exc)

    launched_after = time.monotonic()
    s1.launch(RUNNING_S)  # pending while the second run tries, until the close
    thread = threading.Thread(target=lambda: trio.run(first))
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while n.statistics()["awaited"] == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert n.statistics()["awaited"] == 1, "the first run's wait never watched"

        async def second():
            s2.launch(0.001)
            try:
                await n.wait(s2)
            except cudafd.CudafdError as e:
                failures.append(e)

        trio.run(second)
    finally:
        n.close()  # from this thread: the first run's wait ends with ClosedError
        thread.join(10)
    assert not thread.is_alive()
    assert len(failures) == 1 and "another" in str(failures[0]), failures
    assert len(first_outcome) == 1 and isinstance(first_outcome[0], cudafd.ClosedError), first_outcome
    assert not_cut_short(s1, launched_after, RUNNING_S)


# ---- fences -------------------------------------------------------------------

def test_fence_awaited_by_several_tasks(dev, mechanism):
    """Five tasks await one Fence; one is cancelled while the kernel runs: only
    that one leaves, the other four return when the kernel ends."""
    s = dev.stream()
    prepare(s, mechanism)  # else, on a GPU, the fence's watch may wait out the kernel (support.prepare)

    async def main():
        s.launch(1.0)  # waited out: it only needs to outlast the steps up to the cancel (milliseconds)
        with cudafd.fence(s, mechanism=mechanism) as f:
            started, results = [], []
            first = trio.CancelScope()

            async def one(i):
                with (first if i == 0 else trio.CancelScope()) as scope:
                    started.append(i)  # and, in the same step, into the fence's wait
                    await f
                results.append("cancelled" if scope.cancelled_caught else "done")

            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    for i in range(5):
                        nursery.start_soon(one, i)
                    await until(lambda: len(started) == 5, "five tasks await the fence")
                    assert not s.idle(), "the kernel ended before the cancel"
                    first.cancel()
            assert sorted(results) == ["cancelled"] + ["done"] * 4, results
            assert s.idle()
            assert f._notifier.statistics()["fd_holds"] == 0  # every task let go of the fd
            await f  # done: returns at once

    trio.run(main)


def test_fence_closed_while_awaited(dev, mechanism):
    """close() wakes every task awaiting the Fence with ClosedError; its fd, which
    the reading task holds open meanwhile, is released once they have left; the
    GPU work goes on."""
    s = dev.stream()
    prepare(s, mechanism)

    async def main():
        launched_after = time.monotonic()
        s.launch(RUNNING_S)
        f = cudafd.fence(s, mechanism=mechanism)
        n = f._notifier
        started, outcomes = [], []

        async def one():
            started.append(None)  # and, in the same step, into the fence's wait
            try:
                await f
                outcomes.append("returned")
            except cudafd.ClosedError as exc:
                outcomes.append(exc)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(one)
                nursery.start_soon(one)
                await until(lambda: len(started) == 2, "two tasks await the fence")
                assert n.statistics()["fd_holds"] == 1, "no task reads the fence's fd"
                f.close()
        assert len(outcomes) == 2 and all(isinstance(o, cudafd.ClosedError) for o in outcomes), outcomes
        assert n.statistics()["fd_open"] == 0
        assert not_cut_short(s, launched_after, RUNNING_S), "the GPU work must not be cancelled"

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
    """anyio's task groups and cancel scopes on either backend: waits on a Notifier
    and on the default one finish; a wait cancelled by a scope once it has watched
    does not return, leaves nothing pending and the kernel running; a Fence is awaited."""
    anyio = pytest.importorskip("anyio")
    streams = [dev.stream() for _ in range(4)]
    busy = dev.stream()

    async def main():
        with cudafd.Notifier() as n:
            for s in streams:
                s.launch(0.002)
            async with anyio.create_task_group() as tg:
                for s in streams:
                    tg.start_soon(n.wait, s)
                    tg.start_soon(cudafd.wait, s)
            assert all(s.idle() for s in streams)

            launched_after = time.monotonic()
            busy.launch(RUNNING_S)
            scope = anyio.CancelScope()
            returned = []

            async def waiter():
                with scope:
                    await n.wait(busy)
                    returned.append(True)

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(waiter)
                    while n.statistics()["awaited"] == 0:
                        await anyio.sleep(0.001)
                    scope.cancel()
            assert scope.cancelled_caught and not returned, "the wait returned while its kernel ran"
            stats = n.statistics()
            assert (stats["pending"], stats["loop_busy"]) == (0, 0), stats
            assert not_cut_short(busy, launched_after, RUNNING_S), "the GPU work must not be cancelled"
            streams[0].launch(0.01)
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

        for kernel in (0.0, 0.005, 0.0, 0.02):
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
    prepare(s, mechanism)
    n = cudafd.Notifier(mechanism)

    async def main():
        launched_after = time.monotonic()
        s.launch(RUNNING_S)
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
        assert not_cut_short(s, launched_after, RUNNING_S), "the GPU work must not be cancelled"
        return n.statistics()

    after = trio.run(main)
    assert (after["pending"], after["fd_holds"], after["fd_open"]) == (0, 0, 0), after


def test_a_fence_handed_to_a_task_after_it_succeeded_and_closed_returns(dev, mechanism):
    """Two tasks await one Fence; the reader is cancelled and hands the reader's role
    to the other (rescheduled, not run yet); the first then finds the fence done and
    closes it, as leaving ``with cudafd.fence(s) as f:`` does, which releases its fd.
    The other task's await returns: the fence succeeded."""
    from trio.testing import wait_all_tasks_blocked

    s = dev.stream()
    prepare(s, mechanism)
    s.launch(0.2)
    got = {}

    async def main():
        f = cudafd.fence(s, mechanism=mechanism)
        scope = trio.CancelScope()

        async def first():
            with scope:
                await f  # the reader: it awaited first
            with warnings.catch_warnings():  # a blocking wait inside the run: the test's own doing
                warnings.simplefilter("ignore", RuntimeWarning)
                assert f.wait(10)
            f.close()

        async def second():
            try:
                await f
                got["second"] = "returned"
            except Exception as exc:  # noqa: BLE001 - what it raised is the finding
                got["second"] = exc

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(first)
                await wait_all_tasks_blocked()
                nursery.start_soon(second)
                await wait_all_tasks_blocked()
                scope.cancel()
        assert f.result() is None

    trio.run(main)
    assert got["second"] == "returned", got


def test_a_close_from_another_thread_between_a_drain_and_its_check_leaves_nothing(dev):
    """A poll Notifier's reader drains nothing (the kernel runs) and, before it looks
    whether the Notifier is closed, another thread closes it: the waiter gets
    ClosedError, and the close's batch is drained, so the Notifier keeps no fd and
    no pending wait."""
    from cudafd._loops import trio_run

    s = dev.stream()
    s.launch(RUNNING_S)
    n = cudafd.Notifier("poll")
    got = {}

    async def main():
        dispatcher = trio_run.dispatcher(n)
        real_drain, drains = dispatcher._drain, []

        def drain():
            out = real_drain()
            drains.append(out)
            if len(drains) == 2:  # the reader's second pump: nothing yet
                closer = threading.Thread(target=n.close)
                closer.start()
                closer.join()
            return out

        dispatcher._drain = drain
        try:
            with trio.fail_after(10):
                await n.wait(s)
        except cudafd.ClosedError as exc:
            got["exc"] = exc

    trio.run(main)
    assert isinstance(got.get("exc"), cudafd.ClosedError), got
    stats = n.statistics()
    assert (stats["fd_open"], stats["pending"]) == (0, 0), stats


@pytest.mark.parametrize("mechanism", ["event", "hostfunc", "poll"])  # (a spin wait's end is asked, not drained)
def test_a_failed_drain_fails_the_waiter_and_lets_its_wait_go(dev, mechanism):
    """The Notifier's drain fails under a trio reader: the waiting task gets that
    error, and its wait is let go (nothing pending is left behind in the Notifier)."""
    from cudafd._loops import trio_run

    s = dev.stream()
    prepare(s, mechanism)
    s.launch(0.5)  # running when the wait starts: no fast path
    n = cudafd.Notifier(mechanism)

    async def main():
        dispatcher = trio_run.dispatcher(n)

        def drain():
            raise cudafd.CudafdError("the drain failed")

        dispatcher._drain = drain
        with trio.fail_after(10), pytest.raises(cudafd.CudafdError, match="the drain failed"):
            await n.wait(s)

    try:
        trio.run(main)
        assert n.statistics()["pending"] == 0, n.statistics()
    finally:
        n.close()


# ---- KeyboardInterrupt ------------------------------------------------------

def sigint_once(real, flag):
    """``real`` that sends SIGINT to the process once, after it returned: trio's
    handler runs inside this call and raises KeyboardInterrupt here unless the
    frames calling it are KI-protected (then the main task gets it at its next
    checkpoint)."""
    import signal

    def call(*args):
        out = real(*args)
        if not flag:
            flag.append(1)
            signal.raise_signal(signal.SIGINT)
        return out

    return call


def needs_trios_sigint_handler():
    import signal

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("trio installs its SIGINT handler only over Python's default one")


@pytest.mark.parametrize("point", ["adapter_watch", "adapter_hold_fd"])
def test_a_keyboard_interrupt_inside_a_waits_bookkeeping_leaves_nothing(dev, point):
    """SIGINT arrives just after the wait's token is made (before the adapter keeps it)
    or just after the reader took a hold on the fd (before it keeps the fd): the run
    ends with KeyboardInterrupt, and the Notifier keeps no pending wait and no hold
    on its fd."""
    needs_trios_sigint_handler()
    s = dev.stream()
    s.launch(RUNNING_S)
    n = cudafd.Notifier("event")
    sent = []
    setattr(n, point, sigint_once(getattr(n, point), sent))

    async def main():
        with trio.fail_after(10):
            await n.wait(s)

    try:
        with pytest.raises(KeyboardInterrupt):
            trio.run(main)
        assert sent
        assert settled(n), n.statistics()
    finally:
        n.close()
    assert n.statistics()["fd_open"] == 0, n.statistics()


def test_a_keyboard_interrupt_in_the_readers_drain_loses_no_completion(dev):
    """SIGINT arrives just after the reader drained two tasks' completions, before it
    woke their tasks; the tasks catch KeyboardInterrupt around their waits. Each task
    returns (or gets the KeyboardInterrupt): none waits for a completion already
    drained, and nothing is left pending."""
    needs_trios_sigint_handler()
    from cudafd._loops import trio_run

    s = dev.stream()
    n = cudafd.Notifier("event")
    got, drained, sent = {}, [], []

    async def main():
        dispatcher = trio_run.dispatcher(n)
        real_drain = dispatcher._drain

        def drain():
            while not s.idle():  # both waits complete before this drain
                time.sleep(0.001)
            time.sleep(0.1)  # (the poller queues them within max_lateness)
            out = real_drain()
            drained.append(len(out))
            return out

        dispatcher._drain = sigint_once(drain, sent)

        async def one(i):
            try:
                with trio.fail_after(3):
                    await n.wait(s)
                got[i] = "returned"
            except KeyboardInterrupt:
                got[i] = "KeyboardInterrupt"
            except trio.TooSlowError:
                got[i] = "never woken"

        s.launch(0.05)
        try:
            async with trio.open_nursery() as nursery:
                for i in range(2):
                    nursery.start_soon(one, i)
                    await trio.lowlevel.checkpoint()
        except BaseException as exc:  # noqa: BLE001 - the KeyboardInterrupt, if the main task gets it
            got["main"] = type(exc).__name__

    try:
        try:
            trio.run(main)
        except KeyboardInterrupt:
            got["run"] = "KeyboardInterrupt"
        assert sent and drained[0] == 2, (sent, drained)
        assert "never woken" not in got.values(), got
        assert settled(n), n.statistics()
    finally:
        n.close()


def test_a_keyboard_interrupt_as_a_fence_waiter_takes_the_fd_leaves_no_hold(dev):
    """SIGINT arrives just after a task awaiting a Fence took a hold on its fd: the
    run ends with KeyboardInterrupt, and the fence's Notifier keeps no hold on it."""
    needs_trios_sigint_handler()
    s = dev.stream()
    s.launch(RUNNING_S)
    sent = []
    with cudafd.fence(s, mechanism="event") as f:
        n = f._notifier
        n.adapter_hold_fd = sigint_once(n.adapter_hold_fd, sent)

        async def main():
            with trio.fail_after(10):
                await f

        with pytest.raises(KeyboardInterrupt):
            trio.run(main)
        assert sent
        assert n.statistics()["fd_holds"] == 0, n.statistics()
