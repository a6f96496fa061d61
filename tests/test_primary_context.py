"""Side streams in a device's primary context hold a reference to it, so a
caller that releases the primary context while cudafd keeps side streams
there does not destroy them under it (a dead handle can crash a real driver)."""
from __future__ import annotations

import ctypes

import pytest
from support import REAL, release_idle

import cudafd
from cudafd._core import driver as _driver

ORDINAL = 1  # the simulator's second device: no other test uses its primary context


def _active(drv) -> bool:
    flags, active = ctypes.c_uint(), ctypes.c_int()
    _driver.check(drv.cuDevicePrimaryCtxGetState(ORDINAL, ctypes.byref(flags), ctypes.byref(active)))
    return bool(active.value)


@pytest.mark.skipif(REAL, reason="releases the GPU's primary context, which the rest of the suite shares there")
def test_side_streams_hold_their_primary_context():
    drv = _driver.get()
    drv.init()
    release_idle()
    assert not _active(drv), "the device's primary context was in use already"
    ctx, s = ctypes.c_void_p(), ctypes.c_void_p()
    _driver.check(drv.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), ORDINAL))
    with _driver.pushed(ctx.value):
        _driver.check(drv.cuStreamCreate(ctypes.byref(s), 1))
    with cudafd.fence(s.value, "hostfunc") as f:  # its first watch there makes the side streams
        assert f.wait(10)
    made = cudafd.stats()["streams"]
    assert made >= 1
    with _driver.pushed(ctx.value):
        _driver.check(drv.cuStreamDestroy(s.value))
    _driver.check(drv.cuDevicePrimaryCtxRelease(ORDINAL))  # the caller's only reference
    assert _active(drv), "the primary context was destroyed while cudafd kept side streams in it"
    assert release_idle() == made
    assert not _active(drv), "cudafd kept its reference after its side streams went"
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
