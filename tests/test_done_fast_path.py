"""Work that is already over: the one-query fast path of a lone wait.

A lone wait first asks the driver whether its target has finished; if so it
returns without recording an event or suspending (asyncio), or with a bare
checkpoint (trio). These tests pin down when the shortcut may be taken and
that it never hides a fault or starves the loop."""
from __future__ import annotations

import asyncio
import time

import pytest
from support import REAL, run
from test_fence_notifier import destroy_event, record_event

import cudafd
from cudafd import _aio, _aio_spin, _driver, _lib
from cudafd._targets import resolve


def test_core_queries(dev):
    lib = _lib.load()
    s = dev.stream()
    assert lib.cudafd_stream_done(s.handle) == 1
    s.launch(0.2)
    assert lib.cudafd_stream_done(s.handle) == 0
    ev = record_event(dev, s)
    handle = int(ev.handle) if hasattr(ev, "handle") else int(ev)
    assert lib.cudafd_event_done(handle) == 0
    s.synchronize()
    assert lib.cudafd_stream_done(s.handle) == 1
    assert lib.cudafd_event_done(handle) == 1
    destroy_event(dev, ev)
    assert lib.cudafd_event_done(0) == 0  # NULL is checked before the driver sees it


@pytest.mark.skipif(REAL, reason="a made-up handle is undefined behaviour in the real driver")
def test_core_queries_of_a_made_up_handle():
    # "not known to be done": the watch that follows reports the bad handle
    lib = _lib.load()
    assert lib.cudafd_stream_done(0xDEAD0000) == 0
    assert lib.cudafd_event_done(0xDEAD0000) == 0


def test_notifier_skips_the_wait_only_when_asked(dev, mechanism):
    s = dev.stream()
    with cudafd.Notifier(mechanism) as n:
        assert n._watch(resolve(s), True) == 0
        assert n.pending == 0
        token = n.watch(s)  # a plain watch still queues a completion
        assert token and n.pending == 1
        s.launch(0.5)  # long enough that no load can make it finish before the next line
        busy = n._watch(resolve(s), True)
        assert busy and n.pending == 2
        deadline = time.monotonic() + 10
        got = {}
        while len(got) < 2 and time.monotonic() < deadline:
            n.poll()
            got.update(n.drain())
            time.sleep(0.001)
        assert got == {token: None, busy: None}


def test_closed_notifier_refuses_even_done_work(dev, mechanism):
    s = dev.stream()
    n = cudafd.Notifier(mechanism)
    n.close()
    with pytest.raises(cudafd.ClosedError):
        n._watch(resolve(s), True)


@pytest.mark.asyncio_only  # trio's contract: test_trio_lone_wait_on_done_work_is_a_checkpoint
def test_asyncio_lone_wait_on_done_work_does_not_suspend(dev, loop_flavor, mechanism):
    s = dev.stream()

    async def body(api):
        coro = api.notifier.wait(s)
        with pytest.raises(StopIteration):
            coro.send(None)
        assert api.notifier.pending == 0

    run(loop_flavor, mechanism, body)


@pytest.mark.asyncio_only  # under trio every wait is a checkpoint
def test_asyncio_done_waits_in_a_row_still_yield(dev, loop_flavor, mechanism):
    s = dev.stream()
    rounds = 20 * _aio.QUICK_YIELD_EVERY

    async def body(api):
        ticks = 0

        async def other():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.ensure_future(other())
        await asyncio.sleep(0)
        before = ticks
        for _ in range(rounds):
            await api.notifier.wait(s)
        task.cancel()
        assert ticks - before >= rounds // _aio.QUICK_YIELD_EVERY - 1

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

    async def body(api):
        with pytest.raises(cudafd.CudaError):
            await api.wait(s)

    run(flavor, mechanism, body)


# ---- asyncio: the spin ahead of the watch ----
# A lone wait on work still running spins on the driver's answer alone for up
# to AHEAD_MAX before it sets up a watch. These tests script the driver's
# answer (Notifier._done_now) so they do not depend on the machine's speed.


@pytest.fixture
def long_windows(monkeypatch):
    """Spin windows long enough for any machine's loop (a test then never races them);
    no back-to-back queries first, so the spin that yields is what is tested."""
    monkeypatch.setattr(_aio_spin, "SPIN_START", 5.0)
    monkeypatch.setattr(_aio_spin, "AHEAD_MAX", 5.0)
    monkeypatch.setattr(_aio.Dispatcher, "_spin_tight", lambda self, t: False)


def _scripted(notifier, answers):
    """Make notifier._done_now give `answers` (then True); count watches."""
    calls = {"done_now": 0, "watch": 0}
    answers = list(answers)
    real_watch = notifier._watch

    def done_now(t):
        calls["done_now"] += 1
        if calls.get("over"):
            return True
        return answers.pop(0) if answers else True

    real_watch_timed = notifier._watch_timed

    def watch(t, unless_done):
        calls["watch"] += 1
        return real_watch(t, unless_done)

    def watch_timed(t):  # where it falls back on _watch, that counted it already
        before = calls["watch"]
        out = real_watch_timed(t)
        calls["watch"] = before + 1
        return out

    notifier._done_now = done_now
    notifier._watch = watch
    notifier._watch_timed = watch_timed
    return calls


@pytest.mark.asyncio_only
def test_asyncio_short_wait_ends_ahead_of_any_watch(dev, loop_flavor, mechanism, long_windows):
    s = dev.stream()

    async def body(api):
        calls = _scripted(api.notifier, [False, False])  # running at the first two looks
        ran = []
        asyncio.get_running_loop().call_soon(ran.append, 1)
        await api.notifier.wait(s)
        assert calls == {"done_now": 3, "watch": 0}
        assert ran, "the spin ahead yields to the loop between its queries"
        assert api.notifier.pending == 0

    run(loop_flavor, mechanism, body)


@pytest.mark.asyncio_only
def test_asyncio_wait_outlasting_the_ahead_spin_is_watched(dev, loop_flavor, mechanism):
    s = dev.stream()

    async def body(api):
        s.launch(0.05)
        calls = _scripted(api.notifier, [False] * 10**6)  # the driver never says "done"
        await api.notifier.wait(s)  # the watch's own report ends it
        assert calls["watch"] == 1 and calls["done_now"] > 1
        assert api.notifier.pending == 0

    run(loop_flavor, mechanism, body)


@pytest.mark.asyncio_only
def test_asyncio_wait_spinning_ahead_is_not_lone_for_others(dev, loop_flavor, mechanism, long_windows):
    # A second wait on the stream meanwhile must not take the lone path too,
    # nor watch while the first has not: its record would come first, and it
    # would resume first. It waits its turn behind the first, and both
    # resume in the order they began.
    s = dev.stream()

    async def body(api):
        calls = _scripted(api.notifier, [False] * 10**6)
        s.launch(0.05)
        order = []

        async def waiter(name):
            await api.notifier.wait(s)
            order.append(name)

        first = asyncio.ensure_future(waiter("first"))
        await asyncio.sleep(0)  # first is spinning ahead now
        assert calls["watch"] == 0
        second = asyncio.ensure_future(waiter("second"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert calls["watch"] == 0 and not first.done() and not second.done()  # second waits behind first
        calls["over"] = True  # now the driver says "over"
        await first
        await second
        assert order == ["first", "second"]
        assert calls["watch"] == 0 and api.notifier.pending == 0

    run(loop_flavor, mechanism, body)


@pytest.mark.asyncio_only
def test_asyncio_cancel_while_spinning_ahead_leaves_nothing(dev, loop_flavor, mechanism, long_windows):
    s = dev.stream()

    async def body(api):
        calls = _scripted(api.notifier, [False] * 10**6)
        task = asyncio.ensure_future(api.notifier.wait(s))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert calls["watch"] == 0 and api.notifier.pending == 0
        assert not _aio.dispatcher(asyncio.get_running_loop(), api.notifier)._busy()

    run(loop_flavor, mechanism, body)


@pytest.mark.asyncio_only
def test_asyncio_long_waits_turn_the_spin_off(dev, loop_flavor, mechanism):
    # Waits that outlast the window, ahead of the watch or after it, halve it
    # until it is off: long waits then cost no spinning at all.
    s = dev.stream()

    async def body(api):
        _scripted(api.notifier, [False] * 10**6)  # the driver never says "done" early
        for _ in range(12):
            s.launch(0.002)
            await api.notifier.wait(s)
        d = _aio.dispatcher(asyncio.get_running_loop(), api.notifier)
        assert d._window < _aio_spin.SPIN_MIN, d._window

    run(loop_flavor, mechanism, body)


# ---- asyncio: back-to-back queries before the first yield ----


class _Ticks:
    """Counts the passes another task gets while the test awaits."""

    def __init__(self):
        self.n = 0
        self.task = asyncio.ensure_future(self._run())

    async def _run(self):
        while True:
            self.n += 1
            await asyncio.sleep(0)


@pytest.mark.asyncio_only
def test_asyncio_tiny_wait_ends_in_back_to_back_queries(dev, loop_flavor, mechanism, monkeypatch):
    # (the back-to-back window widened: on a loaded machine six scripted
    # answers outlasted the real 10 µs once, and it yielded as it should)
    monkeypatch.setattr(_aio_spin, "TIGHT_MAX", 1.0)
    s = dev.stream()

    async def body(api):
        calls = _scripted(api.notifier, [False] * 5)  # over at the sixth look
        ran = []
        asyncio.get_running_loop().call_soon(ran.append, 1)
        await api.notifier.wait(s)
        assert calls == {"done_now": 6, "watch": 0}
        assert not ran, "no yield: the queries came back to back"
        assert api.notifier.pending == 0

    run(loop_flavor, mechanism, body)


@pytest.mark.asyncio_only
def test_asyncio_back_to_back_queries_stop_after_a_miss_and_are_retried(dev, loop_flavor, mechanism, monkeypatch):
    monkeypatch.setattr(_aio_spin, "TIGHT_PROBE_EVERY", 3)
    monkeypatch.setattr(_aio_spin, "TIGHT_MAX", 0.05)  # two scripted answers fit even on a loaded machine
    s = dev.stream()

    async def body(api):
        calls = _scripted(api.notifier, [False] * 10**6)  # before the dispatcher takes notifier._watch
        d = _aio.dispatcher(asyncio.get_running_loop(), api.notifier)
        await api.notifier.wait(s)  # never over early: the miss turns them off
        assert not d._tight and calls["watch"] == 1
        seen = []
        for _ in range(_aio_spin.TIGHT_PROBE_EVERY):  # each wait: running at its first look, over at its second
            answers = iter([False, True])
            api.notifier._done_now = lambda t: next(answers, True)
            ran = []
            asyncio.get_running_loop().call_soon(ran.append, 1)
            await api.notifier.wait(s)
            seen.append(bool(ran))
        # off for TIGHT_PROBE_EVERY - 1 waits (they yield), then tried (and it pays)
        assert seen == [True] * (_aio_spin.TIGHT_PROBE_EVERY - 1) + [False]
        assert d._tight

    run(loop_flavor, mechanism, body)


@pytest.mark.asyncio_only
def test_asyncio_back_to_back_hits_in_a_row_still_yield(dev, loop_flavor, mechanism):
    s = dev.stream()
    rounds = 20 * _aio.QUICK_YIELD_EVERY

    async def body(api):
        answers = iter([False, True] * rounds)  # each wait: running at its first look, over at its second
        api.notifier._done_now = lambda t: next(answers, True)
        ticks = _Ticks()
        await asyncio.sleep(0)
        before = ticks.n
        for _ in range(rounds):
            await api.notifier.wait(s)
        ticks.task.cancel()
        assert ticks.n - before >= rounds // _aio.QUICK_YIELD_EVERY - 1
        assert ticks.n - before <= rounds // 2, "most waits ended without a yield"

    run(loop_flavor, mechanism, body)
