"""A context of the caller's own, destroyed once its waits were let go of
(cancelled, or their Notifier closed) and ``cudafd_release_idle`` returned,
while another Notifier stays open: nothing of cudafd's reaches the driver
with a handle of the dead context afterwards (a real driver crashes on one),
and the open Notifier's wait completes. The same with the poll mechanism's
Notifier itself kept open, its wait in the dead context having ended or been
cancelled."""
from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator

import pytest
from support import (
    REAL,
    drain_until,
    in_child,
    live_counts,
    release_idle,
    wait_for_zero_counts,
)

import cudafd
from cudafd._core import driver as _driver
from cudafd._core import kernels as _kernels

# The mechanisms whose waits the core's poller asks about. A hostfunc wait
# whose host function has not run is asked about by the watchdog until it
# runs (cudafd.h, cudafd_release_idle); poll's events are the Notifier's own.
POLLER_MECHANISMS = ("event", "spin")


@pytest.mark.parametrize("how", ["cancel", "close"])
@pytest.mark.parametrize("mechanism", POLLER_MECHANISMS)
def test_an_own_context_destroyed_after_its_waits_were_let_go(mechanism, how):
    _run(mechanism, how, False)


@pytest.mark.parametrize("how", ["cancel", "close"])
def test_an_own_context_destroyed_after_its_hostfunc_work_ended(how):
    """Its host function ran (the context was synchronized) when the wait was let
    go of: cudafd_release_idle waits for the watchdog to take the wait, which
    asks about its event once more, before the context is destroyed."""
    _run("hostfunc", how, True)


@pytest.mark.parametrize("how", ["end", "cancel"])
def test_an_own_context_destroyed_under_an_open_poll_notifier(how):
    """A poll Notifier's wait in a context of the caller's own ended (drained) or was
    cancelled while its kernel ran; the context is destroyed after
    ``cudafd_release_idle`` with the Notifier open, which then serves a wait of
    another context and closes: none of its events of the dead context reaches the
    driver."""
    if not REAL:
        _destroy_under_an_open_poll_notifier(how)
        return
    in_child(f"test_own_context._destroy_under_an_open_poll_notifier({how!r})")


def _destroy_under_an_open_poll_notifier(how: str) -> None:
    with _another_context_beside_mine() as (o, mine), cudafd.Notifier("poll") as n:
        _kernels.launch_spin(mine.stream, 0.001 if how == "end" else 1.5)
        token = n.watch(mine.stream)
        if how == "end":
            assert drain_until(n, token, 30) == [(token, None)]
        else:
            assert n.cancel(token)
        release_idle()
        mine.destroy()
        _kernels.launch_spin(o, 0.01)
        kept = n.watch(o)
        assert drain_until(n, kept, 30) == [(kept, None)]  # the Notifier asked the driver meanwhile


def _run(mechanism: str, how: str, synchronized: bool) -> None:
    if not REAL:
        _destroy_after_letting_go(mechanism, how, synchronized)
        return
    # On a GPU a handle of a destroyed context crashes the process: run it in one of its own.
    in_child(f"test_own_context._destroy_after_letting_go({mechanism!r}, {how!r}, {synchronized!r})")


class _OwnContext:
    """A context the test creates and destroys itself, with one stream."""

    def __init__(self) -> None:
        self.drv = _driver.get()
        self.drv.init()
        if REAL:
            self._cuda = ctypes.CDLL(self.drv.path)
            ctx = ctypes.c_void_p()
            _driver.check(self._cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0), "cuCtxCreate")
            self.ctx = ctx.value
            old = ctypes.c_void_p()
            self.drv.cuCtxPopCurrent(ctypes.byref(old))  # cuCtxCreate made it current here
        else:
            self._sim = cudafd.sim.Device(0)
            self.ctx = self._sim.context
        s = ctypes.c_void_p()
        with _driver.pushed(self.ctx):
            _driver.check(self.drv.cuStreamCreate(ctypes.byref(s), 1))
        self.stream = s.value

    def destroy(self) -> None:
        _kernels.forget(self.ctx)
        if REAL:
            self._cuda.cuCtxDestroy_v2.argtypes = [ctypes.c_void_p]
            _driver.check(self._cuda.cuCtxDestroy_v2(self.ctx), "cuCtxDestroy")
        else:
            self._sim.close()


def _destroy_after_letting_go(mechanism: str, how: str, synchronized: bool) -> None:
    with _another_context_beside_mine() as (o, mine), cudafd.Notifier("event") as stays:
        _kernels.launch_spin(o, 2.0)
        kept = stays.watch(o)
        # still running when its context goes, or over and synchronized
        _kernels.launch_spin(mine.stream, 0.05 if synchronized else 1.5)
        n = cudafd.Notifier(mechanism)
        token = n.watch(mine.stream)
        if synchronized:
            with _driver.pushed(mine.ctx):
                _driver.check(mine.drv.cuCtxSynchronize(), "cuCtxSynchronize")
        if how == "cancel":
            n.cancel(token)
        else:
            n.close()
        release_idle()  # waits for the poller (the watchdog) to let the wait go, frees the context's record
        counts = live_counts()
        assert counts["pending"] == 1, f"the {how} left its wait pending: {counts}"
        mine.destroy()
        n.close()
        del n
        assert dict(drain_until(stays, kept, 30))[kept] is None  # the open Notifier's wait completed, without error


@contextlib.contextmanager
def _another_context_beside_mine() -> Iterator[tuple[int, _OwnContext]]:
    """A stream of another context (the GPU's primary one, as a framework's; a second
    simulated device on the simulator), and a context of the test's own; afterwards
    the stream and the other context go, no event of a destroyed context reached
    the driver (the simulator counts them), and every live count is back at zero."""
    drv = _driver.get()
    drv.init()
    wait_for_zero_counts()
    dead_before = drv.sim.stats()["dead_handle_calls"] if drv.sim else 0
    other = cudafd.sim.Device(1) if drv.sim else None
    if other is not None:
        other_ctx = other.context
    else:  # the GPU's primary context, as a framework's
        primary = ctypes.c_void_p()
        _driver.check(drv.cuDevicePrimaryCtxRetain(ctypes.byref(primary), 0))
        other_ctx = primary.value
    o = ctypes.c_void_p()
    with _driver.pushed(other_ctx):
        _driver.check(drv.cuStreamCreate(ctypes.byref(o), 1))
    yield o.value, _OwnContext()
    with _driver.pushed(other_ctx):
        drv.cuStreamSynchronize(o.value)
        drv.cuStreamDestroy(o.value)
    if other is not None:
        other.close()
    else:
        _kernels.forget(other_ctx)
        drv.cuDevicePrimaryCtxRelease(0)
    if drv.sim:
        assert drv.sim.stats()["dead_handle_calls"] == dead_before, "an event of a destroyed context reached the driver"
    left = wait_for_zero_counts()
    assert not any(left.values()), left
