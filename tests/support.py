"""What the tests need from a GPU and from an event loop, the same on the
simulator and on a real CUDA device.

CUDAFD_TEST_DRIVER=real runs the suite on the machine's CUDA driver (device
0); otherwise every test runs on the simulator that ships with the package.
Kernels are launched through the driver entry points in both cases
(cudafd._core.kernels: a PTX spin kernel on a GPU, its simulated twin otherwise).
"""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import os
import select
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import cudafd
from cudafd._core import driver as _driver, kernels as _kernels, lib as _lib

REAL = os.environ.get("CUDAFD_TEST_DRIVER") == "real"
# syncfd runs against the simulator's NvSciSync and host1x fakes (subprocesses
# inherit the setting); on a real driver only where asked for (a Jetson).
if not REAL:
    os.environ.setdefault("CUDAFD_SYNCFD_FAKE", _lib.sim_library_path())
SYNCFD = not REAL or os.environ.get("CUDAFD_TEST_SYNCFD") == "1"
MECHANISMS = ("event", "hostfunc", "spin", "poll") + (("syncfd",) if SYNCFD else ())
# A kernel that outlasts every step of a test that does not wait for it. The
# simulator drops it with the test's context (the dev fixture's teardown), so
# there its length costs nothing; a GPU kernel cannot be cut short and the
# fixture synchronizes the test's streams, so on a GPU it is a second, still
# far beyond the steps that need it running (milliseconds there).
RUNNING_S = 1.0 if REAL else 30.0
LIVE_COUNTS = ("threads", "events", "eventfds", "pending", "notifiers", "contexts", "streams", "notifications")


class Stream:
    """A stream on a test device; implements __cuda_stream__ like any framework's."""

    def __init__(self, device: Device, handle: int) -> None:
        self.device = device
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)

    def launch(self, seconds: float, fault: bool = False) -> None:
        _kernels.launch_spin(self.handle, seconds, fault)

    def idle(self) -> bool:
        """True once every kernel enqueued so far has finished."""
        return self.device.drv.cuStreamQuery(self.handle) == 0

    def synchronize(self) -> None:
        self.device.drv.cuStreamSynchronize(self.handle)


class Device:
    """A context to run test streams in: a fresh simulated context, or the
    primary context of GPU 0 (faults there are tested in subprocesses)."""

    live: Device | None = None  # the test's, for run() to prepare its Notifier in

    def __init__(self, ordinal: int = 0) -> None:
        Device.live = self
        self.streams: list[Stream] = []
        self.pid = os.getpid()
        if REAL:
            self.drv = _driver.get()
            import ctypes

            ctx = ctypes.c_void_p()
            _driver.check(self.drv.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), ordinal))
            self.ctx = ctx.value
            self.ordinal = ordinal
            self.sim = None
        else:
            self.sim = cudafd.sim.Device(ordinal)
            self.drv = _driver.get()
            self.ctx = self.sim.context

    def stream(self) -> Stream:
        import ctypes

        s = ctypes.c_void_p()
        with _driver.pushed(self.ctx):
            _driver.check(self.drv.cuStreamCreate(ctypes.byref(s), 1))
        st = Stream(self, s.value)
        self.streams.append(st)
        return st

    def close(self) -> None:
        if os.getpid() != self.pid:
            return  # a fork()ed child's copy: the driver must not be called there (a crash inside it)
        if Device.live is self:
            Device.live = None
        gc.collect()
        release_idle()  # while the context lives: its kept side streams are still valid handles
        for s in self.streams:
            if REAL:
                self.drv.cuStreamSynchronize(s.handle)
            self.drv.cuStreamDestroy(s.handle)
        self.streams.clear()
        if self.sim is not None:
            self.sim.close()
        else:
            self.drv.cuDevicePrimaryCtxRelease(self.ordinal)
            _kernels.forget(self.ctx)


# ---- one test body, many loops ------------------------------------------------

class Api:
    """What a test body may use: wait, gather, sleep. Bodies are written once and
    run under every flavor; the blocking flavor runs them without any loop."""

    def __init__(self, flavor: str, mechanism: str) -> None:
        self.flavor = flavor
        self.mechanism = mechanism
        self.notifier: cudafd.Notifier | None = None

    async def wait(self, target: Any) -> None:
        if self.flavor == "blocking":
            with cudafd.fence(target, mechanism=self.mechanism) as f:
                assert f.wait(timeout=60), "fence did not complete in 60 s"
                f.result()
            return
        await self.notifier.wait(target)

    async def sleep(self, seconds: float) -> None:
        """The loop's own sleep (time.sleep for the blocking flavor); sleep(0) yields to the loop once."""
        if self.flavor == "blocking":
            time.sleep(seconds)
        elif self.flavor == "trio":
            import trio

            await trio.sleep(seconds)
        else:
            await asyncio.sleep(seconds)

    async def until(self, ready: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Sleep a millisecond at a time until ``ready()`` holds, at most
        ``timeout`` s; ``ready()``'s last answer."""
        deadline = time.monotonic() + timeout
        while not ready() and time.monotonic() < deadline:
            await self.sleep(0.001)
        return ready()

    async def within(self, seconds: float, aw: Awaitable[Any]) -> bool:
        """Await `aw`, cancelled by the loop's own means after `seconds` (asyncio.wait_for,
        trio.move_on_after): True if it finished in time, False if it was cancelled."""
        if self.flavor == "trio":
            import trio

            with trio.move_on_after(seconds):
                await aw
                return True
            return False
        try:
            await asyncio.wait_for(aw, seconds)
        except (asyncio.TimeoutError, TimeoutError):
            return False
        return True

    async def cancelled_when(self, ready: Callable[[], bool], aw: Awaitable[Any]) -> bool:
        """Await `aw`, cancelled by the loop's own means once `ready()` holds (looked at
        once per pass of the loop), however long that takes: True if it was cancelled,
        False if it finished first."""
        if self.flavor == "trio":
            import trio

            async def watch(scope: trio.CancelScope) -> None:
                while not ready():
                    await trio.sleep(0)
                scope.cancel()

            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(watch, scope)
                    await aw
                    nursery.cancel_scope.cancel()
            return scope.cancelled_caught
        task = asyncio.ensure_future(aw)
        while not ready() and not task.done():
            await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    async def settle(self, *aws: Awaitable[Any]) -> list[Any]:
        """gather(), each result being its awaitable's value or the exception it raised."""

        async def one(a: Awaitable[Any]) -> Any:
            try:
                return await a
            except Exception as exc:  # noqa: BLE001 - the caller looks at it
                return exc

        return await self.gather(*(one(a) for a in aws))

    async def gather(self, *aws: Awaitable[Any]) -> list[Any]:
        """Await all of `aws` concurrently; their results in order. As with
        asyncio.gather, each one's first step (up to its first suspension)
        runs in the order given, and the first exception propagates (under
        trio the others are then cancelled: a nursery)."""
        if self.flavor == "blocking":
            return [await a for a in aws]
        if self.flavor == "trio":
            return await _trio_gather(aws)
        return list(await asyncio.gather(*aws))


async def _trio_gather(aws: tuple[Awaitable[Any], ...]) -> list[Any]:
    import trio

    results: list[Any] = [None] * len(aws)
    # trio starts tasks in no set order: each waits until the one before it
    # has run its first step, as asyncio.gather's tasks do in order.
    started = [trio.Event() for _ in aws]

    async def one(i: int, a: Awaitable[Any]) -> None:
        if i:
            await started[i - 1].wait()
        started[i].set()
        results[i] = await a

    if sys.version_info >= (3, 11):
        group_type = BaseExceptionGroup  # noqa: F821 - a builtin since 3.11
    else:  # trio brings the backport
        from exceptiongroup import BaseExceptionGroup as group_type

    try:
        async with trio.open_nursery() as nursery:
            for i, a in enumerate(aws):
                nursery.start_soon(one, i, a)
    except group_type as group:
        leaf: BaseException = group
        while isinstance(leaf, group_type):
            leaf = leaf.exceptions[0]
        raise leaf from None
    return results


def readable(fd: Any, timeout: float) -> bool:
    """Whether ``fd`` (an int or anything with fileno()) turns readable within ``timeout`` s."""
    return bool(select.select([fd], [], [], timeout)[0])


def until(ready: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Whether ``ready()`` holds within ``timeout`` s (looked at every millisecond)."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def drain_until(n: cudafd.Notifier, token: int, timeout: float = 10.0) -> list:
    """What n.drain() returned, polling and waiting on the fd, until it has
    returned ``token``; AssertionError if not within ``timeout``."""
    deadline = time.monotonic() + timeout
    got: list = []
    while time.monotonic() < deadline:
        n.poll()
        got += n.drain()
        if any(t == token for t, _ in got):
            return got
        readable(n.fileno(), 0.001 if n.needs_polling else 0.05)
    raise AssertionError(f"token {token} never came back; got {got}")


def first_watch(n: cudafd.Notifier, target: Any) -> None:
    """One watch of work already over, drained: the notifier's first use of a
    context, where the core makes that context's side streams (a stream made
    while the GPU is busy may wait for it: tests/test_stream_creation.py)."""
    drain_until(n, n.watch(target))


def new_loop(flavor: str) -> asyncio.AbstractEventLoop:
    """A new event loop of an asyncio flavor: "asyncio" (a selector loop) or "uvloop"."""
    if flavor == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.SelectorEventLoop()


def run(flavor: str, mechanism: str, body: Callable[[Api], Awaitable[Any]], prepare: bool = True) -> Any:
    """Run `body(api)` under one flavor: asyncio, uvloop, trio or blocking; on a GPU,
    with the context's side streams made first unless ``prepare`` is false."""
    api = Api(flavor, mechanism)
    if flavor == "blocking":
        coro = body(api)
        try:
            coro.send(None)
        except StopIteration as stop:
            return stop.value
        coro.close()
        raise AssertionError("a blocking body suspended: it awaited something other than Api calls")

    async def main() -> Any:
        api.notifier = cudafd.Notifier(mechanism)
        dev = Device.live
        if REAL and prepare and dev is not None:
            # The side streams before the body's kernels, as the guide advises: each test's
            # leak check releases them, and on a GPU the first watch in a busy context can
            # otherwise wait for its work in a stream creation (tests/test_stream_creation.py)
            # while the tasks' deadlines pass.
            api.notifier.prepare(dev.streams[0] if dev.streams else dev.stream())
        try:
            return await body(api)
        finally:
            api.notifier.close()

    if flavor == "trio":
        import trio

        return trio.run(main)
    loop = new_loop(flavor)
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
    try:
        result = loop.run_until_complete(main())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    assert not errors, f"the loop reported errors: {errors}"
    return result


def live_counts() -> dict[str, int]:
    s = cudafd.stats()
    return {k: s.get(k, 0) for k in LIVE_COUNTS}


def prepare(stream: Stream, mechanism: str) -> None:
    """Make now the streams a later fence of ``mechanism`` in the stream's context needs
    (hostfunc's side streams). On a GPU a stream created while the GPU is busy can hold
    up every CUDA call until it drains (docs/guide.md, "Many streams"): a fence made
    right after a launch could then return only once the kernel ended."""
    with cudafd.Notifier(mechanism) as n:
        n.prepare(stream)


def release_idle() -> int:
    """Destroy the side streams and events the core keeps in the contexts with no
    wait in flight: cudafd_release_idle. 0 where the core is not loaded."""
    lib = _lib.loaded()
    return lib.cudafd_release_idle() if lib is not None else 0


def wait_for_zero_counts(timeout: float = 10.0) -> dict[str, int]:
    """Collect garbage and wait for every live native count to reach zero
    (the side streams kept for later notifiers released first); returns the
    last counts seen (all zero on success)."""
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        release_idle()
        counts = live_counts()
        if not any(counts.values()) or time.monotonic() > deadline:
            return counts
        time.sleep(0.01)


@contextlib.contextmanager
def core_option(option: int, value: int) -> Iterator[None]:
    """A CUDAFD_OPT_* of the native core set to ``value`` for the block (process-wide)."""
    lib = _lib.load()
    old = ctypes.c_int64()
    assert lib.cudafd_get_option(option, ctypes.byref(old)) == 0
    assert lib.cudafd_set_option(option, value) == 0
    try:
        yield
    finally:
        lib.cudafd_set_option(option, old.value)


def committed_lateness_run() -> str:
    """The newest committed GPU run of the benchmark's lateness section (a bench.json under
    bench/results/, the latest by its date_utc)."""
    import glob
    import json

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = []
    for path in glob.glob(os.path.join(root, "bench", "results", "**", "bench.json"), recursive=True):
        with open(path) as f:
            doc = json.load(f)
        if "lateness" in doc.get("sections", {}):
            found.append((doc.get("date_utc", ""), path))
    assert found, "no committed lateness run under bench/results/"
    return max(found)[1]


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a Python subprocess of a test: it imports the cudafd
    under test (the installed package in CI, the source tree in development)
    and this folder's modules."""
    here = os.path.dirname(os.path.abspath(__file__))
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(cudafd.__file__)))
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join([here, package_root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def in_child(call: str, timeout: float = 120) -> None:
    """Run ``call`` (a call of a function of this folder's modules, as
    "test_x._body(0)") in a fresh Python process, and expect it to return:
    on a GPU a handle of a destroyed context kills the process that uses it,
    and a device's primary context is the test's alone only in a process of
    its own."""
    module = call.split(".", 1)[0]
    code = f"import {module}; {call}; print('returned')"
    r = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0 and "returned" in r.stdout, f"rc {r.returncode}: " + r.stdout[-2000:] + r.stderr[-2000:]
