"""The shared waiting policy (cudafd/_core/policy.py) driven directly, as an
adapter drives it: each None is one yield to the loop, an int a token to park
on. A stand-in Notifier answers whether the work is over."""
from __future__ import annotations

import pytest

from cudafd._core import policy as policy_module
from cudafd._core.policy import BUSY_ASKS, QUICK_YIELD_EVERY, WaitPolicy


class _Target:
    def __init__(self, handle: int) -> None:
        self.kind, self.handle, self.ctx = "stream", handle, 0


class _Notifier:
    """Every stream's work is over; a watch would hand out tokens 1, 2, ..."""

    max_lateness = 400e-6

    def __init__(self) -> None:
        self.watched = 0

    def adapter_done_now(self, t: _Target) -> bool:
        return True

    def adapter_watch(self, t: _Target) -> int:
        self.watched += 1
        return self.watched


def _run_to_end(gen) -> list:
    return list(gen)


def test_the_starvation_yield_keeps_a_streams_order():
    """The wait that yields because it was the QUICK_YIELD_EVERY-th quick one
    in a row still returns before a later wait on its stream."""
    policy, n = WaitPolicy(), _Notifier()
    for i in range(QUICK_YIELD_EVERY - 1):  # quick waits on other streams
        assert _run_to_end(policy.steps(n, _Target(100 + i))) == []
    first = policy.steps(n, _Target(7))
    assert next(first) is None  # the starvation yield
    later = policy.steps(n, _Target(7))
    ended = []
    # the later wait must not end while the first is still yielded
    try:
        step = next(later)
        assert step is None, "the later wait parked on a token although the work was over"
    except StopIteration:
        ended.append("later")
    assert ended == [], "a later wait on the stream returned while an earlier one had not"
    _run_to_end(first)
    ended.append("first")
    _run_to_end(later)
    ended.append("later")
    assert ended == ["first", "later"]
    assert n.watched == 0, "work already over was watched"
    assert not policy.busy()


class _Counting(_Notifier):
    """Counts the looks; the work is over at each (``over``), or still running."""

    adapter_asks = False

    def __init__(self, over: bool = True) -> None:
        super().__init__()
        self.looks = 0
        self.over = over

    def adapter_done_now(self, t: _Target) -> bool:
        self.looks += 1
        return self.over


def test_a_wait_starting_in_a_busy_loop_yields_before_it_looks():
    """While another wait is in progress, a wait on another stream does not ask before its
    yield (its work was most likely launched just before): it yields once, looks once, and
    work over by then needs no watch."""
    policy, n = WaitPolicy(), _Counting()
    for i in range(QUICK_YIELD_EVERY - 1):
        _run_to_end(policy.steps(n, _Target(100 + i)))
    first = policy.steps(n, _Target(7))
    assert next(first) is None  # the starvation yield: a wait in progress
    looks = n.looks
    other = policy.steps(n, _Target(8))
    assert next(other) is None and n.looks == looks  # yielded without asking
    assert _run_to_end(other) == [] and n.looks == looks + 1  # one look: over, no watch
    _run_to_end(first)
    assert n.watched == 0
    assert not policy.busy()


def test_a_wait_starting_in_an_idle_loop_on_work_over_does_not_yield():
    policy, n = WaitPolicy(), _Counting()
    assert _run_to_end(policy.steps(n, _Target(8))) == [] and n.looks == 1
    assert not policy.busy()


def test_a_wait_on_running_work_looks_yields_once_looks_again_then_parks():
    policy, n = WaitPolicy(), _Counting(over=False)
    steps = policy.steps(n, _Target(7))
    assert next(steps) is None and n.looks == 1 and n.watched == 0  # the fast path's look, then the yield
    assert next(steps) == 1 and n.looks == 2  # looked once more, watched: park on token 1
    # meanwhile a wait on another stream starts in a busy loop: it yields, then looks once, then parks
    other = policy.steps(n, _Target(8))
    assert next(other) is None and n.looks == 2
    assert next(other) == 2 and n.looks == 3
    other.close()
    steps.close()
    assert not policy.busy()


def test_a_later_wait_never_watches_before_an_earlier_one_still_yielding():
    """A, B and C on one stream: A's work is over after its yield while B still yields
    behind it; C, started then, watches after B (the core completes one stream's
    watched waits in watch order, so C would otherwise return before B)."""
    policy, n = WaitPolicy(), _Counting(over=False)
    a = policy.steps(n, _Target(7))
    assert next(a) is None  # A, alone: its one yield before it asks again
    b = policy.steps(n, _Target(7))
    assert next(b) is None  # B behind A
    n.over = True
    assert _run_to_end(a) == []  # A's work is over: it ends without a watch
    n.over = False  # C's kernel is launched
    c = policy.steps(n, _Target(7))
    assert next(c) is None, "C watched while B, earlier, had not"
    assert next(b) == 1 and next(c) == 2
    b.close()
    c.close()
    assert not policy.busy()


def test_a_policy_whose_fast_path_yields_keeps_the_stream_in_progress_meanwhile():
    """fast_yields (trio: every await is a checkpoint): a wait on work already over
    yields once while it counts on its stream, so one started meanwhile returns after it."""
    policy, n = WaitPolicy(fast_yields=True), _Counting()
    first = policy.steps(n, _Target(7))
    assert next(first) is None and policy.busy()
    later = policy.steps(n, _Target(7))
    assert next(later) is None  # behind the first
    assert next(later) is None  # still behind it: it has not returned
    assert _run_to_end(first) == []
    assert _run_to_end(later) == [] and n.watched == 0
    assert not policy.busy()


class _Clock:
    """The policy's clock (ns), moved by hand: each pass of the loop lasts ``pass_ns``."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = _Clock()
    monkeypatch.setattr(policy_module, "_now", c)
    return c


def _step(gen, clock: _Clock, pass_ns: int):
    """One step of a wait: the loop runs a pass of ``pass_ns`` while the wait is yielded."""
    out = next(gen)
    clock.now += pass_ns
    return out


def _busy_wait(policy: WaitPolicy, n) -> object:
    """A wait in progress on stream 1, so that the next one starts in a busy loop."""
    other = policy.steps(n, _Target(1))
    assert next(other) is None
    return other


@pytest.mark.parametrize("pass_us", [50, 399])
def test_after_a_short_pass_a_wait_on_running_work_watches(clock, pass_us):
    """Passes no longer than the budget (400 µs): one ask after the yield, then the watch."""
    policy, n = WaitPolicy(), _Counting(over=False)
    other = _busy_wait(policy, n)
    looks = n.looks
    steps = policy.steps(n, _Target(7))
    assert _step(steps, clock, pass_us * 1000) is None
    assert next(steps) == n.watched and n.looks == looks + 1
    steps.close()
    other.close()
    assert not policy.busy()


def test_while_the_passes_are_long_a_wait_asks_at_each_and_ends_without_a_watch(clock):
    """A busy loop whose passes outlast the budget: the wait yields and asks again after
    each pass, and its work, over at its third ask, ends it there with no watch."""
    policy, n = WaitPolicy(), _Counting(over=False)
    other = _busy_wait(policy, n)
    looks = n.looks
    steps = policy.steps(n, _Target(7))
    for i in range(3):  # the yield, then two asks after long passes: still running
        assert _step(steps, clock, 2_000_000) is None
        assert n.looks == looks + i
    n.over = True
    with pytest.raises(StopIteration):
        _step(steps, clock, 2_000_000)
    assert n.looks == looks + 3 and n.watched == 0
    other.close()
    assert not policy.busy()


def test_a_wait_asks_at_most_busy_asks_times_before_it_watches(clock):
    """However long the passes, a wait whose work goes on asks BUSY_ASKS times, then watches:
    waits asking in a loop with nothing else to do make its passes long by themselves."""
    policy, n = WaitPolicy(), _Counting(over=False)
    other = _busy_wait(policy, n)
    looks = n.looks
    steps = policy.steps(n, _Target(7))
    for _ in range(BUSY_ASKS):
        assert _step(steps, clock, 10_000_000) is None
    assert next(steps) == 1 and n.looks == looks + BUSY_ASKS
    steps.close()
    other.close()
    assert not policy.busy()


def test_the_busy_asks_follow_the_notifiers_budget(clock):
    """Long is longer than the Notifier's max_lateness: 2 ms passes are short for a 5 ms budget."""
    policy, n = WaitPolicy(), _Counting(over=False)
    n.max_lateness = 5e-3
    other = _busy_wait(policy, n)
    steps = policy.steps(n, _Target(7))
    assert _step(steps, clock, 2_000_000) is None
    assert next(steps) == 1  # one ask, then the watch
    steps.close()
    other.close()


def test_a_later_wait_on_the_stream_stays_behind_one_asking_at_long_passes(clock):
    """A wait asking at each long pass is still first in its stream's line: a later wait
    there watches only after it, and does not end before it."""
    policy, n = WaitPolicy(), _Counting(over=False)
    other = _busy_wait(policy, n)
    first = policy.steps(n, _Target(7))
    assert _step(first, clock, 2_000_000) is None
    later = policy.steps(n, _Target(7))
    n.over = True
    assert _step(later, clock, 0) is None  # behind the first: it neither asks nor ends
    with pytest.raises(StopIteration):
        _step(first, clock, 2_000_000)
    with pytest.raises(StopIteration):
        next(later)  # first in line now; its work is over
    assert n.watched == 0
    other.close()
    assert not policy.busy()


def test_a_wait_cancelled_while_asking_at_long_passes_leaves_nothing(clock):
    policy, n = WaitPolicy(), _Counting(over=False)
    other = _busy_wait(policy, n)
    steps = policy.steps(n, _Target(7))
    assert _step(steps, clock, 2_000_000) is None
    assert _step(steps, clock, 2_000_000) is None
    steps.close()  # cancelled at its yield
    assert n.watched == 0
    other.close()
    assert not policy.busy()
