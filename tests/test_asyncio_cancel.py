"""The asyncio adapter under cancellation: at every point of a wait, nothing is lost and nothing is left."""
from __future__ import annotations

import asyncio

import pytest
from support import REAL, new_loop

import cudafd
from cudafd._loops import asyncio_fence, asyncio_loop

ASYNCIO_LOOPS = ["asyncio", "uvloop"]


def _run(loop_name, body):
    if loop_name == "uvloop":
        pytest.importorskip("uvloop")
    loop = new_loop(loop_name)
    try:
        return loop.run_until_complete(body())
    finally:
        loop.close()


_REAL_FAULT = pytest.mark.skipif(REAL, reason="faults on a GPU end its primary context: the simulator's are per context")


@pytest.mark.parametrize("fault", [pytest.param(True, marks=_REAL_FAULT), False])
@pytest.mark.parametrize("loop_name", ASYNCIO_LOOPS)
def test_a_fault_drained_before_its_task_runs_survives_a_cancel(dev, loop_name, fault, monkeypatch):
    """The drain settles the wait's future with the fault; the task is cancelled before it
    runs (a timeout, a sibling's failure in the same pass). The fault must not be lost:
    the task raises it, as trio's woken task returns its outcome. A success lets the
    cancellation through."""
    s = dev.stream()
    resolve = asyncio_loop._Parked.resolve
    cancelled = []

    def resolve_then_cancel(self, results):
        resolve(self, results)
        if results:
            cancelled.append(task.cancel())

    monkeypatch.setattr(asyncio_loop._Parked, "resolve", resolve_then_cancel)

    async def body():
        nonlocal task
        n = cudafd.Notifier()
        s.launch(0.05, fault=fault)
        task = asyncio.ensure_future(cudafd.wait(s, notifier=n))
        try:
            await task
        except (cudafd.CudaError, asyncio.CancelledError) as exc:
            outcome = exc
        await asyncio.sleep(0)
        stats = n.statistics()
        n.close()
        return outcome, stats

    task = None
    outcome, stats = _run(loop_name, body)
    assert cancelled == [True]
    assert isinstance(outcome, cudafd.CudaError if fault else asyncio.CancelledError), repr(outcome)
    assert (stats["pending"], stats["fd_holds"]) == (0, 0), stats


@pytest.mark.parametrize("fault", [pytest.param(True, marks=_REAL_FAULT), False])
@pytest.mark.parametrize("loop_name", ASYNCIO_LOOPS)
def test_a_fence_fault_found_before_its_task_runs_survives_a_cancel(dev, loop_name, fault, monkeypatch):
    """``await fence``: the reader finds the fence's fault and settles the awaiting
    future; the task is cancelled before it runs. The task raises the fault, as an
    ``await cudafd.wait()`` does; a success lets the cancellation through."""
    s = dev.stream()
    fire = asyncio_fence._ReadinessWaiter._fire
    cancelled = []

    def fire_then_cancel(self):
        ready = fire(self)
        if ready:
            cancelled.append(task.cancel())
        return ready

    monkeypatch.setattr(asyncio_fence._ReadinessWaiter, "_fire", fire_then_cancel)

    async def awaited(f):
        await f

    async def body():
        nonlocal task
        s.launch(0.05, fault=fault)
        with cudafd.fence(s) as f:
            task = asyncio.ensure_future(awaited(f))
            try:
                await task
            except (cudafd.CudaError, asyncio.CancelledError) as exc:
                outcome = exc
            stats = f._notifier.statistics()
        return outcome, stats

    task = None
    outcome, stats = _run(loop_name, body)
    assert cancelled == [True]
    assert isinstance(outcome, cudafd.CudaError if fault else asyncio.CancelledError), repr(outcome)
    assert stats["fd_holds"] == 0, stats
