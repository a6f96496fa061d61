"""A watch never blocks on the driver's few host notifications.

Host functions and records of blocking-sync events are host notifications:
the driver keeps only a few of a context's in flight, and past them the call
that adds one blocks until the GPU retires one, while every other call into
the context waits behind it (an H200 stalled with 24 blocking-sync records in
flight, or 31-40 host functions, bench/scale_watch.py; the simulator at 24). The core keeps at most 16 of its own in flight: a
hostfunc wait past them has its host function launched later by the
watchdog, or completes unlaunched once the watchdog finds its work over.
The tests of the limit hold waits behind a gate (a kernel on a stream of
its own whose end every stream waits for), check that no watch blocked,
then that every wait completes, in order on each stream, once the gate
opens."""
from __future__ import annotations

import contextlib
import ctypes
import select
import time

import pytest

import cudafd
from cudafd._core import driver as _driver
from support import REAL, RUNNING_S, drain_until, first_watch, wait_for_zero_counts

GATE_S = 2.0
SLOW_WATCH_S = 0.5  # a watch this slow was held up by the driver (the gate holds for GATE_S)


@contextlib.contextmanager
def _gate(dev, streams, seconds=GATE_S):
    """Every stream waits for a kernel of ``seconds`` on a stream of its own;
    yields a function that tells whether the gate is still closed."""
    drv = dev.drv
    g = dev.stream()
    ev = ctypes.c_void_p()
    with _driver.pushed(dev.ctx):
        _driver.check(drv.cuEventCreate(ctypes.byref(ev), 2))  # CU_EVENT_DISABLE_TIMING
    try:
        g.launch(seconds)
        with _driver.pushed(dev.ctx):
            _driver.check(drv.cuEventRecord(ev, g.handle))
            for s in streams:
                _driver.check(drv.cuStreamWaitEvent(s.handle, ev, 0))
        yield lambda: drv.cuEventQuery(ev) != 0
    finally:
        g.synchronize()
        drv.cuEventDestroy(ev)


def _watch_all(n, streams, per_stream):
    """Watch each stream per_stream times; (token, stream index) in watch order, and the slowest watch."""
    order, slowest = [], 0.0
    for _ in range(per_stream):
        for i, s in enumerate(streams):
            t0 = time.monotonic()
            order.append((n.watch(s), i))
            slowest = max(slowest, time.monotonic() - t0)
    return order, slowest


def _complete_in_order(n, order):
    """Every token completes without error, and those of each stream in watch order."""
    done: list[int] = []
    results: dict[int, object] = {}
    deadline = time.monotonic() + 2 * GATE_S + 20
    while len(results) < len(order) and time.monotonic() < deadline:
        select.select([n.fileno()], [], [], 1.0)
        for token, exc in n.drain():
            results[token] = exc
            done.append(token)
    assert len(results) == len(order), f"{len(order) - len(results)} waits never completed"
    assert all(exc is None for exc in results.values()), results
    rank = {t: k for k, t in enumerate(done)}
    by_stream: dict[int, list[int]] = {}
    for token, i in order:
        by_stream.setdefault(i, []).append(rank[token])
    for i, ranks in by_stream.items():
        assert ranks == sorted(ranks), f"stream {i} completed out of order: {ranks}"


def test_hostfunc_waits_past_the_drivers_limit_do_not_block_the_watch(dev):
    streams = [dev.stream() for _ in range(40)]
    with cudafd.Notifier("hostfunc") as n, _gate(dev, streams) as closed:
        order, slowest = _watch_all(n, streams, 2)  # 80 host functions: past the limit
        assert slowest < SLOW_WATCH_S, f"a watch blocked {slowest:.2f} s on the driver"
        assert closed(), "the gate opened before the watches ended: nothing was tested"
        _complete_in_order(n, order)


def test_a_hostfunc_wait_put_off_completes_when_its_own_work_ends(dev):
    """With the 16 host functions in flight held behind a long kernel, and 284
    more waits put off behind them, a wait on another stream put off behind
    those completes once its own short kernel is over (the watchdog's fault
    query asks the oldest wait of each side stream), not when a host function
    comes back. The 300 share one stream, so that on a GPU the two streams and
    their side streams take a hardware queue each."""
    held, short = dev.stream(), dev.stream()
    with cudafd.Notifier("hostfunc") as n:
        first_watch(n, held)  # the context's side streams, made while the GPU is idle
        held.launch(RUNNING_S)
        tokens = {n.watch(held) for _ in range(300)}
        assert cudafd.stats()["notifications"] == 16
        short.launch(0.01)
        token = n.watch(short)
        assert cudafd.stats()["notifications"] == 16, "the short wait's host function was launched"
        got = dict(drain_until(n, token))
        assert got[token] is None, got
        assert not held.idle() and not tokens & got.keys(), "the long kernel ended first: nothing was tested"


@pytest.mark.skipif(REAL, reason="needs nine contexts, which the simulator makes at no cost")
def test_a_put_off_hostfunc_wait_is_asked_however_many_side_streams_are_busy():
    """Eight contexts with all their side streams held by waits behind a long
    kernel (256 oldest waits for the watchdog to ask each period), then a
    short wait put off in a ninth: the watchdog's round asks the oldest wait
    of every side stream, however many, so the short one completes once its
    kernel is over."""
    devices = [cudafd.sim.Device() for _ in range(9)]
    try:
        with cudafd.Notifier("hostfunc") as n:
            tokens = set()
            for d in devices[:8]:
                for s in [d.stream() for _ in range(32)]:
                    s.launch(RUNNING_S)
                    tokens.add(n.watch(s))
            assert cudafd.stats()["streams"] >= 256, cudafd.stats()
            short = devices[8].stream()
            short.launch(0.01)
            token = n.watch(short)
            got = dict(drain_until(n, token))
            assert got[token] is None, got
            assert not tokens & got.keys(), "a long kernel ended first: nothing was tested"
    finally:
        for d in devices:
            d.close()


def test_hostfunc_waits_put_off_and_then_detached_are_never_launched(dev):
    """Closing the notifier detaches the waits whose host function was put
    off: they are dropped unlaunched (the close also retires the side streams
    they were to run on), and everything is freed once the gate opens."""
    streams = [dev.stream() for _ in range(40)]
    drv = dev.drv
    ran_before = drv.sim.stats()["hostfuncs_run"] if drv.sim is not None else 0
    with _gate(dev, streams) as closed:
        n = cudafd.Notifier("hostfunc")
        order, slowest = _watch_all(n, streams, 2)
        launched = cudafd.stats()["notifications"]
        assert 0 < launched <= 16 < len(order), launched
        n.close()  # with 64 of them put off
        del n
        assert closed(), "the gate opened before the close: nothing was tested"
    counts = wait_for_zero_counts()
    assert not any(counts.values()), counts
    if drv.sim is not None:  # only the host functions launched before the close ran
        assert drv.sim.stats()["hostfuncs_run"] - ran_before <= launched
