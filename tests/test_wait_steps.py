"""The shared waiting policy (cudafd/_core/policy.py) driven directly, as an
adapter drives it: each None is one yield to the loop, an int a token to park
on. A stand-in Notifier answers whether the work is over."""
from __future__ import annotations

from cudafd._core.policy import QUICK_YIELD_EVERY, WaitPolicy


class _Target:
    def __init__(self, handle: int) -> None:
        self.kind, self.handle, self.ctx = "stream", handle, 0


class _Notifier:
    """Every stream's work is over; a watch would hand out tokens 1, 2, ..."""

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
    # the later wait must not end while the first is still yielded, however often it steps
    for _ in range(3):
        assert next(later, "ended") is None, "a later wait on the stream ended (or parked) before the earlier one"
    assert _run_to_end(first) == []
    assert _run_to_end(later) == []  # now it ends, its work being over
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
