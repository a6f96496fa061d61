"""Side streams in a device's primary context hold a reference to it, so a
caller that releases the primary context while cudafd keeps side streams
there does not destroy them under it (a dead handle can crash a real driver).
And a primary context retained again after its last release destroyed it has
the old one's handle: a Notifier open across that never gives the driver an
event of the old context."""
from __future__ import annotations

import ctypes

import pytest
from support import MECHANISMS, REAL, first_watch, in_child, release_idle, wait_for_zero_counts

import cudafd
from cudafd._core import driver as _driver

ORDINAL = 1  # the simulator's second device: no other test uses its primary context


def _active(drv, ordinal: int = ORDINAL) -> bool:
    flags, active = ctypes.c_uint(), ctypes.c_int()
    _driver.check(drv.cuDevicePrimaryCtxGetState(ordinal, ctypes.byref(flags), ctypes.byref(active)))
    return bool(active.value)


def test_side_streams_hold_their_primary_context():
    if not REAL:
        _side_streams_hold(ORDINAL)
        return
    # On a GPU the suite shares device 0's primary context: a fresh process, where nothing else holds it.
    in_child("test_primary_context._side_streams_hold(0)")


def _side_streams_hold(ordinal: int) -> None:
    drv = _driver.get()
    drv.init()
    release_idle()
    assert not _active(drv, ordinal), "the device's primary context was in use already"
    ctx, s = ctypes.c_void_p(), ctypes.c_void_p()
    _driver.check(drv.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), ordinal))
    with _driver.pushed(ctx.value):
        _driver.check(drv.cuStreamCreate(ctypes.byref(s), 1))
    with cudafd.fence(s.value, "hostfunc") as f:  # its first watch there makes the side streams
        assert f.wait(10)
    made = cudafd.stats()["streams"]
    assert made >= 1
    with _driver.pushed(ctx.value):
        _driver.check(drv.cuStreamDestroy(s.value))
    _driver.check(drv.cuDevicePrimaryCtxRelease(ordinal))  # the caller's only reference
    assert _active(drv, ordinal), "the primary context was destroyed while cudafd kept side streams in it"
    assert release_idle() == made
    assert not _active(drv, ordinal), "cudafd kept its reference after its side streams went"
    assert cudafd.stats()["contexts"] == 0


@pytest.mark.skipif(REAL, reason="the simulator's contexts of its own")
def test_a_context_that_is_not_primary_takes_no_reference():
    """A context the caller created is not retained (that would create the primary one)."""
    drv = _driver.get()
    drv.init()
    release_idle()
    with cudafd.sim.Device(ORDINAL) as dev:
        s = dev.stream()
        with cudafd.fence(s, "hostfunc") as f:
            assert f.wait(10)
        assert not _active(drv), "watching in a context of the caller's made the primary context"
        s.close()
        assert release_idle() >= 1


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_primary_context_released_under_an_open_notifier(mechanism):
    if not REAL:
        _released_under_an_open_notifier(ORDINAL, mechanism)
        return
    in_child(f"test_primary_context._released_under_an_open_notifier(0, {mechanism!r})")


def _stream(drv, ctx: int) -> int:
    s = ctypes.c_void_p()
    with _driver.pushed(ctx):
        _driver.check(drv.cuStreamCreate(ctypes.byref(s), 1))
    return s.value


def _ctx_id(drv, ctx: int) -> int:
    get = ctypes.CDLL(drv.path).cuCtxGetId
    get.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]
    out = ctypes.c_uint64()
    _driver.check(get(ctx, ctypes.byref(out)), "cuCtxGetId")
    return out.value


def _some_waits(drv, ctx: int, mechanism: str) -> None:
    s = _stream(drv, ctx)
    with cudafd.Notifier(mechanism) as n:
        for _ in range(3):  # the later ones take the first one's pooled event
            first_watch(n, s)
    with _driver.pushed(ctx):
        _driver.check(drv.cuStreamDestroy(s))


def _released_under_an_open_notifier(ordinal: int, mechanism: str) -> None:
    """The caller's last reference to a primary context goes while a Notifier
    that watched there is open: the context stays until the Notifier closes
    (its events and side streams live there), then goes. Retained again, it
    has the old handle (as on an H100) and is a new context, and
    waits there use nothing of the old one."""
    drv = _driver.get()
    drv.init()
    release_idle()
    assert not _active(drv, ordinal), "the device's primary context was in use already"
    dead_before = drv.sim.stats()["dead_handle_calls"] if drv.sim else 0
    old, new = ctypes.c_void_p(), ctypes.c_void_p()
    _driver.check(drv.cuDevicePrimaryCtxRetain(ctypes.byref(old), ordinal))
    old_id = _ctx_id(drv, old.value)
    try:
        s = _stream(drv, old.value)
        with cudafd.Notifier(mechanism) as n:
            first_watch(n, s)  # an event pooled (or side streams made) there
            with _driver.pushed(old.value):
                _driver.check(drv.cuStreamDestroy(s))
            _driver.check(drv.cuDevicePrimaryCtxRelease(ordinal))  # the caller's only reference
            assert _active(drv, ordinal), "the primary context was destroyed under an open Notifier's events"
            _some_waits(drv, old.value, mechanism)  # it still works, with another Notifier too
            s = _stream(drv, old.value)
            first_watch(n, s)
            with _driver.pushed(old.value):
                _driver.check(drv.cuStreamDestroy(s))
        release_idle()
        assert not _active(drv, ordinal), "cudafd kept its reference after its Notifier closed"
        _driver.check(drv.cuDevicePrimaryCtxRetain(ctypes.byref(new), ordinal))
        assert _ctx_id(drv, new.value) != old_id, "retained again: a new context"
        _some_waits(drv, new.value, mechanism)
    finally:
        while _active(drv, ordinal) and drv.cuDevicePrimaryCtxRelease(ordinal) == 0 and release_idle() >= 0:
            pass
    if drv.sim:
        assert new.value == old.value, "the simulator gives a primary context retained again the old handle"
        assert drv.sim.stats()["dead_handle_calls"] == dead_before, "an event of a destroyed context reached the driver"
    left = wait_for_zero_counts()
    assert not any(left.values()), left
