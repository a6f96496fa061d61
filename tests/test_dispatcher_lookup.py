"""How a wait finds its Dispatcher (cudafd/_loops/asyncio_loop.py: the last one
used, kept weakly, then the weak tables): each Notifier and the loop's default
get their own in any order, a closed default is replaced, loops on two threads
never share one, and the lookup keeps no loop alive."""
from __future__ import annotations

import asyncio
import gc
import threading
import weakref

import pytest
from support import new_loop

import cudafd
from cudafd._loops import asyncio_loop


def _notifier_of(disp: asyncio_loop.Dispatcher) -> cudafd.Notifier | None:
    return disp._notifier_ref()


@pytest.mark.asyncio_only
def test_each_notifier_and_the_default_get_their_own_dispatcher_in_any_order(dev, loop_flavor):
    s = dev.stream()
    n1, n2 = cudafd.Notifier(), cudafd.Notifier()

    async def body() -> None:
        loop = asyncio.get_running_loop()
        order = [n1, None, n2, n1, n1, None, None, n2, n1, None]
        seen = {}
        for n in order:
            s.launch(0.001)
            await cudafd.wait(s, notifier=n)
            disp = asyncio_loop.dispatcher(loop, n)
            seen.setdefault(id(n), disp)
            assert seen[id(n)] is disp, "a Notifier got a second Dispatcher in one loop"
        default = asyncio_loop.default_notifier(loop)
        assert default is not None and default not in (n1, n2)
        assert _notifier_of(seen[id(n1)]) is n1
        assert _notifier_of(seen[id(n2)]) is n2
        assert _notifier_of(seen[id(None)]) is default
        assert len({id(d) for d in seen.values()}) == 3

    loop = new_loop(loop_flavor)
    try:
        loop.run_until_complete(body())
    finally:
        loop.close()
        n1.close()
        n2.close()


def test_a_closed_default_notifier_is_replaced_at_the_next_wait(dev):
    s = dev.stream()

    async def body() -> None:
        loop = asyncio.get_running_loop()
        s.launch(0.001)
        await cudafd.wait(s)
        first = asyncio_loop.default_notifier(loop)
        asyncio_loop.close_default_notifier(loop)
        assert first is not None and first.closed
        s.launch(0.001)
        await cudafd.wait(s)  # not ClosedError: a new default
        second = asyncio_loop.default_notifier(loop)
        assert second is not None and second is not first and not second.closed
        assert _notifier_of(asyncio_loop.dispatcher(loop, None)) is second

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(body())
    finally:
        asyncio_loop.close_default_notifier(loop)
        loop.close()


def test_a_replaced_default_notifier_is_let_go(dev):
    """A closed default (closed by its user, or by close_default_notifier) is let go once
    replaced, not kept until the loop is collected: a long-lived loop holds only its current one."""
    s = dev.stream()
    gone = []

    async def body() -> None:
        loop = asyncio.get_running_loop()
        for i in range(4):
            s.launch(0.001)
            await cudafd.wait(s)  # (a new default from the second round on)
            n = asyncio_loop.default_notifier(loop)
            weakref.finalize(n, gone.append, i)
            if i % 2:
                asyncio_loop.close_default_notifier(loop)
            else:
                n.close()
            del n
        await cudafd.wait(s)

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(body())
        gc.collect()
        assert sorted(gone) == [0, 1, 2, 3], gone
        assert not asyncio_loop.default_notifier(loop).closed
    finally:
        asyncio_loop.close_default_notifier(loop)
        loop.close()


def test_loops_on_two_threads_never_share_a_dispatcher(dev):
    """Each thread's waits alternate with the other's, so the last-used entry is
    mostly the other loop's: each must still land on its own loop's default."""
    streams = [dev.stream(), dev.stream()]
    start = threading.Barrier(2)
    found: list[set[tuple[int, int]]] = [set(), set()]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        async def body() -> None:
            loop = asyncio.get_running_loop()
            start.wait()
            for _ in range(300):
                streams[i].launch(0.0001)
                await cudafd.wait(streams[i])
                disp = asyncio_loop.dispatcher(loop, None)
                found[i].add((id(disp), id(_notifier_of(disp))))
            assert _notifier_of(asyncio_loop.dispatcher(loop, None)) is asyncio_loop.default_notifier(loop)

        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(body())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            asyncio_loop.close_default_notifier(loop)
            loop.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert len(found[0]) == 1 and len(found[1]) == 1, found
    assert found[0] != found[1]


def test_the_lookup_keeps_no_loop_alive(dev):
    s = dev.stream()
    loop = asyncio.new_event_loop()
    s.launch(0.001)
    loop.run_until_complete(cudafd.wait(s))
    notifier = asyncio_loop.default_notifier(loop)
    ref = weakref.ref(loop)
    loop.close()
    del loop
    gc.collect()
    assert ref() is None, "something still holds the loop of the last wait"
    assert notifier is not None and notifier.closed  # its finalizer closed the default
