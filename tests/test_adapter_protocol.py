"""The Notifier's loop-adapter protocol (adapter_*), driven by hand as an
adapter for another loop would drive it."""
from __future__ import annotations

import threading
import time

import pytest
from support import drain_until

import cudafd
from cudafd._core.targets import resolve


class Owner:
    """An adapter's per-loop object: busy while it says so."""

    def __init__(self) -> None:
        self.waits = 0

    def busy(self) -> bool:
        return self.waits > 0


def test_a_claim_holds_while_its_owner_is_busy(mechanism):
    with cudafd.Notifier(mechanism) as n:
        first, second = Owner(), Owner()
        n.adapter_claim(first)
        first.waits = 1
        with pytest.raises(cudafd.CudafdError, match="another event loop"):
            n.adapter_claim(second)
        assert n.statistics()["loop_busy"] == 1
        first.waits = 0  # the release: no wait in progress any more
        n.adapter_claim(second)
        assert n.statistics()["loop_busy"] == 0


def test_a_watch_after_another_threads_claim_is_refused(dev, mechanism):
    """An owner is busy only once its wait is under way, after its claim: a loop on another
    thread may claim in between. The first loop's watch is then refused, so the two never
    hold tokens of one Notifier at once (each one's drains would take the other's)."""
    s = dev.stream()
    with cudafd.Notifier(mechanism) as n:
        first, second = Owner(), Owner()
        n.adapter_claim(first)  # this thread's loop, its wait not under way yet
        claimed, refused, tokens = threading.Event(), threading.Event(), []

        def other_loop() -> None:
            n.adapter_claim(second)
            second.waits = 1
            claimed.set()
            refused.wait(10)
            tokens.append(n.adapter_watch(resolve(s)))  # the claim's thread watches

        thread = threading.Thread(target=other_loop)
        thread.start()
        assert claimed.wait(10)
        first.waits = 1
        try:
            with pytest.raises(cudafd.CudafdError, match="another event loop"):
                n.adapter_watch(resolve(s))
            assert n.pending == 0
        finally:
            refused.set()
            thread.join()
        assert len(tokens) == 1 and n.pending == 1
        n.cancel(tokens[0])


def test_two_loops_racing_for_one_notifier_never_hang(dev):
    """Two asyncio loops on two threads start a wait on one Notifier together, the fast
    path's query made slow (50 ms) so that each claims while the other's wait is not yet
    under way. Each wait ends or is refused (CudafdError); none is left unresumed, its
    completion drained by the other loop."""
    import asyncio

    n = cudafd.Notifier()
    real_done_now = n.adapter_done_now

    def slow_done_now(t):
        over = real_done_now(t)
        time.sleep(0.05)
        return over

    n.adapter_done_now = slow_done_now
    try:
        for _ in range(6):
            barrier = threading.Barrier(2)
            outcome: dict[str, str] = {}

            def run(name: str, length: float) -> None:
                s = dev.stream()

                async def one_wait() -> str:
                    s.launch(length)
                    barrier.wait()
                    try:
                        await asyncio.wait_for(n.wait(s), 20)
                    except cudafd.CudafdError:
                        return "refused"
                    except asyncio.TimeoutError:
                        return "hung"
                    return "ended"

                outcome[name] = asyncio.run(one_wait())

            threads = [threading.Thread(target=run, args=a) for a in (("a", 0.1), ("b", 0.15))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert "hung" not in outcome.values(), outcome
            assert "ended" in outcome.values(), outcome  # the claim's loop goes on
    finally:
        n.close()


def _adapter_result(n, token):
    """What the adapter learns of its wait: through adapter_drain(), or where its tasks
    ask about their waits (spin), through adapter_ask()."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if n.adapter_asks:
            over, exc = n.adapter_ask(token)
            if over:
                return [(token, exc)]
        else:
            got = n.adapter_drain()
            if got:
                return got
        time.sleep(0.001)
    raise AssertionError(f"the adapter's token {token} never came back")


def _drain_until_kept(n: cudafd.Notifier, token: int) -> list:
    """What drain() returns until it has taken the adapter's ``token`` and kept it for the adapter."""
    got: list = []
    deadline = time.monotonic() + 10
    while not any(t == token for t, _ in n._kept_adapter) and time.monotonic() < deadline:
        n.poll()
        got += n.drain()
        time.sleep(0.001)
    assert [t for t, _ in n._kept_adapter] == [token], "a drain never took the adapter's finished wait"
    return got


def test_adapter_and_plain_completions_go_to_their_own_drain(dev, mechanism):
    s = dev.stream()
    with cudafd.Notifier(mechanism, max_lateness=1e-3) as n:
        s.launch(0.02)
        mine = n.adapter_watch(resolve(s))
        theirs = n.watch(s)
        got = drain_until(n, theirs)
        got += _drain_until_kept(n, mine)  # (spin: found by the poller's backstop)
        assert [t for t, _ in got] == [theirs]  # the adapter's token is kept for it
        assert n.statistics()["awaited"] == 1
        assert _adapter_result(n, mine) == [(mine, None)]
        assert n.statistics()["pending"] == 0


def test_an_adapter_completion_taken_by_drain_still_reaches_the_adapter_after_close(dev, mechanism):
    s = dev.stream()
    n = cudafd.Notifier(mechanism, max_lateness=1e-3)
    s.launch(0.02)
    mine = n.adapter_watch(resolve(s))
    theirs = n.watch(s)
    drain_until(n, theirs)
    _drain_until_kept(n, mine)  # a drain takes the adapter's completion too, and keeps it for it
    n.close()
    assert _adapter_result(n, mine) == [(mine, None)]  # its own result, not the close's
    assert n.drain() == []
    assert n.statistics()["fd_open"] == 0


def test_the_fd_stays_open_while_held_and_close_hooks_run(mechanism):
    n = cudafd.Notifier(mechanism)
    ran = []
    n.adapter_on_close(lambda: ran.append(n.closed))
    fd = n.adapter_hold_fd()
    n.close()
    assert ran == [True]
    assert n.statistics()["fd_open"] == 1 and n.statistics()["fd_holds"] == 1
    n.adapter_release_fd()
    assert n.statistics()["fd_open"] == 0
    with pytest.raises(cudafd.ClosedError):
        n.adapter_hold_fd()
    assert fd >= 0


def test_adapter_state_is_made_once_per_key(mechanism):
    with cudafd.Notifier(mechanism) as n:
        a = n.adapter_state(Owner, Owner)
        assert n.adapter_state(Owner, Owner) is a
        assert n.adapter_state(test_adapter_state_is_made_once_per_key, list) is not a
