"""The driver entry-point lookup on old and new drivers, against the simulator
pretending to be each ($CUDAFD_SIM_DRIVER_VERSION).

Both the core (native/core/driver.c) and Python's bindings (_driver.py) must
bind the current ABI of every entry point: on a CUDA 11.4 driver (JetPack 5)
cuGetProcAddress has no _v2 form and no 12.0 ABI, and the plain exports of
cuCtxPushCurrent, cuStreamDestroy and cuEventDestroy are the legacy pre-4.0
ones. The simulator's legacy exports count their calls, so a test can tell.
The simulator reads its version once per process: other versions than the
default run in subprocesses.
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap

import pytest
from support import REAL, child_env

from cudafd._core import driver as _driver, lib as _lib

pytestmark = pytest.mark.skipif(REAL, reason="pretends to be other drivers: simulator only")

CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NOT_FOUND = 500
VERSIONED = ("cuCtxPushCurrent", "cuCtxPopCurrent", "cuStreamDestroy", "cuEventDestroy", "cuDevicePrimaryCtxRelease")

# Run in a subprocess under a pretended driver version: what Python bound,
# and what the core did, as JSON on stdout.
PROBE = textwrap.dedent(
    """
    import asyncio, ctypes, json
    import cudafd
    from cudafd._core import driver as _driver
    from support import wait_for_zero_counts
    cudafd.use_simulator()
    d = _driver.get()
    def addr(name):
        return ctypes.cast(getattr(d._dll, name), ctypes.c_void_p).value
    bound = {n: ctypes.cast(getattr(d, n), ctypes.c_void_p).value for n in %(names)r}
    out = {
        "version": d.version(),
        "lookup": d.lookup,
        "api_version": d.api_version,
        "python_v2": {n: bound[n] == addr(n + "_v2") for n in bound},
        "python_legacy": {n: bound[n] == addr(n) for n in bound},
    }
    before = d.sim.cudafdsim_legacy_calls()
    with cudafd.sim.Device(0) as dev:
        s = dev.stream()
        for mech in ("event", "hostfunc", "spin"):
            s.launch(0.002)
            with cudafd.fence(s, mechanism=mech) as f:
                assert f.wait(timeout=30)
                f.result()
            async def main():
                with cudafd.Notifier(mech) as n:
                    for _ in range(3):
                        s.launch(0.002)
                        await n.wait(s)
            asyncio.run(main())
        s.close()
    out["left"] = wait_for_zero_counts()
    out["core_legacy_calls"] = d.sim.cudafdsim_legacy_calls() - before
    print(json.dumps(out))
    """
) % {"names": VERSIONED}


def probe(version: int | None) -> dict:
    env = child_env()
    env.pop("CUDAFD_SIM_DRIVER_VERSION", None)
    if version is not None:
        env["CUDAFD_SIM_DRIVER_VERSION"] = str(version)
    r = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"probe under driver version {version} failed:\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("version", "lookup", "api_version"),
    [
        (None, "cuGetProcAddress_v2", 12000),  # the simulator's default: a CUDA 13.0 driver
        (12020, "cuGetProcAddress_v2", 12000),  # JetPack 6.0
        (11040, "cuGetProcAddress", 11040),  # JetPack 5
        (10020, "dlsym", 10020),  # no cuGetProcAddress at all
    ],
)
def test_every_side_binds_the_current_abi(version, lookup, api_version):
    out = probe(version)
    assert out["version"] == (version or 13000)
    assert out["lookup"] == lookup
    assert out["api_version"] == api_version
    assert all(out["python_v2"].values()), f"Python bound a legacy entry point: {out['python_legacy']}"
    assert not any(out["python_legacy"].values())
    assert out["core_legacy_calls"] == 0, "the core called legacy (pre-4.0) entry points"
    assert not any(out["left"].values()), f"native resources left: {out['left']}"


# ---- the pretence itself, so that the tests above can fail -----------------


def _sim() -> ctypes.CDLL:
    return ctypes.CDLL(_lib.sim_library_path())


def test_legacy_exports_are_counted_and_v2_ones_are_not():
    sim = _sim()
    sim.cudafdsim_legacy_calls.restype = ctypes.c_int64
    ctx = ctypes.c_void_p()
    assert sim.cudafdsim_ctx_create(0, ctypes.byref(ctx)) == 0
    try:
        before = sim.cudafdsim_legacy_calls()
        assert sim.cuCtxPushCurrent_v2(ctx) == 0
        assert sim.cuCtxPopCurrent_v2(None) == 0
        assert sim.cudafdsim_legacy_calls() == before
        assert sim.cuCtxPushCurrent(ctx) == 0  # the legacy export works, and is counted
        assert sim.cuCtxPopCurrent(None) == 0
        assert sim.cudafdsim_legacy_calls() == before + 2
    finally:
        assert sim.cudafdsim_ctx_destroy(ctx) == 0


def _gpa(sim: ctypes.CDLL, name: str, version: int) -> tuple[int, int]:
    fn = sim.cuGetProcAddress
    fn.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64]
    pfn = ctypes.c_void_p()
    return fn(name.encode(), ctypes.byref(pfn), version, 0), pfn.value or 0


def test_lookup_serves_each_abi_from_its_version():
    sim = _sim()
    v2 = ctypes.cast(sim.cuStreamDestroy_v2, ctypes.c_void_p).value
    legacy = ctypes.cast(sim.cuStreamDestroy, ctypes.c_void_p).value
    assert v2 != legacy
    assert _gpa(sim, "cuStreamDestroy", 12000) == (0, v2)
    assert _gpa(sim, "cuStreamDestroy", 4000) == (0, v2)
    assert _gpa(sim, "cuStreamDestroy", 3020) == (0, legacy)
    assert _gpa(sim, "cuStreamDestroy", 99000)[0] == CUDA_ERROR_INVALID_VALUE  # above the driver's version
    assert _gpa(sim, "cuNoSuchEntryPoint", 12000) == (CUDA_ERROR_NOT_FOUND, 0)


LOOKUP_114 = textwrap.dedent(
    """
    import ctypes, json, sys
    sim = ctypes.CDLL(sys.argv[1])
    out = {}
    v = ctypes.c_int()
    sim.cuDriverGetVersion(ctypes.byref(v))
    out["version"] = v.value
    pfn = ctypes.c_void_p()
    st = ctypes.c_int(-1)
    out["v2_rc"] = sim.cuGetProcAddress_v2(b"cuStreamDestroy", ctypes.byref(pfn), 11040, ctypes.c_uint64(0), ctypes.byref(st))
    out["v2_pfn"] = pfn.value
    gpa = sim.cuGetProcAddress
    gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64]
    out["rc_12000"] = gpa(b"cuStreamDestroy", ctypes.byref(pfn), 12000, 0)
    out["rc_11040"] = gpa(b"cuStreamDestroy", ctypes.byref(pfn), 11040, 0)
    out["is_v2"] = pfn.value == ctypes.cast(sim.cuStreamDestroy_v2, ctypes.c_void_p).value
    gpa(b"cuGetProcAddress", ctypes.byref(pfn), 11040, 0)
    out["gpa_is_plain"] = pfn.value == ctypes.cast(sim.cuGetProcAddress, ctypes.c_void_p).value
    print(json.dumps(out))
    """
)


def test_an_11_4_driver_has_only_the_four_argument_lookup():
    env = dict(os.environ, CUDAFD_SIM_DRIVER_VERSION="11040")
    r = subprocess.run([sys.executable, "-c", LOOKUP_114, _lib.sim_library_path()], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["version"] == 11040
    assert out["v2_rc"] == CUDA_ERROR_NOT_FOUND and not out["v2_pfn"]  # stands for "absent"
    assert out["rc_12000"] == CUDA_ERROR_INVALID_VALUE  # 12.0 is above this driver
    assert out["rc_11040"] == 0 and out["is_v2"]
    assert out["gpa_is_plain"]


def test_this_process_binds_through_the_v2_lookup():
    d = _driver.get()
    assert d.version() == 13000
    assert (d.lookup, d.api_version) == ("cuGetProcAddress_v2", 12000)
