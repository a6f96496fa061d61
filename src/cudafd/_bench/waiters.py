"""The ways of awaiting a kernel whose length is not known in advance, for the lateness section.

Each way is ``async fn(stream, mark)``, called right after the kernel and
its end event (``mark``, :mod:`.ends`) were enqueued on ``stream``; it
returns once the caller's event loop knows the kernel is over:

* ``cudafd_default``: ``await cudafd.wait(stream)`` (the loop's default Notifier);
* ``cudafd_<m>``: ``await cudafd.wait(stream, notifier=cudafd.Notifier(m))``
  for every mechanism in ``cudafd.MECHANISMS`` (one Notifier per mechanism);
* ``cudafd_ml1ms``: the same with ``Notifier(None, max_lateness=1e-3)``,
  where this cudafd's Notifier takes ``max_lateness`` (else not measured,
  with a note);
* ``sleep0`` / ``sleep1ms``: ``while not query(end): await asyncio.sleep(0 | 1 ms)``;
* ``executor``: ``run_in_executor(None, end.synchronize)`` on a blocking-sync event;
* ``thread20us``: one plain Python thread for every stream, polling each
  pending end event's query with a 20 µs ``time.sleep`` between scans, and
  handing a finished one to the loop with ``call_soon_threadsafe``;
* ``spin_floor``: ``while not query(end): pass`` on the loop's thread (it
  stalls every other task: one-stream workloads only). The least a waiter
  on this thread can be late, anchor error included (:mod:`.clocks`).

One way is a bound, not a way anyone would wait (it costs a core or more):

* ``bound_handoff``: a ``Notifier("spin")`` watched directly (no fast path,
  no loop-side asks), the loop asleep in its selector on the Notifier's fd
  until the core's spinning poller, which sees the end within a few
  microseconds, writes it. The least any way whose loop sleeps until it is
  told can be late on this machine: the wake of a loop that slept through
  the kernel and the task's resumption. Not a Pareto candidate (BOUNDS).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import cudafd

__all__ = ["BASELINES", "BOUNDS", "FLOOR", "HANDOFF", "LABELS", "Way", "all_keys", "build", "cudafd_keys", "has_max_lateness"]

FLOOR = "spin_floor"
BASELINES = ("sleep0", "sleep1ms", "executor", "thread20us")
HANDOFF = "bound_handoff"
BOUNDS = (HANDOFF,)
POLL_INTERVAL_S = 20e-6


def cudafd_keys() -> list[str]:
    """The cudafd ways this cudafd offers: the default, each mechanism, and max_lateness=1 ms."""
    return ["cudafd_default"] + [f"cudafd_{m}" for m in getattr(cudafd, "MECHANISMS", ())] + ["cudafd_ml1ms"]


def all_keys() -> list[str]:
    return cudafd_keys() + list(BASELINES) + list(BOUNDS) + [FLOOR]


def has_max_lateness() -> bool:
    """Whether ``cudafd.Notifier`` takes ``max_lateness`` (feature detection)."""
    try:
        return "max_lateness" in inspect.signature(cudafd.Notifier).parameters
    except (TypeError, ValueError):
        return False


def _label(key: str) -> str:
    fixed = {
        "cudafd_default": "cudafd default",
        "cudafd_ml1ms": "cudafd max_lateness=1ms",
        "sleep0": "sleep(0) poll",
        "sleep1ms": "sleep(1ms) poll",
        "executor": "executor+blocking ev",
        "thread20us": "thread poll 20us",
        HANDOFF: "bound: loop asleep on fd",
        FLOOR: "spin floor",
    }
    return fixed.get(key) or "cudafd " + key[len("cudafd_") :]


class _Labels(dict):
    def __missing__(self, key: str) -> str:
        return _label(key)


LABELS: dict[str, str] = _Labels()


class Way:
    """One way of waiting: ``fn(stream, mark)``, whether its end events block, and its teardown."""

    def __init__(self, fn: Callable[[Any, Any], Awaitable[None]], blocking: bool = False, close=None) -> None:
        self.fn, self.blocking, self._close = fn, blocking, close

    def close(self) -> None:
        if self._close is not None:
            self._close()


def _settle(fut: asyncio.Future, exc: BaseException | None) -> None:
    if not fut.done():
        if exc is None:
            fut.set_result(None)
        else:
            fut.set_exception(exc)


class PollThread:
    """A plain thread polling pending end events every ``interval`` seconds; parks when none is pending."""

    def __init__(self, query: Callable[[Any], bool], interval: float = POLL_INTERVAL_S) -> None:
        self._query, self._interval = query, interval
        self._items: list[tuple[Any, asyncio.Future, asyncio.AbstractEventLoop]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="bench-poll-thread", daemon=True)
        self._thread.start()

    def wait(self, mark: Any) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._lock:
            self._items.append((mark, fut, loop))
        self._wake.set()
        return fut

    def _run(self) -> None:
        sleep, query = time.sleep, self._query
        while not self._stop:
            with self._lock:
                items = list(self._items)
            if not items:
                self._wake.wait()
                self._wake.clear()
                continue
            done = []
            for item in items:
                try:
                    if query(item[0]):
                        done.append((item, None))
                except Exception as exc:  # a fault: the waiter raises it
                    done.append((item, exc))
            if done:
                with self._lock:
                    finished = {id(item[1]) for item, _ in done}
                    self._items = [x for x in self._items if id(x[1]) not in finished]
                for (_, fut, loop), exc in done:
                    loop.call_soon_threadsafe(_settle, fut, exc)
            sleep(self._interval)

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=5)


class FdHandoff:
    """bound_handoff (module docstring): a spin Notifier's fd in the loop's selector, one reader for all waits."""

    def __init__(self) -> None:
        self._n = cudafd.Notifier("spin")
        self._futures: dict[int, asyncio.Future] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def wait(self, stream: Any) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            loop.add_reader(self._n.fileno(), self._drain)
            self._loop = loop
        fut = self._futures[self._n.watch(stream)] = loop.create_future()
        return fut

    def _drain(self) -> None:
        for token, exc in self._n.drain():
            fut = self._futures.pop(token, None)
            if fut is not None:
                _settle(fut, exc)

    def close(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._n.fileno())
        self._n.close()
        self._n.drain()


def _make(key: str, kernels: Any, notifiers: list) -> Way:
    query, sync = kernels.query, kernels.sync
    if key == "cudafd_default":
        wait = cudafd.wait

        async def via_default(stream: Any, mark: Any) -> None:
            await wait(stream)

        return Way(via_default)
    if key.startswith("cudafd_"):
        if key == "cudafd_ml1ms":
            if not has_max_lateness():
                raise RuntimeError("this cudafd's Notifier takes no max_lateness")
            n = cudafd.Notifier(None, max_lateness=1e-3)  # type: ignore[call-arg]
        else:
            mech = key[len("cudafd_") :]
            n = cudafd.Notifier(mech)
            if getattr(n, "mechanism", mech) != mech:
                n.close()
                raise RuntimeError(f"cudafd mechanism {mech!r} unavailable here (got {n.mechanism!r})")
        notifiers.append(n)
        wait = cudafd.wait

        async def via_notifier(stream: Any, mark: Any) -> None:
            await wait(stream, notifier=n)

        return Way(via_notifier)
    if key in ("sleep0", "sleep1ms"):
        delay = 0 if key == "sleep0" else 1e-3
        sleep = asyncio.sleep

        async def polling(stream: Any, mark: Any) -> None:
            while not query(mark):
                await sleep(delay)

        return Way(polling)
    if key == "executor":

        async def executor(stream: Any, mark: Any) -> None:
            await asyncio.get_running_loop().run_in_executor(None, sync, mark)

        return Way(executor, blocking=True)
    if key == "thread20us":
        poller = PollThread(query)

        async def thread_poll(stream: Any, mark: Any) -> None:
            await poller.wait(mark)

        return Way(thread_poll, close=poller.close)
    if key == HANDOFF:
        handoff = FdHandoff()

        async def told(stream: Any, mark: Any) -> None:
            await handoff.wait(stream)

        return Way(told, close=handoff.close)
    if key == FLOOR:

        async def spin(stream: Any, mark: Any) -> None:
            while not query(mark):
                pass

        return Way(spin)
    raise ValueError(f"unknown way of waiting {key!r}")


def build(keys: list[str], kernels: Any, errors: dict[str, str]) -> tuple[dict[str, Way], Callable[[], None]]:
    """The ways of ``keys`` that can be set up here (why not goes into ``errors``), and their teardown."""
    ways: dict[str, Way] = {}
    notifiers: list = []
    for key in keys:
        try:
            ways[key] = _make(key, kernels, notifiers)
        except Exception as exc:
            errors[key] = f"{type(exc).__name__}: {exc}"

    def close() -> None:
        for way in ways.values():
            way.close()
        for n in notifiers:
            n.close()
            n.drain()

    return ways, close
