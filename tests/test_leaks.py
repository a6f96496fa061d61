"""Black-box leak checks of the asyncio adapter: what event loops leave
behind, counted in /proc/self/fd and cudafd.stats(); and one Notifier used
by hand and by a loop's adapter at once (every loop)."""
from __future__ import annotations

import asyncio
import gc
import os
import time

import pytest

import cudafd
from support import REAL, RUNNING_S, run

NATIVE = ["event", "hostfunc", "spin"]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _close_stragglers() -> None:
    """After a failed test: close what a leak left open, so the suite's own
    leak check after it reports nothing of it (the test's assertion already
    failed)."""
    gc.collect()
    for obj in gc.get_objects():
        if isinstance(obj, cudafd.Notifier):
            obj.close()
            obj._fd_holds = 0  # a reader registered on a loop that no longer exists
            with obj._lock:
                obj._closed_batch = []
                obj._release_if_idle()
    gc.collect()


def test_loops_closed_with_a_wait_pending_leave_nothing(dev):
    s = dev.stream()
    s.launch(5.0 if REAL else RUNNING_S)  # every wait below stays pending (20 loops take ~0.3 s)
    gc.collect()
    fds, stats = _fds(), cudafd.stats()
    try:
        for _ in range(20):
            loop = asyncio.new_event_loop()
            task = loop.create_task(cudafd.wait(s))
            loop.run_until_complete(asyncio.sleep(0.01))
            assert not task.done()
            loop.close()  # with the wait pending
            del loop, task
        deadline = time.monotonic() + 5
        while True:
            gc.collect()
            now = cudafd.stats()
            left = {
                "fds": _fds() - fds,
                "notifiers": now["notifiers"] - stats["notifiers"],
                "eventfds": now["eventfds"] - stats["eventfds"],
            }
            if not any(left.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert not any(left.values()), f"20 loops closed with a wait pending left {left}"
    except BaseException:
        _close_stragglers()
        raise


@pytest.mark.parametrize("mechanism", NATIVE)
def test_one_notifier_under_many_loops_keeps_its_fd_count(dev, mechanism):
    s = dev.stream()
    n = cudafd.Notifier(mechanism)

    async def once() -> None:
        for _ in range(8):  # a few waits per loop: later ones are timed by the loop (its own timer)
            s.launch(0.001)
            await n.wait(s)

    try:
        asyncio.run(once())  # the first run may open what every later one shares
        gc.collect()
        fds = _fds()
        for _ in range(200):
            asyncio.run(once())
        gc.collect()
        grown = _fds() - fds
        assert grown <= 2, f"200 asyncio.run calls on one Notifier took {grown} more fds"
        n.close()
        after = n.statistics()
        assert (after["fd_holds"], after["fd_open"]) == (0, 0), after
    except BaseException:
        n.close()
        _close_stragglers()
        raise



@pytest.mark.parametrize("mechanism", NATIVE + ["poll"])
def test_watch_and_await_share_one_notifier(dev, mechanism, loop_flavor):
    """A token watched by hand comes back from the user's drain() though the
    loop's adapter drains the same Notifier for its awaits."""
    watched, awaited = dev.stream(), dev.stream()

    async def body(api) -> list[int]:
        n = api.notifier
        watched.launch(0.05)
        token = n.watch(watched)
        awaited.launch(0.01)
        await n.wait(awaited)
        awaited.launch(0.1)  # the adapter is still reading the fd when the watched work ends
        await n.wait(awaited)
        got: list[int] = []
        deadline = time.monotonic() + 10
        while token not in got and time.monotonic() < deadline:
            n.poll()
            got += [t for t, _ in n.drain()]
            await api.sleep(0.01)
        assert watched.idle()
        assert token in got, f"the watched token never came back from drain() (pending {n.pending})"
        return got

    run(loop_flavor, mechanism, body)
