"""The "poll" mechanism's schedule: who asks the driver, and when.

Its backend plans each stream's head wait (and each event watch) on its own:
asked a quarter of its budget after it became head, then after 1/16 of its
age, never later than its budget, whatever the other waits do; its timer
is armed at the earliest plan and at once while completions are queued.
These tests read the plans and count the queries, which hold on a loaded
machine; how prompt it is on a GPU is the benchmark's (bench lateness).
"""
from __future__ import annotations

import contextlib
import ctypes
import time
from collections.abc import Iterator

import pytest
from support import REAL, RUNNING_S, readable, run

import cudafd
from cudafd._core import driver as _driver
from cudafd._core import kernels as _kernels
from cudafd._core.policy import ask_interval_ns
from cudafd._core.targets import resolve

MS = 1_000_000


class _Counting:
    """Counts the backend's cuEventQuery calls."""

    def __init__(self, backend) -> None:
        self.calls = 0
        self._query = backend._drv.cuEventQuery
        backend._drv = self._Proxy(backend._drv, self)

    class _Proxy:
        def __init__(self, drv, counter) -> None:
            self._drv, self._counter = drv, counter

        def __getattr__(self, name):
            return getattr(self._drv, name)

        def cuEventQuery(self, ev):  # noqa: N802 - the driver's name
            self._counter.calls += 1
            return self._counter._query(ev)


def test_the_interval_follows_the_age_within_a_quarter_budget_and_the_budget():
    b = 400_000
    assert ask_interval_ns(0, b) == b // 4
    assert ask_interval_ns(16 * 200_000, b) == 200_000  # 1/16 of the age
    assert ask_interval_ns(10**12, b) == b  # never later than the budget
    assert ask_interval_ns(16 * 50_000, b) == b // 4  # never sooner than a quarter of it


def test_a_new_wait_is_first_due_a_quarter_budget_after_its_watch(dev):
    s = dev.stream()
    with cudafd.Notifier("poll", max_lateness=8.0) as n:  # due 2 s after the watch: a late thread changes nothing
        s.launch(2.0)
        before = time.monotonic_ns()
        n.watch(s)
        after = time.monotonic_ns()
        plans = list(n._backend._plans.values())
        assert len(plans) == 1
        since, due, step = plans[0]
        assert step == 2000 * MS and due == since + step
        assert before <= since <= after
        assert n._backend._armed == due, "the timer fires when the wait is due"
        counter = _Counting(n._backend)
        n.adapter_poll()  # not due yet: nothing is asked
        assert counter.calls == 0
        n.poll()  # "look now": everything is asked
        assert counter.calls == 1
        n.close()


def test_a_head_due_within_half_its_interval_is_asked_with_a_round_that_runs_anyway(dev):
    """Heads due at nearby times share one wake: a round asks the heads due,
    and those due within half of their interval; the others keep their plan.
    The plans are set seconds apart, so a late thread changes nothing."""
    streams = [dev.stream() for _ in range(3)]
    with cudafd.Notifier("poll", max_lateness=10.0) as n:  # a first interval of 2.5 s
        for s in streams:
            s.launch(RUNNING_S)
            n.watch(s)
        backend = n._backend
        plans = list(backend._plans.values())
        assert len(plans) == 3 and all(p[2] == 2500 * MS for p in plans)
        now = time.monotonic_ns()
        due, near, far = plans
        due[1] = now - 1  # due now
        near[1] = now + 1000 * MS  # due in 1 s: within half of 2.5 s
        far[1] = now + 2000 * MS  # due in 2 s: not within half of 2.5 s
        far_due = far[1]
        counter = _Counting(backend)
        n.adapter_poll()
        assert counter.calls == 2, "the due head and the one due within half its interval"
        assert due[1] > now and near[1] > now + 1000 * MS, "both were asked: planned again from now"
        assert far[1] == far_due, "the other keeps its plan"
        assert backend._armed == min(p[1] for p in plans)
        n.close()


def test_a_long_wait_does_not_delay_a_short_one(dev):
    """Each stream's head is planned from its own age: a wait that has run for
    long is asked seldom, and a wait watched after it is still asked soon."""
    long_s, short_s = dev.stream(), dev.stream()
    with cudafd.Notifier("poll", max_lateness=0.4) as n:
        long_s.launch(5.0 if REAL else RUNNING_S)  # running through the two ages below (0.25 s and on)
        n.watch(long_s)
        backend = n._backend
        time.sleep(0.05)
        n.poll()  # asked at age >= 50 ms: next in 1/16 of the age at least
        (plan_long,) = backend._plans.values()
        assert plan_long[2] >= 50 * MS // 16
        time.sleep(0.2)
        n.poll()
        assert plan_long[2] >= 250 * MS // 16
        short_s.launch(RUNNING_S)
        t0 = time.monotonic_ns()
        n.watch(short_s)
        t1 = time.monotonic_ns()
        assert len(backend._plans) == 2 and not long_s.idle(), "the long wait ended: nothing was tested"
        plan_short = [p for p in backend._plans.values() if p is not plan_long][0]
        since, due, step = plan_short
        assert step == 100 * MS, "a new head is asked a quarter of its budget after its watch"
        assert t0 <= since <= t1 and due == since + step
        assert backend._armed == min(plan_long[1], plan_short[1])
        n.close()


def test_the_timer_wakes_the_asker_until_the_wait_is_found(dev):
    """Sleeping on the timer and asking whenever it fires finds a wait, with a
    number of asks the schedule allows: a 300 ms kernel with a 50 ms budget is
    asked every 12.5-50 ms, so 6 to ~26 times (an upper bound: a late
    thread asks less)."""
    s = dev.stream()
    with cudafd.Notifier("poll", max_lateness=0.05) as n:
        s.launch(0.3)
        token = n.watch(s)
        counter = _Counting(n._backend)
        fd = n._reader_fd
        got = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            assert readable(fd, 5.0), "the timer is armed while a wait is pending"
            n.adapter_poll()
            got = n.adapter_drain() + n.drain()
        assert got == [(token, None)]
        assert 1 <= counter.calls <= 300 / 12.5 + 2, counter.calls
        assert not readable(fd, 0.05), "nothing pending: the timer is disarmed"
        n.close()


def test_the_timer_is_readable_while_completions_are_queued_and_after_close(dev):
    s = dev.stream()
    n = cudafd.Notifier("poll", max_lateness=1.0)
    fd = n._reader_fd
    n.watch(s)  # an idle stream: done at once
    deadline = time.monotonic() + 10
    while not n._backend._done and time.monotonic() < deadline:
        n.poll()
    assert readable(fd, 0), "a completion is queued: a reader must drain"
    assert len(n.drain()) == 1
    assert not readable(fd, 0.05), "drained, nothing pending: quiet"
    s.launch(RUNNING_S)
    n.watch(s)
    n.close()
    assert readable(fd, 0), "closed: readable for good, so readers drain the close"
    n.drain()


def test_the_timer_stays_readable_while_a_completion_kept_for_the_loop_waits_for_its_drain(dev):
    """drain() takes an awaited wait's completion and keeps it for adapter_drain(),
    signalling the Notifier: the timer the loop's reader waits on is readable
    until that drain, whatever poll() is called meanwhile."""
    s = dev.stream()
    with cudafd.Notifier("poll", max_lateness=1.0) as n:
        fd = n._reader_fd
        token = n.adapter_watch(resolve(s))  # an idle stream: over once its record completes
        deadline = time.monotonic() + 10
        while not n._backend._done and time.monotonic() < deadline:
            n.poll()
        assert n._backend._done, "the finished wait was never found"
        assert n.drain() == []  # the loop's: kept for adapter_drain()
        assert readable(fd, 5.0), "a completion is kept for the loop: its reader must drain"
        n.poll()
        assert readable(fd, 5.0), "a poll() left the loop's kept completion without a wake"
        assert n.adapter_drain() == [(token, None)]
        assert not readable(fd, 0.05), "drained, nothing pending: quiet"


def test_an_awaited_wait_kept_by_drain_resumes_though_poll_ran_before_the_loop(dev, loop_flavor):
    """watch()/drain() and ``await n.wait()`` share a "poll" Notifier. The program's
    poll() and drain() take the awaited wait's completion (kept for the loop) and
    poll() again before the loop's reader runs: the task still resumes."""
    s = dev.stream()

    async def body(api):
        n = api.notifier

        def parked():
            stats = n.statistics()
            return stats["awaited"] == 1 and stats["fd_holds"] == 1

        async def program():
            assert await api.until(lambda: parked() or s.idle()), "the wait never parked"
            if parked():  # (a loop slowed past the kernel ends the wait before it parks)
                s.synchronize()  # on the loop's thread: its reader has not run since
                n.poll()
                assert n.drain() == []  # the awaited wait's: kept for the loop
                n.poll()

        s.launch(0.2)
        [resumed, _] = await api.gather(api.within(10, api.wait(s)), program())
        return resumed

    assert run(loop_flavor, "poll", body) is True


@contextlib.contextmanager
def _primary_stream() -> Iterator[int]:
    """A stream of device 0's primary context, retained for the block as a framework retains it."""
    drv = _driver.get()
    drv.init()
    ctx, s = ctypes.c_void_p(), ctypes.c_void_p()
    _driver.check(drv.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
    try:
        with drv.pushed(ctx.value):
            _driver.check(drv.cuStreamCreate(ctypes.byref(s), 1))
        yield s.value
        with drv.pushed(ctx.value):
            drv.cuStreamSynchronize(s.value)
            drv.cuStreamDestroy(s.value)
    finally:
        _kernels.forget(ctx.value)
        drv.cuDevicePrimaryCtxRelease(0)


@pytest.mark.parametrize("cancel_first", [True, False])
def test_cancelled_watches_in_a_primary_context_are_asked_once_per_budget_until_their_events_are_free(cancel_first):
    """(Their events are pooled then. In a context of the caller's own a cancelled
    watch's event is destroyed at once: test_own_context.py.)"""
    with _primary_stream() as s, cudafd.Notifier("poll", max_lateness=0.02) as n:
        _kernels.launch_spin(s, 0.15)
        a = n.watch(s)
        b = n.watch(s)
        n.cancel(a if cancel_first else b)
        backend = n._backend
        assert backend._retiring and backend._retire_at > 0
        deadline = time.monotonic() + 20
        while (backend._retiring or backend._lanes) and time.monotonic() < deadline:
            assert readable(n._reader_fd, 5.0)
            n.adapter_poll()
        assert not backend._retiring and backend._retire_at == 0
        assert [t for t, _ in n.drain()] == [b if cancel_first else a]


def test_the_helper_thread_finds_waits_and_rests_while_completions_wait_for_a_drain(dev):
    """fileno() users get a helper thread that asks on the schedule; while a
    completion waits for their drain (the timer then stays readable) it looks
    again a quarter budget on, rather than spinning on the readable timer."""
    done_s, long_s = dev.stream(), dev.stream()
    with cudafd.Notifier("poll", max_lateness=0.02) as n:
        fd = n.fileno()
        long_s.launch(RUNNING_S)
        n.watch(long_s)  # keeps the helper running
        token = n.watch(done_s)  # an idle stream: over at the first ask
        assert readable(fd, 10.0), "the helper found the finished wait"
        backend = n._backend
        calls = [0]
        poll = backend.poll

        def counting(everything=True):
            calls[0] += 1
            return poll(everything)

        backend.poll = counting
        time.sleep(0.1)  # nobody drains meanwhile
        assert calls[0] <= 100 / 5 + 3, calls[0]  # every 5 ms at most, not a spin
        assert not long_s.idle(), "the long wait ended: the helper had nothing to run for"
        assert n.drain() == [(token, None)]
        n.close()
