"""The spin mechanism in a loop: each waiting task asks about its own wait at
every pass (the policy's step 4, Notifier.adapter_ask, cudafd_ask_token), and
the core's poller, told so per wait, backs it up every max(max_lateness,
10 ms) instead of spinning (cudafd/_core/policy.py, native/core/ask.c).
"""
from __future__ import annotations

import time

import pytest
from support import REAL, run

import cudafd
from cudafd._core.policy import WaitPolicy
from cudafd._core.targets import resolve

LATE_S = 5.0  # a max_lateness whose poller asks first after 1.25 s: an earlier end is the task's ask


def _queries_while_nobody_asks(dev, adapter: bool) -> int:
    """The core's queries while one spin wait on a 300 ms kernel runs and nothing but the poller asks."""
    s = dev.stream()
    with cudafd.Notifier("spin") as n:
        if not adapter:  # an adapter's wait first: the setting follows each watch, not the Notifier
            n.cancel(n.adapter_watch(resolve(dev.stream())))
        s.launch(0.3)
        before = cudafd.stats()["queries"]
        token = n.adapter_watch(resolve(s)) if adapter else n.watch(s)
        s.synchronize()
        during = cudafd.stats()["queries"] - before
        deadline = time.monotonic() + 10
        while True:  # the poller finds it either way
            over = n.adapter_ask(token)[0] if adapter else token in {t for t, _ in n.drain()}
            if over:
                break
            assert time.monotonic() < deadline, "a wait left to its caller's asks was never found"
            time.sleep(0.001)
    return during


def test_the_poller_backs_up_the_waits_their_tasks_ask_about_and_spins_on_the_others(dev):
    """An adapter's wait on a spin Notifier is asked by the poller as a backstop only
    (every 10 ms: ~30 queries over 300 ms); a watch() of the same Notifier is spun on."""
    asked = _queries_while_nobody_asks(dev, adapter=True)
    spun = _queries_while_nobody_asks(dev, adapter=False)
    assert asked < 200, f"{asked} queries: the poller spun on a wait its task asks about"
    assert spun > 5 * asked, f"spinning made {spun} queries against {asked}: the count shows nothing"


def test_an_ask_says_not_yet_then_over_once_and_leaves_nothing(dev):
    s = dev.stream()
    with cudafd.Notifier("spin", max_lateness=LATE_S) as n:
        assert n.adapter_asks
        s.launch(0.5)  # still running at the first ask however loaded the machine
        token = n.adapter_watch(resolve(s))
        assert n.adapter_ask(token) == (False, None)
        s.synchronize()
        assert n.adapter_ask(token) == (True, None)  # the ask, not the poller (1.25 s away), found it
        assert n.pending == 0 and n.adapter_drain() == [] and n.drain() == []
        assert n.cancel(token) is False  # reported: nothing to detach
    assert not cudafd.Notifier("event").adapter_asks


def test_a_wait_the_poller_queued_first_reaches_its_ask(dev):
    """The backstop's completion goes through the queue; the ask finds it there, and
    a completion of another asking wait drained with it is kept for that one's ask."""
    s, other = dev.stream(), dev.stream()
    with cudafd.Notifier("spin", max_lateness=1e-3) as n:
        s.launch(0.01)
        other.launch(0.01)
        done0 = cudafd.stats()["completed"]
        first, second = n.adapter_watch(resolve(s)), n.adapter_watch(resolve(other))
        s.synchronize()
        other.synchronize()
        deadline = time.monotonic() + 10
        while cudafd.stats()["completed"] - done0 < 2 and time.monotonic() < deadline:
            time.sleep(0.001)  # the poller's backstop (every <= 1 ms) queues both
        assert cudafd.stats()["completed"] - done0 == 2
        assert n.pending == 2
        assert n.adapter_ask(second) == (True, None)
        assert n.pending == 1 and n.statistics()["awaited"] == 1  # first's, kept for its ask
        assert n.adapter_ask(first) == (True, None)
        assert n.pending == 0


def test_close_reaches_an_asking_wait(dev):
    s = dev.stream()
    n = cudafd.Notifier("spin")
    s.launch(0.2)
    token = n.adapter_watch(resolve(s))
    n.close()
    over, exc = n.adapter_ask(token)
    assert over and isinstance(exc, cudafd.ClosedError)
    assert n.statistics()["fd_open"] == 0
    s.synchronize()


class _Stub:
    """A Notifier whose tasks ask: every wait watches; asks answer from a script."""

    adapter_asks = True

    def __init__(self) -> None:
        self.over: set[int] = set()
        self.asked: list[int] = []
        self.cancelled: list[int] = []
        self.next = 0

    def adapter_done_now(self, t) -> bool:
        return False

    def adapter_watch(self, t) -> int:
        self.next += 1
        return self.next

    def adapter_ask(self, token: int):
        self.asked.append(token)
        return (token in self.over), None

    def adapter_stream_key(self, t) -> int:
        return t.handle

    def cancel(self, token: int) -> bool:
        self.cancelled.append(token)
        return True


class _T:
    kind, handle, ctx = "stream", 42, 0


def test_only_the_first_asking_wait_of_a_target_asks_and_they_end_in_order():
    n, policy = _Stub(), WaitPolicy()
    first = policy.steps(n, _T())
    assert next(first) is None  # lone: asked again once, then it watches
    second = policy.steps(n, _T())
    assert next(second) is None  # behind the first
    assert next(first) is None and n.next == 1  # watched; now asking
    assert next(second) is None and n.next == 2
    n.over = {1, 2}
    next(second)  # second is over too, but not first in line: it does not ask
    assert n.asked == []
    with pytest.raises(StopIteration):
        next(first)
    assert n.asked == [1]
    with pytest.raises(StopIteration):
        next(second)
    assert n.asked == [1, 2] and n.cancelled == [] and not policy.busy()


def test_a_cancelled_asking_wait_is_detached():
    n, policy = _Stub(), WaitPolicy()
    steps = policy.steps(n, _T())
    next(steps)
    next(steps)
    assert n.next == 1
    steps.close()  # the task was cancelled at its yield
    assert n.cancelled == [1] and not policy.busy()


async def _timed_wait(s, n, seconds: float) -> tuple[float, bool]:
    s.launch(seconds)
    t0 = time.monotonic()
    await cudafd.wait(s, notifier=n)
    return time.monotonic() - t0, s.idle()


def test_the_tasks_ask_ends_a_spin_wait_before_the_poller_would(dev, loop_flavor):
    s = dev.stream()

    async def body(api):
        with cudafd.Notifier("spin", max_lateness=LATE_S) as n:
            return [await _timed_wait(s, n, 0.02) for _ in range(3)]

    for took, idle in run(loop_flavor, "spin", body):
        assert idle, "a wait ended before its work"
        assert took < LATE_S / 4, f"the wait took {took:.3f} s: nothing but the poller found it"


def test_a_spin_wait_on_a_stream_kept_busy_ends_with_its_own_work(dev, loop_flavor):
    """A wait whose stream gets more work after the wait began ends with its own
    point, found by its task's ask (its event), not once the stream is idle."""
    s = dev.stream()

    async def body(api):
        with cudafd.Notifier("spin", max_lateness=LATE_S) as n:
            s.launch(0.05)
            t0 = time.monotonic()
            took = []

            async def waiter():
                await cudafd.wait(s, notifier=n)
                took.append(time.monotonic() - t0)

            async def later_work():
                while n.pending == 0:  # the wait watched: its point is behind the 50 ms kernel only
                    await api.sleep(0)
                s.launch(1.0)  # later work: the stream stays busy for 1 s more

            await api.gather(waiter(), later_work())
            busy = not s.idle()
            s.synchronize()
            return took[0], busy

    took, busy = run(loop_flavor, "spin", body)
    assert busy, "the wait ended only once the later work had"
    assert took < LATE_S / 4, f"the wait took {took:.3f} s: the task's ask did not find it"


def test_spin_waits_on_many_streams_all_end_and_leave_nothing(dev, loop_flavor):
    streams = [dev.stream() for _ in range(6)]

    async def body(api):
        async def task(i, st):
            for r in range(15):
                st.launch(200e-6 * (1 + (i + r) % 4))
                await api.wait(st)
                assert st.idle()

        await api.gather(*(task(i, st) for i, st in enumerate(streams)))
        return api.notifier.pending, api.notifier.statistics()

    pending, stats = run(loop_flavor, "spin", body)
    assert pending == 0
    assert stats["awaited"] == 0 and stats["fd_holds"] == 0, stats


@pytest.mark.skipif(REAL, reason="a fault poisons the GPU's primary context: test_faults runs real faults in subprocesses")
def test_a_fault_reaches_a_spin_wait_through_its_ask(dev, loop_flavor):
    s = dev.stream()

    async def body(api):
        with cudafd.Notifier("spin", max_lateness=LATE_S) as n:
            s.launch(0.01, fault=True)
            t0 = time.monotonic()
            with pytest.raises(cudafd.CudaError):
                await cudafd.wait(s, notifier=n)
            return time.monotonic() - t0

    took = run(loop_flavor, "spin", body)
    assert took < LATE_S / 4, f"the fault took {took:.3f} s to reach the wait"


def test_a_failing_stream_key_leaves_no_wait_watched():
    """The asking line's key (a driver call) is looked up before the watch: if it fails,
    the wait raises with nothing watched, nothing left for anyone to cancel."""

    class _KeyFails(_Stub):
        def adapter_stream_key(self, t) -> int:
            raise cudafd.CudaError(201, where="cudafd_stream_key")

    n, policy = _KeyFails(), WaitPolicy()
    steps = policy.steps(n, _T())
    assert next(steps) is None  # lone: asked again once
    with pytest.raises(cudafd.CudaError):
        next(steps)
    assert n.next == 0 and n.cancelled == [] and not policy.busy()
