"""``python -m cudafd doctor``: what works here, why not, and a quick self-test.

Useful with no GPU at all: it then says why the driver is unusable and runs
the self-test on the simulator.

Exit status: 0 when every check passed ("all good"), 1 otherwise ("some
checks FAILED"). A check that raises is a FAILED line naming the error, not
a traceback. A malformed $CUDAFD_MECHANISM or $CUDAFD_MAX_LATENESS is a
FAILED "environment" line whatever reads it; the latter fails every
self-test line too, and either the simulator's fault check, which waits on
the default Notifier.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import platform
import sys
import time

from .. import MECHANISMS, CudafdError, LibraryError, Notifier, __version__
from .._core import lib as _lib
from .._core.notifier import check_environment, default_mechanism
from ._device import Setup, choose


def _line(label: str, text: str, width: int = 14) -> None:
    print(f"  {label:<{width}} {text}")


def _native_section() -> bool:
    print("native core")
    try:
        lib = _lib.load()
    except LibraryError as exc:
        for i, part in enumerate(str(exc).splitlines()):
            _line("libcudafd" if i == 0 else "", part)
        _line("", "without it cudafd uses the 'poll' mechanism (pure Python)")
        return False
    version = lib.cudafd_version().decode()
    _line("libcudafd", f"{_lib.loaded_path()} (version {version}, ABI {lib.cudafd_abi_version()})")
    sim = _lib.sim_library_path()
    _line("simulator", sim if os.path.exists(sim) else f"{sim} (not built)")
    return True


def _driver_section(force_sim: bool) -> Setup | None:
    print("CUDA driver")
    from .._core import driver as _driver

    if not force_sim and _lib.committed_driver_path() is None:
        probe = _driver.probe(_lib.default_driver_path())
        if probe.usable:
            _line(probe.path, f"CUDA {probe.version_text} ({probe.version}), {len(probe.devices)} device(s)")
            for i, name in enumerate(probe.devices):
                _line("", f"{i}: {name}")
        else:
            _line(probe.path, f"not usable: {probe.reason}")
    try:
        setup = choose(force_sim)
    except (CudafdError, SystemExit) as exc:
        _line("", f"no driver to test with: {exc}")
        return None
    _line("in use", f"{_lib.driver_path()}: {setup.description}")
    return setup


def _mechanisms_section(native: bool) -> list[str]:
    print("mechanisms")
    usable = []
    lib = _lib.loaded()
    try:
        default = default_mechanism()
    except ValueError:  # (reported with the variables)
        default = None
    for name in MECHANISMS:
        if name == "poll":
            _line(name, "available" + (" (default)" if name == default else "")
                  + " (pure Python: the loop polls cuEventQuery with a timer)")
            usable.append(name)
            continue
        if not native or lib is None:
            _line(name, "unavailable: the native core did not load")
            continue
        rc = lib.cudafd_mechanism_available(_lib.NATIVE_MECHANISMS[name])
        if rc == 0:
            _line(name, "available" + (" (default)" if name == default else ""))
            usable.append(name)
        else:
            _line(name, f"unavailable: {_lib.last_error(lib)}")
    return usable


def _syncfd_section(native: bool) -> None:
    """The syncfd mechanism's self-test, step by step (docs/jetson.md asks Jetson users for this)."""
    print("syncfd (Jetson, experimental: not yet run on a board)")
    if not native:
        _line("syncfd", "unavailable: the native core did not load")
        return
    from .._core import syncfd as _syncfd

    p = _syncfd.probe()
    _line("syncfd", p.summary, width=17)
    for step in p.steps:
        _line(f"syncfd {step.name}", f"{step.result} ({step.what})", width=17)


def _loops_section() -> None:
    print("event loops")
    for mod, note in (
        ("asyncio", "supported"),
        ("uvloop", "supported"),
        ("trio", "supported"),
        ("anyio", "supported, on its asyncio and trio backends"),
        ("sniffio", "used to detect the running library"),
    ):
        found = importlib.util.find_spec(mod) is not None
        _line(mod, f"{'importable' if found else 'not installed'}" + (f" ({note})" if found else ""))


async def _one_wait(setup: Setup, handle: int, mechanism: str) -> float:
    from .. import wait

    with Notifier(mechanism) as n:
        t0 = time.perf_counter()
        setup.launch(handle, 0.001)
        await asyncio.wait_for(wait(handle, notifier=n), 10)
        return time.perf_counter() - t0


def _fence_wait(setup: Setup, handle: int, mechanism: str) -> float:
    from .. import fence

    t0 = time.perf_counter()
    setup.launch(handle, 0.001)
    with fence(handle, mechanism) as f:
        if not f.wait(10):
            raise TimeoutError("fence did not complete in 10 s")
    return time.perf_counter() - t0


def _selftest_section(setup: Setup, mechanisms: list[str]) -> bool:
    print(f"self-test (a 1 ms kernel, on {'the simulator' if setup.kind == 'sim' else 'the GPU'})")
    ok = True
    setup.open()
    try:
        (handle,) = setup.streams(1)
        setup.warm_up(handle)
        for name in mechanisms:
            try:
                t_async = asyncio.run(_one_wait(setup, handle, name))
                t_fence = _fence_wait(setup, handle, name)
            except Exception as exc:  # report, keep going
                ok = False
                _line(name, f"FAILED: {type(exc).__name__}: {exc}")
            else:
                _line(name, f"ok: await {t_async * 1e3:.2f} ms, fence.wait {t_fence * 1e3:.2f} ms")
        if setup.kind == "sim":
            ok = _fault_check() and ok
    finally:
        setup.close()
    return ok


def _fault_check() -> bool:
    from .. import CudaError, sim, wait

    async def go() -> str:
        with sim.Device() as dev:
            s = dev.stream()
            s.launch(0.001, fault="CUDA_ERROR_ILLEGAL_ADDRESS")
            try:
                await asyncio.wait_for(wait(s), 10)
            except CudaError as exc:
                return exc.name
            finally:
                s.close()
        return "no error"

    try:
        got = asyncio.run(go())  # (the default Notifier: $CUDAFD_MECHANISM, $CUDAFD_MAX_LATENESS)
    except Exception as exc:  # report, as the self-test does
        _line("fault", f"FAILED: {type(exc).__name__}: {exc}")
        return False
    good = got == "CUDA_ERROR_ILLEGAL_ADDRESS"
    _line("fault", f"{'ok' if good else 'FAILED'}: a faulting kernel raised {got}")
    return good


def run(force_sim: bool = False) -> int:
    """Print the report; returns 0 if the self-test passed, 1 otherwise."""
    print(f"cudafd {__version__} (Python {platform.python_version()}, {platform.system()} {platform.machine()})")
    for var in ("CUDAFD_LIBRARY", "CUDAFD_DRIVER", "CUDAFD_SIMULATOR", "CUDAFD_MECHANISM", "CUDAFD_MAX_LATENESS",
                "CUDAFD_SYNCFD_FAKE", "CUDA_VISIBLE_DEVICES"):
        if os.environ.get(var):
            _line(var, os.environ[var])
    try:
        check_environment()
        env_ok = True
    except ValueError as exc:  # every Notifier made without a mechanism or max_lateness refuses it
        env_ok = False
        _line("environment", f"FAILED: {exc}")
    native = _native_section()
    setup = _driver_section(force_sim)
    mechanisms = _mechanisms_section(native) if setup is not None else []
    if setup is not None:
        _syncfd_section(native)
    _loops_section()
    if setup is None:
        print("self-test skipped: no driver and no simulator")
        return 1
    ok = _selftest_section(setup, mechanisms) and env_ok
    print("all good" if ok else "some checks FAILED", file=sys.stdout)
    return 0 if ok else 1
