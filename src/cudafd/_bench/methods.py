"""The ways of awaiting a kernel that the benchmark compares, each as ``async fn(seconds)``.

``make(key, kit, stream)`` returns a coroutine function that enqueues a
``cudafd_spin`` kernel of ``seconds`` on ``stream`` and returns once the
caller's event loop knows it has finished:

* ``floor``: the loop blocked in a spinning ``cuEventSynchronize`` (the
  least a Python caller can pay; it stalls every other task);
* ``executor_blocking`` / ``executor_spinning``: ``run_in_executor`` of
  ``cuEventSynchronize`` on a blocking-sync / spinning event;
* ``sleep0``: ``while not cuEventQuery(): await asyncio.sleep(0)``;
* ``sleep1ms``: the same with ``asyncio.sleep(0.001)``;
* ``numba``: numba-cuda's ``Stream.async_done()`` on an external stream
  (a host callback that takes the GIL on the driver's thread);
* ``cudafd_<mechanism>``: ``await cudafd.Notifier(mechanism).wait(stream)``,
  one Notifier per mechanism shared by every stream (what the default
  ``cudafd.wait`` does with its per-loop Notifier).

Four bounds are not ways of waiting but limits no way of waiting can pass,
measured in the same run so a target they put out of reach shows it:

* ``bound_sleep`` (CPU): the loop thread asleep for exactly the kernel's
  length, then a spinning sync that finds it over: one sleep and one wake
  per kernel, as a notifier that knew each end in advance would cost, with
  no loop, no thread and no fd.
* ``bound_loop`` (CPU): the same oracle inside the event loop: the loop
  sleeps in its own selector on a timerfd armed for the kernel's length,
  and the task resumes through a future, as it would from any notifier's
  fd. What an event-loop program pays at least per awaited kernel: its
  launch, one wake of the loop and one task resumption.
* ``bound_yield`` (throughput): the launch and one bare yield to the loop,
  with no completion check at all. An await of work still running must
  suspend the task at least once, and a bare yield is the cheapest
  suspension there is, so no method can await faster.
* ``bound_query`` (throughput): ``bound_yield`` plus one cuStreamQuery
  whose answer is ignored: the least a method that asks the driver pays.
  Not a bound on every design (a wake through an fd asks nothing), but an
  await that learns its work is over by asking costs at least this.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from .. import MECHANISMS, CudaError, Notifier
from .gpu import EV_BLOCKING, EV_SPIN, NOT_READY, Gpu

__all__ = ["BASELINES", "BOUNDS", "CUDAFD", "LABELS", "Kit", "close_all", "make", "make_each"]

Method = Callable[[float], Awaitable[None]]

CUDAFD = tuple(f"cudafd_{m}" for m in MECHANISMS)
BASELINES = ("floor", "executor_blocking", "executor_spinning", "sleep0", "sleep1ms", "numba")
BOUNDS = ("bound_sleep", "bound_loop", "bound_yield", "bound_query")
LABELS = {
    "floor": "floor: loop blocked in spin sync",
    "executor_blocking": "run_in_executor + blocking event",
    "executor_spinning": "run_in_executor + spinning event",
    "sleep0": "while not query(): await sleep(0)",
    "sleep1ms": "sleep(1 ms) polling",
    "numba": "numba-cuda Stream.async_done()",
    **{f"cudafd_{m}": f"cudafd {m}" for m in MECHANISMS},
    "bound_sleep": "bound: thread asleep for the kernel's length",
    "bound_loop": "bound: selector asleep for the kernel's length",
    "bound_yield": "bound: launch + one yield, no wait",
    "bound_query": "bound: launch + one yield + one query",
}


class Kit:
    """What the methods share: the GPU and one Notifier per cudafd mechanism."""

    def __init__(self, gpu: Gpu) -> None:
        self.gpu = gpu
        self._notifiers: dict[str, Notifier] = {}
        self._closers: list[Callable[[], None]] = []

    def on_close(self, fn: Callable[[], None]) -> None:
        """Have close() call ``fn`` (a method's own teardown), before the Notifiers close."""
        self._closers.append(fn)

    def notifier(self, mechanism: str) -> Notifier:
        n = self._notifiers.get(mechanism)
        if n is None:
            n = self._notifiers[mechanism] = Notifier(mechanism)
            if n.mechanism != mechanism:  # the native core did not load: poll stood in
                raise RuntimeError(f"cudafd mechanism {mechanism!r} unavailable (got {n.mechanism!r})")
        return n

    def close(self) -> None:
        while self._closers:
            self._closers.pop()()
        for n in self._notifiers.values():
            n.close()
            n.drain()
        self._notifiers.clear()


def _fail(rc: int, where: str) -> None:
    raise CudaError(rc, where=where)


def make(key: str, kit: Kit, stream: int) -> Method:
    """The coroutine function of method ``key`` on ``stream`` (raises if it cannot be set up here)."""
    gpu = kit.gpu
    drv = gpu.drv
    launch = gpu.launcher(stream)
    record, query, sync = drv.cuEventRecord, drv.cuEventQuery, drv.cuEventSynchronize  # type: ignore[attr-defined]

    if key == "floor":
        ev = gpu.event(EV_SPIN)

        async def floor(seconds: float) -> None:
            launch(seconds)
            if rc := record(ev, stream) or sync(ev):
                _fail(rc, "floor")

        return floor

    if key in ("executor_blocking", "executor_spinning"):
        ev = gpu.event(EV_BLOCKING if key == "executor_blocking" else EV_SPIN)

        async def executor(seconds: float) -> None:
            launch(seconds)
            if rc := record(ev, stream):
                _fail(rc, "cuEventRecord")
            if rc := await asyncio.get_running_loop().run_in_executor(None, sync, ev):
                _fail(rc, "cuEventSynchronize")

        return executor

    if key in ("sleep0", "sleep1ms"):
        ev = gpu.event(EV_SPIN)
        delay = 0 if key == "sleep0" else 0.001
        sleep = asyncio.sleep

        async def polling(seconds: float) -> None:
            launch(seconds)
            if rc := record(ev, stream):
                _fail(rc, "cuEventRecord")
            while (rc := query(ev)) == NOT_READY:
                await sleep(delay)
            if rc:
                _fail(rc, "cuEventQuery")

        return polling

    if key == "bound_sleep":
        ev = gpu.event(EV_SPIN)

        async def asleep(seconds: float) -> None:
            launch(seconds)
            if rc := record(ev, stream):
                _fail(rc, "cuEventRecord")
            time.sleep(seconds)
            if rc := sync(ev):
                _fail(rc, "cuEventSynchronize")

        return asleep

    if key == "bound_loop":
        from .._core.timerfd import OneShot

        ev = gpu.event(EV_SPIN)
        timer = OneShot()
        waiting: list[asyncio.Future] = []
        reading: list[asyncio.AbstractEventLoop] = []

        def fired() -> None:
            timer.clear()
            if waiting and not waiting[0].done():
                waiting[0].set_result(None)

        def close() -> None:
            if reading:
                reading.pop().remove_reader(timer.fileno())
            timer.close()

        kit.on_close(close)

        async def selector_asleep(seconds: float) -> None:
            loop = asyncio.get_running_loop()
            if not reading:
                loop.add_reader(timer.fileno(), fired)
                reading.append(loop)
            launch(seconds)
            if rc := record(ev, stream):
                _fail(rc, "cuEventRecord")
            fut = loop.create_future()
            waiting[:] = [fut]
            timer.arm(seconds)
            await fut
            if rc := sync(ev):
                _fail(rc, "cuEventSynchronize")

        return selector_asleep

    if key == "bound_yield":
        sleep = asyncio.sleep

        async def launch_and_yield(seconds: float) -> None:
            launch(seconds)
            await sleep(0)

        return launch_and_yield

    if key == "bound_query":
        sleep = asyncio.sleep
        stream_query = drv.cuStreamQuery  # type: ignore[attr-defined]

        async def launch_yield_query(seconds: float) -> None:
            launch(seconds)
            await sleep(0)
            stream_query(stream)

        return launch_yield_query

    if key == "numba":
        from numba import cuda

        nstream = cuda.external_stream(stream)
        if not hasattr(nstream, "async_done"):
            raise RuntimeError("this numba has no Stream.async_done()")

        async def numba_done(seconds: float) -> None:
            launch(seconds)
            await nstream.async_done()

        return numba_done

    if key.startswith("cudafd_"):
        wait = kit.notifier(key[len("cudafd_") :]).wait

        async def via_cudafd(seconds: float) -> None:
            launch(seconds)
            await wait(stream)

        return via_cudafd

    raise ValueError(f"unknown method {key!r}")


def make_each(keys: list[str], kit: Kit, stream: int, errors: dict[str, str]) -> dict[str, Method]:
    """``make`` for every key that can be set up here; why not goes into ``errors``."""
    fns: dict[str, Method] = {}
    for key in keys:
        try:
            fns[key] = make(key, kit, stream)
        except Exception as exc:
            errors[key] = f"{type(exc).__name__}: {exc}"
    return fns


def close_all(loop: asyncio.AbstractEventLoop, kit: Kit) -> None:
    """A section's teardown: the Notifiers, the loop's executor and the loop, then the GPU."""
    kit.close()
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()
    kit.gpu.close()
