"""The asyncio adapter's reader: registered once for back-to-back waits, gone once none is in progress."""
from __future__ import annotations

import asyncio

import pytest
from support import MECHANISMS

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
            s.launch(0.2)  # longer than the fast path and the ask again, under any load: every wait parks
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
    # the reader lingers, but no wait is in progress: another loop may take the Notifier
    assert (lingering["fd_holds"], lingering["loop_busy"]) == (1, 0), lingering
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
            s.launch(0.2)  # every wait yields, and the next starts before the look its end scheduled
            await cudafd.wait(s, notifier=n)
        await _passes(3)
        return n, n.statistics()

    n, after = asyncio.run(body())
    n.close()
    assert len(looks) == 10, looks  # one per wait, the last finding none in progress
    assert looks[-1] is False and all(looks[:-1]), looks
    assert (after["fd_holds"], after["loop_busy"]) == (0, 0), after


def test_a_reader_with_nothing_parked_leaves_another_owners_completion(dev):
    """A lingering reader fires while its loop has a wait in progress (busy) but nothing
    parked: what is queued is another owner's (here an adapter token of no future of this
    loop's, as another loop's would be, that claimed the Notifier meanwhile). It must not
    drain it, or that wait never returns."""
    from cudafd._core.targets import resolve
    from cudafd._loops import asyncio_loop

    mine, other = dev.stream(), dev.stream()

    async def body():
        n = cudafd.Notifier()
        parked = asyncio_loop._Parked(asyncio.get_running_loop(), n, lambda: True)
        mine.launch(1.0)
        token = n.adapter_watch(resolve(mine))
        parked.park(token)  # registers the reader
        other.launch(0.01)
        theirs = n.adapter_watch(resolve(other))
        parked.forget(token)  # nothing parked now; "a wait in progress" (busy) all along
        for _ in range(200):
            await asyncio.sleep(0.005)  # the reader fires once the other's end is queued
            if other.idle() and parked.fd < 0:
                break
        return n, theirs, parked.fd, n.adapter_drain()

    n, theirs, fd, drained = asyncio.run(body())
    n.close()
    assert fd < 0  # it fired, and unregistered instead of draining
    assert [t for t, _ in drained] == [theirs], drained


def test_the_reader_goes_when_the_next_wait_takes_the_fast_path(dev):
    s = dev.stream()
    loop = asyncio.new_event_loop()
    counting = _Counting(loop)

    async def body():
        n = cudafd.Notifier()
        s.launch(0.2)
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


def _one_pass_then(loop, n, s, then):
    """Run the loop until a wait of n on s (a 0.3 s kernel) is in progress, then call then(task)."""
    async def main():
        s.launch(0.3)
        task = asyncio.ensure_future(cudafd.wait(s, notifier=n))
        await _passes(4)
        assert n.statistics()["awaited"] == 1
        then(task)
        return task

    return loop.run_until_complete(main())


def test_a_wait_cancelled_in_the_pass_its_notifier_closes_leaves_nothing(dev, mechanism):
    s = dev.stream()
    n = cudafd.Notifier(mechanism)
    loop = asyncio.new_event_loop()
    try:
        task = _one_pass_then(loop, n, s, lambda task: (n.close(), task.cancel()))
        with pytest.raises((asyncio.CancelledError, cudafd.ClosedError)):
            loop.run_until_complete(task)
        loop.run_until_complete(_passes(3))
        after = n.statistics()
    finally:
        loop.close()
    assert (after["pending"], after["fd_holds"], after["fd_open"]) == (0, 0, 0), after
    s.synchronize()


def test_a_loop_closed_with_a_wait_parked_gives_the_fd_back(dev, mechanism):
    import gc

    s = dev.stream()
    n = cudafd.Notifier(mechanism)
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda _loop, _ctx: None)  # "Task was destroyed but it is pending"
    _one_pass_then(loop, n, s, lambda task: None)
    loop.close()
    gc.collect()  # the pending task goes, its coroutine closed
    n.close()
    after = n.statistics()
    assert (after["pending"], after["fd_holds"], after["fd_open"]) == (0, 0, 0), after
    s.synchronize()


def test_a_loop_stopped_in_the_pass_of_its_last_wait_holds_nothing(dev, mechanism):
    """The loop stops before the pass that would unregister the reader: the Notifier
    serves another loop at once, and its close gives the fd back though the stopped
    loop never runs again."""
    s = dev.stream()
    n = cudafd.Notifier(mechanism)
    loop, loop2 = asyncio.new_event_loop(), asyncio.new_event_loop()

    async def last_wait():
        s.launch(0.01)
        await cudafd.wait(s, notifier=n)
        loop.stop()

    async def one():
        s.launch(0.01)
        await cudafd.wait(s, notifier=n)

    try:
        loop.create_task(last_wait())
        loop.run_forever()
        assert n.statistics()["loop_busy"] == 0
        loop2.run_until_complete(one())
        n.close()
        after = n.statistics()
        assert (after["fd_holds"], after["fd_open"]) == (0, 0), after
    finally:
        loop.close()
        loop2.close()


def test_a_finished_wait_kept_alive_by_its_traceback_does_not_hold_the_notifier(dev):
    s = dev.stream()
    n = cudafd.Notifier()
    kept = []

    async def first():
        s.launch(1.0)
        task = asyncio.ensure_future(cudafd.wait(s, notifier=n))
        await _passes(4)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError as exc:
            kept.append(exc)  # its traceback holds the wait's frames
        await _passes(3)

    async def second():
        s2 = dev.stream()
        s2.launch(0.01)
        await cudafd.wait(s2, notifier=n)

    asyncio.run(first())
    asyncio.run(second())  # not refused as "already waited on by another event loop"
    assert kept and n.statistics()["loop_busy"] == 0
    n.close()
    s.synchronize()


class _CollectingLock:
    """A Notifier's lock whose every acquisition runs a collection, as an allocation
    inside the locked section may: a finalizer that calls back into the Notifier then
    runs while this thread holds its lock."""

    def __init__(self, lock) -> None:
        self.lock = lock

    def __enter__(self):
        self.lock.acquire()
        import gc

        gc.collect()

    def __exit__(self, *exc) -> None:
        self.lock.release()

    def _is_owned(self) -> bool:
        return self.lock._is_owned()


@pytest.mark.parametrize("mech", [m for m in MECHANISMS if m != "spin"])  # (spin parks nothing)
def test_a_closed_loops_waits_collected_inside_a_notifier_call_neither_hang_nor_leak(dev, mech):
    """The tasks of a loop closed with waits parked are collected while the Notifier's
    own lock is held (a collection can run at any allocation): their coroutines' ends
    (cancel, giving the reader's fd hold back) are put off to the Notifier's next call
    instead of deadlocking on its lock."""
    import gc

    s = dev.stream()
    n = cudafd.Notifier(mech)
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda _loop, _ctx: None)  # "Task was destroyed but it is pending"

    async def park():
        s.launch(0.3)
        for _ in range(3):
            asyncio.ensure_future(cudafd.wait(s, notifier=n))
        await _passes(5)

    gc.disable()
    try:
        loop.run_until_complete(park())
        loop.close()
        assert n.statistics()["awaited"] == 3
        n._lock = _CollectingLock(n._lock)
        n.drain()  # the collection runs inside: the waits' ends are put off
    finally:
        gc.enable()
    n._lock = n._lock.lock
    n.drain()
    n.close()
    after = n.statistics()
    assert (after["pending"], after["fd_holds"], after["fd_open"]) == (0, 0, 0), after
    s.synchronize()


def test_a_loop_closed_with_a_kept_parked_task_lets_go_of_the_notifier(dev, mechanism):
    """A loop closed while a task it ran is parked on a wait (or, under spin, asking),
    the program still holding the task: the Notifier serves another loop at once, and
    its close gives the fd back and leaves nothing pending."""
    s = dev.stream()
    n = cudafd.Notifier(mechanism)
    loop = asyncio.new_event_loop()
    s.launch(0.5)
    task = loop.create_task(cudafd.wait(s, notifier=n))

    async def until_parked():
        while n.statistics()["awaited"] == 0:
            await asyncio.sleep(0)

    loop.run_until_complete(until_parked())
    loop.close()  # the task stays pending, and referenced

    async def other():
        s2 = dev.stream()
        s2.launch(0.01)
        await cudafd.wait(s2, notifier=n)

    asyncio.run(other())  # not refused as "already waited on by another event loop"
    n.close()
    after = n.statistics()
    assert (after["fd_holds"], after["fd_open"], after["pending"]) == (0, 0, 0), after
    assert not task.done()
    task._log_destroy_pending = False  # (it never ends: its loop is closed)
    s.synchronize()


def test_a_loop_stopped_after_its_last_wait_then_closed_gives_the_fd_back(dev, mechanism):
    """The loop stops in the pass of its last wait (the reader lingers) and is closed
    before the Notifier: the reader's hold goes with it, and the Notifier's close
    releases the fd."""
    import gc

    s = dev.stream()
    n = cudafd.Notifier(mechanism)
    loop = asyncio.new_event_loop()

    async def last_wait():
        s.launch(0.01)
        await cudafd.wait(s, notifier=n)
        asyncio.get_running_loop().stop()

    loop.create_task(last_wait())
    loop.run_forever()
    loop.close()
    del loop
    gc.collect()
    n.close()
    after = n.statistics()
    assert (after["fd_holds"], after["fd_open"]) == (0, 0), after


@pytest.mark.parametrize("flavor", ["asyncio", "uvloop"])
@pytest.mark.parametrize("mechanism", ["event", "hostfunc", "poll"])  # (a spin wait's end is asked, not drained)
def test_a_failed_drain_fails_the_waiter_and_lets_its_wait_go(dev, flavor, mechanism):
    """The Notifier's drain fails under the loop's reader: the waiting coroutine gets
    that error, and its wait is let go (nothing pending is left in the Notifier)."""
    from support import new_loop, prepare

    s = dev.stream()
    prepare(s, mechanism)
    s.launch(0.5)  # running when the wait starts: no fast path
    n = cudafd.Notifier(mechanism)

    def drain():
        raise cudafd.CudafdError("the drain failed")

    async def main():
        n.adapter_drain = drain
        with pytest.raises(cudafd.CudafdError, match="the drain failed"):
            await asyncio.wait_for(n.wait(s), 10)

    loop = new_loop(flavor)
    try:
        loop.run_until_complete(main())
        assert n.statistics()["pending"] == 0, n.statistics()
    finally:
        loop.close()
        n.close()
