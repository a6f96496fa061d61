"""ctypes bindings to the CUDA driver that the native core loaded.

Facts relied on:

* dlopen() of a path that is already loaded returns the same handle, so
  binding the path reported by the core (``_lib.driver_path()``) gives Python
  the very library the core uses: with the simulator, one simulated device,
  whose contexts and streams both sides see.
* Entry points are resolved as the core resolves them (native/core/driver.c):
  through the driver's cuGetProcAddress for ABI version ``min(12000,
  cuDriverGetVersion())``. Drivers keep the CUDA 12.0 ABI of every entry
  point available under its base name, so CUDA 12 and 13 drivers behave
  alike. ``cuGetProcAddress_v2(name, &pfn, version, 0, &status)`` exists from
  CUDA 12.0 on; the plain ``cuGetProcAddress`` export is the four-argument
  CUDA 11.3 form (on 12.x drivers too). Plain dlsym is the fallback, with the
  ``_v2`` export first where its signature is the same: the plain export of
  such a name is the legacy (pre-4.0) ABI.
* ctypes releases the GIL for the length of every foreign call, so blocking
  driver calls (cuEventSynchronize, cuStreamSynchronize) do not stall other
  Python threads.

Only Python's own helpers use these bindings (the poll mechanism, the demo
kernel, the simulator wrappers, ``doctor``); waiting is the core's business.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from ctypes import POINTER, byref, c_char_p, c_int, c_int64, c_uint, c_uint64, c_void_p
from dataclasses import dataclass

from . import lib as _lib
from .errors import CudaError, CudafdError, register_name_lookup

__all__ = ["Driver", "get", "loaded", "check", "pushed", "probe", "Probe"]

CUDA_API_VERSION = 12000
CU_EVENT_DEFAULT = 0x0
CU_EVENT_BLOCKING_SYNC = 0x1
CU_EVENT_DISABLE_TIMING = 0x2
CU_STREAM_DEFAULT = 0x0
CU_STREAM_NON_BLOCKING = 0x1
CUDA_SUCCESS = 0
CUDA_ERROR_NOT_READY = 600

_P = c_void_p  # every handle type (CUcontext, CUstream, ...) is a pointer
_CUresult = c_int

# name: argtypes (every entry point returns CUresult)
SIGNATURES: dict[str, list[object]] = {
    "cuInit": [c_uint],
    "cuDriverGetVersion": [POINTER(c_int)],
    "cuGetErrorName": [_CUresult, POINTER(c_char_p)],
    "cuDeviceGetCount": [POINTER(c_int)],
    "cuDeviceGet": [POINTER(c_int), c_int],
    "cuDeviceGetName": [c_char_p, c_int, c_int],
    "cuDevicePrimaryCtxRetain": [POINTER(_P), c_int],
    "cuDevicePrimaryCtxRelease": [c_int],
    "cuDevicePrimaryCtxGetState": [c_int, POINTER(c_uint), POINTER(c_int)],
    "cuCtxGetCurrent": [POINTER(_P)],
    "cuCtxGetDevice": [POINTER(c_int)],
    "cuCtxSetCurrent": [_P],
    "cuCtxPushCurrent": [_P],
    "cuCtxPopCurrent": [POINTER(_P)],
    "cuCtxSynchronize": [],
    "cuStreamCreate": [POINTER(_P), c_uint],
    "cuStreamDestroy": [_P],
    "cuStreamSynchronize": [_P],
    "cuStreamGetCtx": [_P, POINTER(_P)],
    "cuStreamQuery": [_P],
    "cuStreamGetId": [_P, POINTER(c_uint64)],
    "cuStreamWaitEvent": [_P, _P, c_uint],
    "cuEventCreate": [POINTER(_P), c_uint],
    "cuEventDestroy": [_P],
    "cuEventRecord": [_P, _P],
    "cuEventQuery": [_P],
    "cuEventSynchronize": [_P],
    "cuModuleLoadData": [POINTER(_P), c_void_p],
    "cuModuleGetFunction": [POINTER(_P), _P, c_char_p],
    "cuLaunchKernel": [
        _P,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        _P,
        POINTER(c_void_p),
        POINTER(c_void_p),
    ],
}

# The simulator's own calls (cudafd_sim.h), bound by dlsym when present.
SIM_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "cudafdsim_abi_version": (c_int, []),
    "cudafdsim_ctx_create": (_CUresult, [c_int, POINTER(_P)]),
    "cudafdsim_ctx_destroy": (_CUresult, [_P]),
    "cudafdsim_launch": (_CUresult, [_P, c_uint64, _CUresult]),
    "cudafdsim_ctx_fault": (_CUresult, [_P, POINTER(_CUresult)]),
    "cudafdsim_stats": (c_int, [POINTER(c_int64), c_int]),
    "cudafdsim_legacy_calls": (c_int64, []),
}
SIM_STAT_NAMES = ("contexts", "streams", "events", "queued", "hostfuncs_run", "kernels_run", "dead_handle_calls",
                  "busy_semaphore_destroys")


# Entry points whose "_v2" symbol has the signature above (dlsym fallback only;
# e.g. cuStreamGetCtx_v2 has another signature and must not be picked).
_V2_SAME_SIGNATURE = frozenset(
    {"cuCtxPushCurrent", "cuCtxPopCurrent", "cuEventDestroy", "cuStreamDestroy", "cuDevicePrimaryCtxRelease"}
)


def check(res: int, where: str = "") -> None:
    """Raise CudaError unless ``res`` is CUDA_SUCCESS."""
    if res != CUDA_SUCCESS:
        raise CudaError(res, where=where)


def _missing(name: str, path: str):
    def call(*args: object) -> int:
        raise CudafdError(f"the CUDA driver {path} has no entry point {name}")

    return call


class SimCalls:
    """The cudafdsim_* entry points of libcudafd_sim.so."""

    def __init__(self, dll: ctypes.CDLL) -> None:
        for name, (restype, argtypes) in SIM_SIGNATURES.items():
            fn = getattr(dll, name)
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)

    def stats(self) -> dict[str, int]:
        out = (c_int64 * len(SIM_STAT_NAMES))()
        n = self.cudafdsim_stats(out, len(SIM_STAT_NAMES))  # type: ignore[attr-defined]
        return {SIM_STAT_NAMES[i]: int(out[i]) for i in range(max(0, min(n, len(SIM_STAT_NAMES))))}


class Driver:
    """One loaded driver library with every entry point of SIGNATURES as an attribute.

    Entry points the library lacks raise CudafdError when called. ``lookup``
    names how they were found (``"cuGetProcAddress_v2"``, ``"cuGetProcAddress"``
    or ``"dlsym"``) and ``api_version`` the ABI version asked for. ``sim`` is a
    SimCalls when the library is the simulator, else None. Thread-safe: the
    attributes are plain ctypes function pointers.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._dll = dll = ctypes.CDLL(path)
        self._init_lock = threading.Lock()
        self._initialised = False
        self.lookup, self.api_version, gpa = self._lookup(dll)
        self.missing: list[str] = []
        for name, argtypes in SIGNATURES.items():
            addr = self._resolve(dll, gpa, name)
            if addr:
                fn = ctypes.CFUNCTYPE(_CUresult, *argtypes)(addr)  # type: ignore[arg-type]
            else:
                self.missing.append(name)
                fn = _missing(name, path)
            setattr(self, name, fn)
        self._has_stream_id = "cuStreamGetId" not in self.missing  # (CUDA 12.0 and newer)
        self.sim: SimCalls | None = None
        if hasattr(dll, "cudafdsim_abi_version"):
            self.sim = SimCalls(dll)

    @staticmethod
    def _lookup(dll: ctypes.CDLL) -> tuple[str, int, object]:
        """(name of the lookup used, ABI version asked for, a callable(name, pfn, version) -> CUresult or None)."""
        try:
            get_version = dll.cuDriverGetVersion
        except AttributeError:
            return "dlsym", 0, None
        get_version.restype = _CUresult
        get_version.argtypes = [POINTER(c_int)]
        v = c_int(0)
        drv = v.value if get_version(byref(v)) == CUDA_SUCCESS else 0
        version = min(CUDA_API_VERSION, drv)
        if drv >= 12000 and hasattr(dll, "cuGetProcAddress_v2"):
            gpa2 = dll.cuGetProcAddress_v2
            gpa2.restype = _CUresult
            gpa2.argtypes = [c_char_p, POINTER(c_void_p), c_int, c_uint64, POINTER(c_int)]
            status = c_int(0)
            return "cuGetProcAddress_v2", version, lambda name, pfn, ver: gpa2(name, pfn, ver, 0, byref(status))
        if drv >= 11030 and hasattr(dll, "cuGetProcAddress"):
            gpa1 = dll.cuGetProcAddress
            gpa1.restype = _CUresult
            gpa1.argtypes = [c_char_p, POINTER(c_void_p), c_int, c_uint64]
            return "cuGetProcAddress", version, lambda name, pfn, ver: gpa1(name, pfn, ver, 0)
        return "dlsym", version, None

    def _resolve(self, dll: ctypes.CDLL, gpa, name: str) -> int | None:
        if gpa is not None:
            pfn = c_void_p()
            if gpa(name.encode(), byref(pfn), self.api_version) == CUDA_SUCCESS and pfn.value:
                return pfn.value
        for sym in (name + "_v2", name) if name in _V2_SAME_SIGNATURE else (name,):
            try:
                return ctypes.cast(getattr(dll, sym), c_void_p).value
            except AttributeError:
                continue
        return None

    # ---- helpers over the raw entry points ----

    def init(self) -> None:
        """cuInit(0), once; raises CudaError on failure."""
        if self._initialised:
            return
        with self._init_lock:
            if not self._initialised:
                check(self.cuInit(0), "cuInit")  # type: ignore[attr-defined]
                self._initialised = True

    def error_name(self, code: int) -> str | None:
        name = c_char_p()
        if self.cuGetErrorName(code, byref(name)) == 0 and name.value:  # type: ignore[attr-defined]
            return name.value.decode()
        return None

    def version(self) -> int:
        v = c_int()
        check(self.cuDriverGetVersion(byref(v)), "cuDriverGetVersion")  # type: ignore[attr-defined]
        return v.value

    def device_count(self) -> int:
        self.init()
        n = c_int()
        check(self.cuDeviceGetCount(byref(n)), "cuDeviceGetCount")  # type: ignore[attr-defined]
        return n.value

    def device_name(self, ordinal: int) -> str:
        self.init()
        dev = c_int()
        check(self.cuDeviceGet(byref(dev), ordinal), "cuDeviceGet")  # type: ignore[attr-defined]
        buf = ctypes.create_string_buffer(256)
        check(self.cuDeviceGetName(buf, 256, dev), "cuDeviceGetName")  # type: ignore[attr-defined]
        return buf.value.decode(errors="replace")

    def current_ctx(self) -> int:
        ctx = c_void_p()
        check(self.cuCtxGetCurrent(byref(ctx)), "cuCtxGetCurrent")  # type: ignore[attr-defined]
        return ctx.value or 0

    def current_device(self) -> int:
        """The device of the current context, -1 when none is current."""
        dev = c_int()
        return dev.value if self.cuCtxGetDevice(byref(dev)) == CUDA_SUCCESS else -1  # type: ignore[attr-defined]

    def primary_ctx(self, ordinal: int) -> int:
        """Device ``ordinal``'s primary context while it is active (a framework holds it), else 0.
        Not retained: the holder keeps it alive."""
        self.init()
        dev, flags, active, ctx = c_int(), c_uint(), c_int(), c_void_p()
        check(self.cuDeviceGet(byref(dev), ordinal), "cuDeviceGet")  # type: ignore[attr-defined]
        state = self.cuDevicePrimaryCtxGetState(dev, byref(flags), byref(active))  # type: ignore[attr-defined]
        check(state, "cuDevicePrimaryCtxGetState")
        if not active.value:
            return 0
        check(self.cuDevicePrimaryCtxRetain(byref(ctx), dev), "cuDevicePrimaryCtxRetain")  # type: ignore[attr-defined]
        self.cuDevicePrimaryCtxRelease(dev)  # type: ignore[attr-defined]
        return ctx.value or 0

    def stream_key(self, stream: int) -> int:
        """What keeps one stream's waits together, as the native core has it
        (cudafd_stream_key): the driver's id of the stream (cuStreamGetId, unique
        for the process's life) with the top bit set, else the handle (0 for
        CU_STREAM_LEGACY). A driver hands a new stream the handle of one destroyed
        just before, even while the destroyed one's work runs."""
        sid = c_uint64()
        if self._has_stream_id and self.cuStreamGetId(stream, byref(sid)) == CUDA_SUCCESS:  # type: ignore[attr-defined]
            return sid.value | 1 << 63
        return 0 if stream == 1 else stream

    def hold_if_primary(self, ctx: int) -> int:
        """If ``ctx`` is an active primary context, retain it and return its device
        (give it back with ``cuDevicePrimaryCtxRelease``), else -1. Never creates one."""
        with self.current(ctx):
            dev = self.current_device()
        flags, active, primary = c_uint(), c_int(), c_void_p()
        if (dev < 0 or self.cuDevicePrimaryCtxGetState(dev, byref(flags), byref(active)) != CUDA_SUCCESS  # type: ignore[attr-defined]
                or not active.value or self.cuDevicePrimaryCtxRetain(byref(primary), dev) != CUDA_SUCCESS):  # type: ignore[attr-defined]
            return -1
        if primary.value == ctx:
            return dev
        self.cuDevicePrimaryCtxRelease(dev)  # type: ignore[attr-defined]
        return -1

    def stream_ctx(self, stream: int) -> int:
        """The context of a stream (the current one for 0 / legacy / per-thread)."""
        ctx = c_void_p()
        check(self.cuStreamGetCtx(stream, byref(ctx)), "cuStreamGetCtx")  # type: ignore[attr-defined]
        if not ctx.value:
            raise CudaError(201, where="cuStreamGetCtx (no current context for the default stream)")
        return ctx.value

    @contextmanager
    def pushed(self, ctx: int) -> Iterator[None]:
        """Make ``ctx`` current on this thread for the block, restoring the previous one."""
        check(self.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")  # type: ignore[attr-defined]
        try:
            yield
        finally:
            old = c_void_p()
            self.cuCtxPopCurrent(byref(old))  # type: ignore[attr-defined]

    @contextmanager
    def current(self, ctx: int) -> Iterator[None]:
        """Like pushed(), but skips the push/pop when ``ctx`` is already current."""
        if self.current_ctx() == ctx:
            yield
            return
        with self.pushed(ctx):
            yield

    def __repr__(self) -> str:
        kind = "simulator" if self.sim is not None else "driver"
        return f"<cudafd._core.driver.Driver {kind} {self.path!r}>"


_lock = threading.Lock()
_driver: Driver | None = None


def loaded() -> Driver | None:
    """The bound driver if already loaded; never loads."""
    return _driver


def get() -> Driver:
    """The driver the core uses (loading both if needed), bound once per process.

    Raises CudafdError when no driver can be loaded, with what was tried.
    """
    global _driver
    d = _driver
    if d is not None:
        return d
    with _lock:
        if _driver is None:
            path = _lib.driver_path()
            try:
                drv = Driver(path)
            except OSError as exc:
                raise CudafdError(
                    f"cannot load the CUDA driver {path}: {exc}; install the NVIDIA driver, set "
                    "CUDAFD_DRIVER, or call cudafd.use_simulator() (see `python -m cudafd doctor`)"
                ) from exc
            register_name_lookup(drv.error_name)
            _lib.note_bound_driver(path)
            _driver = drv
        return _driver


@contextmanager
def pushed(ctx: int) -> Iterator[None]:
    """Make ``ctx`` current on this thread for the block (see Driver.pushed)."""
    with get().pushed(ctx):
        yield


@dataclass(frozen=True)
class Probe:
    """What probe() found out about a driver library, without committing to it."""

    path: str
    usable: bool
    reason: str = ""
    version: int = 0
    devices: tuple[str, ...] = ()

    @property
    def version_text(self) -> str:
        return f"{self.version // 1000}.{self.version % 1000 // 10}" if self.version else "?"


def probe(path: str | None = None) -> Probe:
    """Look at a driver library (default $CUDAFD_DRIVER or libcuda.so.1) and say if it is usable.

    Usable means: it loads, cuInit(0) succeeds and it has at least one device.
    Nothing is registered: the core and get() stay free to choose another driver.
    """
    path = path or _lib.default_driver_path()
    try:
        drv = Driver(path)
    except OSError as exc:
        return Probe(path, False, f"cannot load {path}: {exc}")
    if "cuInit" in drv.missing or "cuDeviceGetCount" in drv.missing:
        return Probe(path, False, f"{path} lacks cuInit/cuDeviceGetCount")
    try:
        version = drv.version()
    except CudafdError:
        version = 0
    try:
        drv.init()
        n = drv.device_count()
    except CudaError as exc:
        return Probe(path, False, f"cuInit/cuDeviceGetCount failed: {exc.name}", version)
    if n <= 0:
        return Probe(path, False, "the driver sees no device", version)
    names = []
    for i in range(n):
        try:
            names.append(drv.device_name(i))
        except CudafdError:
            names.append(f"device {i}")
    return Probe(path, True, "", version, tuple(names))
