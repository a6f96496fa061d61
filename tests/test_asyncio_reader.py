"""The asyncio adapter's reader: registered once for back-to-back waits, gone once none is in progress."""
from __future__ import annotations

import asyncio

import pytest

import cudafd


class _Counting:
    """Counts a plain asyncio loop's add_reader / remove_reader calls."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.calls: list[str] = []
        add, remove = loop.add_reader, loop.remove_reader

        def add_reader(fd, cb, *args):
            self.calls.append("add")
            return add(fd, cb, *args)

        def remove_reader(fd):
            self.calls.append("remove")
            return remove(fd)

        loop.add_reader, loop.remove_reader = add_reader, remove_reader


async def _passes(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


@pytest.mark.parametrize("mechanism", ["event", "poll"])
def test_back_to_back_waits_register_the_reader_once(dev, mechanism):
    s = dev.stream()
    loop = asyncio.new_event_loop()
    counting = _Counting(loop)

    async def body():
        n = cudafd.Notifier(mechanism)
        holds = []
        for _ in range(8):
            s.launch(0.01)  # longer than the fast path and the ask again: every wait parks
            await cudafd.wait(s, notifier=n)
            assert s.idle()
            holds.append(n.statistics()["fd_holds"])
        lingering = n.statistics()
        await _passes(3)
        return n, holds, lingering, n.statistics()

    try:
        n, holds, lingering, after = loop.run_until_complete(body())
    finally:
        loop.close()
    n.close()
    # dispatcher() probes add_reader once when it is made; then one registration serves all 8 waits
    assert counting.calls == ["add", "remove", "add", "remove"], counting.calls
    assert holds == [1] * 8, holds
    assert lingering["loop_busy"] == 1, lingering
    assert (after["fd_holds"], after["loop_busy"], after["pending"]) == (0, 0, 0), after


def test_keeping_the_reader_costs_one_look_per_wait(dev, monkeypatch):
    """The end of each wait schedules one look at the reader for the next pass; a look that
    finds a wait in progress leaves it to that wait's end instead of looking at every pass."""
    from cudafd._loops import asyncio_loop

    looks = []
    idle = asyncio_loop._Parked._idle

    def counted(self):
        looks.append(self.busy())
        return idle(self)

    monkeypatch.setattr(asyncio_loop._Parked, "_idle", counted)
    s = dev.stream()

    async def body():
        n = cudafd.Notifier()
        for _ in range(10):
            s.launch(0.03)  # every wait yields, and the next starts before the look its end scheduled
            await cudafd.wait(s, notifier=n)
        await _passes(3)
        return n, n.statistics()

    n, after = asyncio.run(body())
    n.close()
    assert len(looks) == 10, looks  # one per wait, the last finding none in progress
    assert looks[-1] is False and all(looks[:-1]), looks
    assert (after["fd_holds"], after["loop_busy"]) == (0, 0), after


def test_the_reader_goes_when_the_next_wait_takes_the_fast_path(dev):
    s = dev.stream()
    loop = asyncio.new_event_loop()
    counting = _Counting(loop)

    async def body():
        n = cudafd.Notifier()
        s.launch(0.01)
        await cudafd.wait(s, notifier=n)  # parked
        await cudafd.wait(s, notifier=n)  # over already: never parks
        await _passes(3)
        return n, n.statistics()

    try:
        n, after = loop.run_until_complete(body())
    finally:
        loop.close()
    n.close()
    assert counting.calls.count("add") == counting.calls.count("remove") == 2, counting.calls
    assert (after["fd_holds"], after["loop_busy"]) == (0, 0), after


def test_a_wait_cancelled_while_the_reader_lingers_leaves_nothing(dev):
    s = dev.stream()

    async def body():
        n = cudafd.Notifier()
        s.launch(0.01)
        await cudafd.wait(s, notifier=n)
        s.launch(5.0)
        task = asyncio.ensure_future(cudafd.wait(s, notifier=n))
        await _passes(4)  # parked on the lingering reader
        assert n.statistics()["awaited"] == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await _passes(3)
        return n, n.statistics()

    n, after = asyncio.run(body())
    assert (after["fd_holds"], after["loop_busy"], after["awaited"]) == (0, 0, 0), after
    n.close()


def test_the_loop_stopping_right_after_the_last_wait_leaves_no_reader(dev):
    s = dev.stream()
    n = cudafd.Notifier()
    loop = asyncio.new_event_loop()

    async def one():
        s.launch(0.01)
        await cudafd.wait(s, notifier=n)

    try:
        loop.run_until_complete(one())
        assert n.statistics()["fd_holds"] == 0  # gone before run_until_complete returned
        loop2 = asyncio.new_event_loop()
        try:
            loop2.run_until_complete(one())  # the Notifier is free for another loop at once
        finally:
            loop2.close()
    finally:
        loop.close()
        n.close()
