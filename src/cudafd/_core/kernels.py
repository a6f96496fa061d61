"""A demo/test kernel that runs on a real GPU and on the simulator through the same driver calls.

``cudafd_spin(u64 ns, u32 fault)`` busy-waits on the ``%globaltimer`` register
(nanoseconds, on every GPU since sm_30) until ``ns`` nanoseconds have passed,
and then, if ``fault`` is nonzero, stores to address 0, which the GPU reports
as CUDA_ERROR_ILLEGAL_ADDRESS (sticky: the context is lost). The simulator's
cuModuleLoadData accepts any image and its ``cudafd_spin`` has exactly these
semantics, so one code path serves both.

The PTX targets sm_70 / PTX ISA 7.0: the driver JIT-compiles it for the GPU
at hand (Volta and newer, CUDA 11+ drivers).
"""

from __future__ import annotations

import ctypes
from pathlib import Path
import threading
from ctypes import byref, c_uint32, c_uint64, c_void_p
from typing import Callable

from . import driver as _driver

__all__ = ["PTX", "launch_spin", "launcher", "forget"]

PTX_PATH = Path(__file__).parent.parent / "cudafd_spin.ptx"  # the one copy of the kernel (src/cudafd/)
PTX = PTX_PATH.read_text()

KERNEL_NAME = b"cudafd_spin"

_lock = threading.Lock()
_functions: dict[int, int] = {}  # context handle -> CUfunction (the module stays loaded)


def _function(drv: _driver.Driver, ctx: int) -> int:
    fn = _functions.get(ctx)
    if fn is not None:
        return fn
    with _lock:
        fn = _functions.get(ctx)
        if fn is not None:
            return fn
        image = ctypes.create_string_buffer(PTX.encode())  # NUL-terminated
        module = c_void_p()
        func = c_void_p()
        with drv.current(ctx):
            _driver.check(drv.cuModuleLoadData(byref(module), image), "cuModuleLoadData")  # type: ignore[attr-defined]
            _driver.check(
                drv.cuModuleGetFunction(byref(func), module, KERNEL_NAME),  # type: ignore[attr-defined]
                "cuModuleGetFunction",
            )
        _functions[ctx] = func.value or 0
        return _functions[ctx]


def launch_spin(stream_handle: int, seconds: float, fault: bool = False) -> None:
    """Enqueue ``cudafd_spin`` (1 thread) on the stream: it runs for ``seconds``, then faults if asked.

    The module is loaded once per context (the stream's, from cuStreamGetCtx),
    with that context made current for the load and the launch. Returns as
    soon as the kernel is enqueued. A fault makes the stream's context unusable
    (CUDA_ERROR_ILLEGAL_ADDRESS from then on): on a real GPU use it only in a
    context you can throw away, i.e. a separate process.
    """
    drv = _driver.get()
    drv.init()
    ctx = drv.stream_ctx(stream_handle)
    fn = _function(drv, ctx)
    ns = c_uint64(max(0, int(seconds * 1e9)))
    flt = c_uint32(1 if fault else 0)
    params = (c_void_p * 2)(ctypes.addressof(ns), ctypes.addressof(flt))
    with drv.current(ctx):
        _driver.check(
            drv.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream_handle, params, None),  # type: ignore[attr-defined]
            "cuLaunchKernel",
        )


def launcher(stream_handle: int) -> Callable[..., None]:
    """``launch_spin`` on one stream, prepared: a callable ``(seconds, fault=False)``.

    The function, the parameter block and the stream's context are looked up
    once, so a launch is one context check and one cuLaunchKernel (the
    context is pushed only when another is current). For loops that launch
    on the same stream many times, such as the benchmarks (whose CPU figures
    would otherwise be mostly launch_spin's own setup).
    Valid while the stream lives.
    """
    drv = _driver.get()
    drv.init()
    ctx = drv.stream_ctx(stream_handle)
    fn = _function(drv, ctx)
    ns = c_uint64(0)
    flt = c_uint32(0)
    params = (c_void_p * 2)(ctypes.addressof(ns), ctypes.addressof(flt))
    cur = c_void_p()
    cur_ref = byref(cur)
    get_current = drv.cuCtxGetCurrent  # type: ignore[attr-defined]
    launch = drv.cuLaunchKernel  # type: ignore[attr-defined]

    def launch_prepared(seconds: float, fault: bool = False) -> None:
        ns.value = int(seconds * 1e9) if seconds > 0 else 0
        flt.value = 1 if fault else 0  # (and the closure keeps flt alive: params holds only its address)
        if get_current(cur_ref) == 0 and cur.value == ctx:
            rc = launch(fn, 1, 1, 1, 1, 1, 1, 0, stream_handle, params, None)
        else:
            with drv.pushed(ctx):
                rc = launch(fn, 1, 1, 1, 1, 1, 1, 0, stream_handle, params, None)
        if rc:
            _driver.check(rc, "cuLaunchKernel")

    return launch_prepared


def forget(ctx: int) -> None:
    """Drop the cached function of a context that is being destroyed (its handle may be reused)."""
    with _lock:
        _functions.pop(ctx, None)
