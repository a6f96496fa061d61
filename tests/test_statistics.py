"""Notifier.statistics(): what a Notifier holds, by name, under every loop."""
from __future__ import annotations

import time

from support import run

import cudafd

ZERO = {"pending": 0, "watched": 0, "awaited": 0, "loop_busy": 0, "fd_holds": 0, "events": 0}


def test_a_fresh_notifier_holds_nothing(mechanism):
    with cudafd.Notifier(mechanism) as n:
        assert n.statistics() == {**ZERO, "fd_open": 1}


def test_an_await_in_progress_is_counted_and_then_forgotten(dev, loop_flavor, mechanism):
    s = dev.stream()

    async def body(api):
        n = api.notifier
        seen = {}

        async def waiter():
            s.launch(0.3)  # far longer than the look below takes, on any machine
            await n.wait(s)

        async def look():
            deadline = time.monotonic() + 10
            while n.statistics()["awaited"] == 0 and time.monotonic() < deadline:
                await api.sleep(0.001)
            seen.update(n.statistics())

        await api.gather(waiter(), look())
        assert seen["awaited"] == 1 and seen["pending"] == 1 and seen["watched"] == 0, seen
        assert seen["loop_busy"] == 1, seen
        assert seen["fd_holds"] <= 1, seen
        after = n.statistics()
        assert (after["pending"], after["awaited"], after["loop_busy"], after["fd_holds"]) == (0, 0, 0, 0), after

    run(loop_flavor, mechanism, body)


def test_watch_and_drain_are_counted_apart_from_awaits(dev, mechanism):
    s = dev.stream()
    with cudafd.Notifier(mechanism) as n:
        s.launch(0.05)
        token = n.watch(s)
        counts = n.statistics()
        assert (counts["pending"], counts["watched"], counts["awaited"], counts["loop_busy"]) == (1, 1, 0, 0)
        deadline = time.monotonic() + 10
        got = []
        while not got and time.monotonic() < deadline:
            n.poll()
            got = n.drain()
            time.sleep(0.001)
        assert got == [(token, None)]
        counts = n.statistics()
        assert (counts["pending"], counts["watched"], counts["awaited"]) == (0, 0, 0)


def test_close_releases_the_fd_once_its_batch_is_drained(dev, mechanism):
    s = dev.stream()
    n = cudafd.Notifier(mechanism)
    s.launch(0.2)
    n.watch(s)
    n.close()
    assert n.statistics()["pending"] == 1 and n.statistics()["fd_open"] == 1  # the ClosedError to come
    [(_, error)] = n.drain()
    assert isinstance(error, cudafd.ClosedError)
    assert n.statistics() == {**ZERO, "fd_open": 0}
