"""Work that is already over: the one-query fast path of a lone wait.

A lone wait first asks the driver whether its target has finished; if so it
returns without recording an event or suspending (asyncio), or with a bare
checkpoint (trio). These tests pin down when the shortcut may be taken and
that it never hides a fault or starves the loop."""
from __future__ import annotations

import time

import pytest
from support import REAL, RUNNING_S, drain_until, run
from test_fence_notifier import destroy_event, record_event

import cudafd
from cudafd._core import driver as _driver, lib as _lib, policy
from cudafd._core.targets import resolve



def _event_handle(ev) -> int:
    return int(ev.handle) if hasattr(ev, "handle") else int(ev)


def test_core_queries(dev):
    lib = _lib.load()
    busy, over = dev.stream(), dev.stream()
    assert lib.cudafd_stream_done(busy.handle) == 1
    busy.launch(RUNNING_S)  # running at every query of it below
    assert lib.cudafd_stream_done(busy.handle) == 0
    ev = record_event(dev, busy)
    assert lib.cudafd_event_done(_event_handle(ev)) == 0
    destroy_event(dev, ev)
    over.launch(0.01)
    ev = record_event(dev, over)
    over.synchronize()
    assert lib.cudafd_stream_done(over.handle) == 1
    assert lib.cudafd_event_done(_event_handle(ev)) == 1
    destroy_event(dev, ev)
    assert lib.cudafd_event_done(0) == 0  # NULL is checked before the driver sees it


@pytest.mark.skipif(REAL, reason="a made-up handle is undefined behaviour in the real driver")
def test_core_queries_of_a_made_up_handle():
    # "not known to be done": the watch that follows reports the bad handle
    lib = _lib.load()
    assert lib.cudafd_stream_done(0xDEAD0000) == 0
    assert lib.cudafd_event_done(0xDEAD0000) == 0


def test_done_now_answers_without_a_wait(dev, mechanism):
    s = dev.stream()
    with cudafd.Notifier(mechanism) as n:
        assert n.adapter_done_now(resolve(s)) is True
        assert n.pending == 0
        s.launch(0.5)  # waited out below; running at the next line, microseconds on
        assert n.adapter_done_now(resolve(s)) is False
        token = n.watch(s)  # a plain watch still queues a completion
        assert token and n.pending == 1
        assert drain_until(n, token) == [(token, None)]


def test_closed_notifier_says_not_done(dev, mechanism):
    s = dev.stream()
    n = cudafd.Notifier(mechanism)
    n.close()
    assert n.adapter_done_now(resolve(s)) is False  # the wait that follows reports the close
    with pytest.raises(cudafd.ClosedError):
        n.watch(s)


@pytest.mark.asyncio_only  # trio's contract: test_trio_lone_wait_on_done_work_is_a_checkpoint
def test_asyncio_lone_wait_on_done_work_does_not_suspend(dev, loop_flavor, mechanism):
    s = dev.stream()

    async def body(api):
        coro = api.notifier.wait(s)
        with pytest.raises(StopIteration):
            coro.send(None)
        assert api.notifier.pending == 0

    run(loop_flavor, mechanism, body)


def test_done_waits_in_a_row_still_yield(dev, loop_flavor, mechanism):
    # (under trio every wait is a checkpoint anyway)
    s = dev.stream()
    rounds = 20 * policy.QUICK_YIELD_EVERY

    async def body(api):
        ticks = 0
        finished = False

        async def waits():
            await api.sleep(0)  # the ticker is running from here on
            before = ticks
            for _ in range(rounds):
                await api.notifier.wait(s)
            nonlocal finished
            finished = True
            return ticks - before

        async def other():
            nonlocal ticks
            while not finished:
                ticks += 1
                await api.sleep(0)

        ticked, _ = await api.gather(waits(), other())
        assert ticked >= rounds // policy.QUICK_YIELD_EVERY - 1

    run(loop_flavor, mechanism, body)


def test_trio_lone_wait_on_done_work_is_a_checkpoint(dev, mechanism):
    trio = pytest.importorskip("trio", reason="trio is not installed")
    s = dev.stream()

    async def body(api):
        with trio.CancelScope() as scope:
            scope.cancel()
            await api.notifier.wait(s)
            raise AssertionError("the wait returned inside a cancelled scope")
        assert scope.cancelled_caught

    run("trio", mechanism, body)


@pytest.mark.skipif(REAL, reason="a fault poisons the GPU's primary context: test_faults runs real faults in subprocesses")
def test_lone_wait_after_a_fault_still_raises(dev, flavor, mechanism):
    s = dev.stream()
    s.launch(0.001, fault=True)
    with _driver.pushed(dev.ctx):
        deadline = time.monotonic() + 5
        while dev.drv.cuStreamQuery(s.handle) == _driver.CUDA_ERROR_NOT_READY and time.monotonic() < deadline:
            time.sleep(0.001)
        assert dev.drv.cuStreamQuery(s.handle) not in (_driver.CUDA_SUCCESS, _driver.CUDA_ERROR_NOT_READY), \
            "the fault has not surfaced before the wait"

    async def body(api):
        with pytest.raises(cudafd.CudaError):
            await api.wait(s)

    run(flavor, mechanism, body)


# ---- every loop: the ask again ahead of the watch (cudafd._core.policy) ----
# A lone wait on work still running yields to the loop once and asks the
# driver again before it sets up a watch. These tests script the driver's
# answer (Notifier.adapter_done_now) so they do not depend on the machine's speed.


def _scripted(notifier, answers):
    """Make notifier.adapter_done_now give `answers` (then True); count watches."""
    calls = {"done_now": 0, "watch": 0}
    answers = list(answers)
    real_watch = notifier.adapter_watch

    def done_now(t):
        calls["done_now"] += 1
        return answers.pop(0) if answers else True

    def watch(t):
        calls["watch"] += 1
        return real_watch(t)

    notifier.adapter_done_now = done_now
    notifier.adapter_watch = watch
    return calls


def test_short_wait_ends_ahead_of_any_watch(dev, loop_flavor, mechanism):
    s = dev.stream()

    async def body(api):
        calls = _scripted(api.notifier, [False])  # running at the first look, over at the second
        ran = []

        async def waiter():
            await api.notifier.wait(s)
            return len(ran)

        async def other():
            ran.append(1)

        seen, _ = await api.gather(waiter(), other())
        assert calls == {"done_now": 2, "watch": 0}
        if api.flavor != "trio":  # (trio runs the tasks of one batch in no set order)
            assert seen, "the wait yields to the loop between its two queries"
        assert api.notifier.pending == 0

    run(loop_flavor, mechanism, body)


def test_wait_still_running_after_one_yield_is_watched(dev, loop_flavor, mechanism):
    s = dev.stream()

    async def body(api):
        s.launch(0.05)
        calls = _scripted(api.notifier, [False] * 10**6)  # the driver never says "done"
        await api.notifier.wait(s)  # the watch's own report ends it
        assert calls == {"done_now": 2, "watch": 1}  # the fast path, one ask again, the watch
        assert api.notifier.pending == 0

    run(loop_flavor, mechanism, body)


def test_a_wait_asking_again_is_not_lone_for_others(dev, loop_flavor, mechanism):
    # A second wait on the stream meanwhile must not take the lone path too,
    # nor watch while the first has not: its record would come first, and it
    # would resume first. It waits its turn behind the first (it never asks
    # the driver itself), and both resume in the order they began.
    s = dev.stream()

    async def body(api):
        calls = _scripted(api.notifier, [False] * 10**6)
        s.launch(0.05)
        order = []

        async def waiter(name):
            await api.notifier.wait(s)
            order.append(name)

        await api.gather(waiter("first"), waiter("second"))
        assert order == ["first", "second"]
        assert calls == {"done_now": 2, "watch": 2} and api.notifier.pending == 0

    run(loop_flavor, mechanism, body)


def test_cancel_while_asking_again_leaves_nothing(dev, loop_flavor, mechanism):
    s = dev.stream()

    async def body(api):
        s.launch(RUNNING_S)  # the wait cannot finish before its cancel, even once watched
        calls = _scripted(api.notifier, [False] * 10**6)
        assert await api.cancelled_when(lambda: calls["done_now"] >= 1, api.notifier.wait(s))
        assert calls["watch"] <= 1 and api.notifier.pending == 0  # (trio may run it to its watch first)
        assert api.notifier.statistics()["loop_busy"] == 0

    run(loop_flavor, mechanism, body)
