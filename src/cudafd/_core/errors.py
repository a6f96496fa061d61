"""Exceptions raised by cudafd, and the mapping from native return codes to them.

One base class, :class:`CudafdError`. A failure reported by the CUDA driver
(a fault in awaited GPU work, a bad handle, ...) is a :class:`CudaError` that
carries the driver's numeric ``code`` and symbolic ``name``; its message says
what to do about it. The native core's negative ``CUDAFD_E_*`` codes are turned
into exceptions by :func:`from_rc`, with the core's thread-local description of
the failure (``cudafd_last_error()``) as the message.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "CudafdError",
    "CudaError",
    "ClosedError",
    "LibraryError",
    "InvalidStateError",
    "error_name",
    "from_rc",
]

# Return codes of the native core (include/cudafd.h).
E_OK = 0
E_INVALID = -1
E_CLOSED = -2
E_NOMEM = -3
E_SYS = -4
E_NODRIVER = -5
E_STATE = -6
E_CUDA = -7
E_UNSUPPORTED = -8
E_UNKNOWN_TOKEN = -9

# Completion status / CUresult values cudafd itself refers to.
CUDA_SUCCESS = 0
CUDA_ERROR_NOT_READY = 600

# The driver's own names for the CUresult values cudafd is likely to meet. Used
# when no driver is loaded to ask (cuGetErrorName is preferred when one is).
CUDA_ERROR_NAMES: dict[int, str] = {
    0: "CUDA_SUCCESS",
    1: "CUDA_ERROR_INVALID_VALUE",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    4: "CUDA_ERROR_DEINITIALIZED",
    34: "CUDA_ERROR_STUB_LIBRARY",
    46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    200: "CUDA_ERROR_INVALID_IMAGE",
    201: "CUDA_ERROR_INVALID_CONTEXT",
    209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
    218: "CUDA_ERROR_INVALID_PTX",
    222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
    400: "CUDA_ERROR_INVALID_HANDLE",
    500: "CUDA_ERROR_NOT_FOUND",
    600: "CUDA_ERROR_NOT_READY",
    700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
    702: "CUDA_ERROR_LAUNCH_TIMEOUT",
    709: "CUDA_ERROR_CONTEXT_IS_DESTROYED",
    710: "CUDA_ERROR_ASSERT",
    714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
    715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    716: "CUDA_ERROR_MISALIGNED_ADDRESS",
    717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    718: "CUDA_ERROR_INVALID_PC",
    719: "CUDA_ERROR_LAUNCH_FAILED",
    801: "CUDA_ERROR_NOT_SUPPORTED",
    802: "CUDA_ERROR_SYSTEM_NOT_READY",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    999: "CUDA_ERROR_UNKNOWN",
}
CUDA_ERROR_CODES: dict[str, int] = {name: code for code, name in CUDA_ERROR_NAMES.items()}

# Errors after which the context is unusable ("sticky"): every later call on it
# returns the same error until the process (or, for a non-primary context, the
# context) is recreated. The core's list (waits.c, is_sticky) less
# CUDA_ERROR_CONTEXT_IS_DESTROYED, whose advice is the destroyed context's.
_STICKY = frozenset({214, 700, 702, 710, 714, 715, 716, 717, 718, 719})

# Functions that know the driver's name for a CUresult, most authoritative first.
# _lib and _driver register into this once they have loaded something.
_name_lookups: list[Callable[[int], str | None]] = []


def register_name_lookup(lookup: Callable[[int], str | None]) -> None:
    """Let error_name() ask a loaded library (the core or the driver) first."""
    if lookup not in _name_lookups:
        _name_lookups.append(lookup)


def error_name(code: int) -> str:
    """The driver's name for a CUresult, e.g. ``CUDA_ERROR_ILLEGAL_ADDRESS`` for 700."""
    for lookup in _name_lookups:
        try:
            name = lookup(code)
        except Exception:  # a lookup must never hide the error being reported
            name = None
        if name and name != f"CUDA_ERROR_{code}":  # the core's fallback spelling
            return name
    return CUDA_ERROR_NAMES.get(code, f"CUDA_ERROR_{code}")


def _advice(code: int) -> str:
    if code in _STICKY:
        return (
            "the GPU work faulted and its CUDA context is now unusable: every later call on it "
            "fails the same way; recreate the context (for a framework's primary context, "
            "restart the process) and fix the faulting kernel (compute-sanitizer finds it)"
        )
    if code == 400:
        return (
            "the stream or event handle is not valid (destroyed, from another process, or made "
            "up): keep the stream/event object alive until the wait has finished"
        )
    if code in (201, 709):
        return (
            "no usable CUDA context: the stream's context was destroyed, or, for the default stream "
            "(0, 1 or 2), none is current on this thread; initialise your framework on this thread "
            "(torch.cuda.init(), cupy's first allocation) or make a context current (cuCtxSetCurrent), "
            "and keep it alive until the wait has finished"
        )
    if code in (3, 4):
        return "the CUDA driver is not initialised (or is shutting down): call cuInit / initialise your framework first"
    if code in (100, 101, 46):
        return "no usable CUDA device: check nvidia-smi, CUDA_VISIBLE_DEVICES, or use cudafd.use_simulator()"
    if code in (209, 218, 222):
        return "the kernel image does not suit this GPU or driver: update the driver"
    return "see the CUDA driver API documentation for this code"


class CudafdError(Exception):
    """Base class of every error cudafd raises.

    ``rc`` is the native core's return code (``CUDAFD_E_*``, negative) where the
    error came from the core, else ``None``.
    """

    rc: int | None = None

    def __init__(self, message: str = "", *, rc: int | None = None) -> None:
        super().__init__(message)
        if rc is not None:
            self.rc = rc


class CudaError(CudafdError):
    """The CUDA driver reported an error for the awaited work or a driver call.

    ``code`` is the CUresult (e.g. 700), ``name`` its symbolic name
    (``"CUDA_ERROR_ILLEGAL_ADDRESS"``). A fault in GPU work is sticky: the
    context it happened in keeps returning it.
    """

    code: int
    name: str

    def __init__(self, code: int, name: str | None = None, where: str = "") -> None:
        self.code = int(code)
        self.name = name or error_name(self.code)
        self.where = where
        what = f"{where}: " if where else ""
        super().__init__(f"{what}{self.name} ({self.code}): {_advice(self.code)}")

    def __reduce__(self):  # picklable despite the custom __init__
        return (type(self), (self.code, self.name, self.where))


class ClosedError(CudafdError):
    """The Notifier or Fence a wait belonged to was closed before the wait finished.

    The GPU work is not cancelled: only the wait was detached.
    """


class InvalidStateError(CudafdError):
    """The call is not allowed in the object's current state (e.g. result() before done())."""


class LibraryError(CudafdError, OSError):
    """The native library (libcudafd.so) could not be loaded or is incompatible."""


def from_rc(rc: int, last_error: str, where: str = "", cuda_code: int | None = None) -> CudafdError:
    """Build the exception for a native return code.

    ``last_error`` is ``cudafd_last_error()`` read on the failing thread;
    ``cuda_code`` is ``cudafd_last_cuda_error()`` for ``CUDAFD_E_CUDA``.
    """
    detail = last_error or f"native error {rc}"
    prefix = f"{where}: " if where else ""
    if rc == E_CUDA and cuda_code:
        err = CudaError(cuda_code, where=where or last_error)
        err.rc = rc
        return err
    if rc == E_CLOSED:
        return ClosedError(f"{prefix}{detail}", rc=rc)
    if rc == E_NODRIVER:
        return CudafdError(
            f"{prefix}{detail}: no usable CUDA driver; install the NVIDIA driver, point "
            "CUDAFD_DRIVER at libcuda.so.1, or call cudafd.use_simulator() "
            "(see `python -m cudafd doctor`)",
            rc=rc,
        )
    if rc == E_UNSUPPORTED:
        return CudafdError(f"{prefix}{detail}: choose another mechanism (see `python -m cudafd doctor`)", rc=rc)
    if rc == E_STATE:
        return CudafdError(f"{prefix}{detail}", rc=rc)
    if rc == E_NOMEM:
        return CudafdError(f"{prefix}out of memory: {detail}", rc=rc)
    return CudafdError(f"{prefix}{detail}", rc=rc)
