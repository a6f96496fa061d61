"""A simulated GPU for machines without one (libcudafd_sim.so), ready to use.

    dev = cudafd.sim.Device()          # a fresh simulated context
    s = dev.stream()                   # implements __cuda_stream__
    s.launch(0.002)                    # a 2 ms "kernel"
    await cudafd.wait(s)
    s.launch(0.001, fault="CUDA_ERROR_ILLEGAL_ADDRESS")   # faults every context when it ends

The simulator is a CUDA driver of its own (the entry points cudafd uses, with
the driver's error codes): streams run in order on a device thread, events
complete in stream order, blocking synchronisation really blocks, a fault is
sticky and, as on a GPU, ends every context alive at the time (a Device made
afterwards is healthy). One process has one driver: creating a Device
switches cudafd to the simulator if no driver was loaded yet, and raises
CudafdError if a real driver already is (set CUDAFD_SIMULATOR=1, or call
cudafd.use_simulator() first).
"""

from __future__ import annotations

import operator
import threading
import weakref
from ctypes import byref, c_int, c_void_p

from ._core import driver as _driver, kernels as _kernels, lib as _lib
from ._core.errors import CUDA_ERROR_CODES, ClosedError, CudaError, CudafdError

__all__ = ["Device", "Stream", "Event", "stats", "driver"]

_switch_lock = threading.Lock()


def driver() -> _driver.Driver:
    """The simulator's driver bindings, switching cudafd to the simulator if nothing was loaded yet."""
    with _switch_lock:
        current = _lib.committed_driver_path()
        if current is None:
            _lib.use_simulator()
        drv = _driver.get()
    if drv.sim is None:
        raise CudafdError(
            f"cudafd already uses the CUDA driver {drv.path}, not the simulator: set "
            "CUDAFD_SIMULATOR=1, or call cudafd.use_simulator() before anything else in cudafd runs"
        )
    drv.init()
    return drv


_KERNEL_MAX_S = 2**63 / 1e9  # the simulator counts a kernel's end in uint64 ns from its start (~292 years)


def _kernel_seconds(seconds: object) -> float:
    """A kernel's length in seconds, checked: a real number in [0, _KERNEL_MAX_S]."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"a kernel's length is a number of seconds (e.g. 0.001), not {seconds!r}")
    if not 0 <= seconds <= _KERNEL_MAX_S:  # (NaN too)
        raise ValueError(f"a kernel's length in seconds must be >= 0 and at most {_KERNEL_MAX_S:.3g}, not {seconds!r}")
    return float(seconds)


def _fault_code(fault: str | int | bool | None) -> int:
    if fault is None or fault is False:
        return 0
    if fault is True:
        return CUDA_ERROR_CODES["CUDA_ERROR_ILLEGAL_ADDRESS"]
    if isinstance(fault, int):
        if not 0 <= fault < 2**31:  # (a CUresult is a C int)
            raise ValueError(f"a fault is a positive CUresult, got {fault}")
        return fault
    if isinstance(fault, str):
        code = CUDA_ERROR_CODES.get(fault) or CUDA_ERROR_CODES.get("CUDA_ERROR_" + fault.upper())
        if code is None:
            raise ValueError(f"unknown CUresult name {fault!r} (e.g. 'CUDA_ERROR_ILLEGAL_ADDRESS')")
        return code
    raise TypeError(f"fault must be a CUresult name or int, not {type(fault).__name__}")


class Device:
    """A fresh simulated context on simulated device ``ordinal`` (each has its own fault state).

    close() destroys the context with its streams and events (blocked
    synchronisations return CUDA_ERROR_CONTEXT_IS_DESTROYED); idempotent.
    Raises ValueError for a device the simulator does not have (it has
    $CUDAFD_SIM_DEVICES, 2 by default), TypeError for an ordinal that is not an int.
    """

    def __init__(self, ordinal: int = 0) -> None:
        self._closed = True  # first: a half-built object is safe to collect
        if isinstance(ordinal, bool):
            raise TypeError("a simulated device ordinal is an int (0, 1, ...), not bool")
        ordinal = operator.index(ordinal)  # (TypeError for a float, a str, ...)
        self._drv = drv = driver()
        count = drv.device_count()
        if not 0 <= ordinal < count:
            raise ValueError(
                f"no simulated device {ordinal}: the simulator has {count} (0 to {count - 1}; "
                "$CUDAFD_SIM_DEVICES sets how many, up to 64)"
            )
        ctx = c_void_p()
        _driver.check(drv.sim.cudafdsim_ctx_create(ordinal, byref(ctx)), "cudafdsim_ctx_create")  # type: ignore[union-attr]
        self.ordinal = ordinal
        self.context: int = ctx.value or 0
        self._children: weakref.WeakSet[Stream | Event] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the simulated Device is closed")

    def stream(self, non_blocking: bool = False) -> Stream:
        """A new stream in this context."""
        self._check_open()
        s = c_void_p()
        flags = _driver.CU_STREAM_NON_BLOCKING if non_blocking else _driver.CU_STREAM_DEFAULT
        with self._drv.pushed(self.context):
            _driver.check(self._drv.cuStreamCreate(byref(s), flags), "cuStreamCreate")  # type: ignore[attr-defined]
        stream = Stream(self, s.value or 0)
        self._children.add(stream)
        return stream

    def fault(self) -> CudaError | None:
        """The context's sticky fault, or None."""
        self._check_open()
        code = c_int()
        _driver.check(self._drv.sim.cudafdsim_ctx_fault(self.context, byref(code)), "cudafdsim_ctx_fault")  # type: ignore[union-attr]
        return CudaError(code.value, where="the simulated context") if code.value else None

    def synchronize(self) -> None:
        """Block until every stream of the context is idle (cuCtxSynchronize). Raises the sticky fault."""
        self._check_open()
        with self._drv.pushed(self.context):
            _driver.check(self._drv.cuCtxSynchronize(), "cuCtxSynchronize")  # type: ignore[attr-defined]

    def close(self) -> None:
        """Destroy the context and everything in it. Idempotent; any thread."""
        with getattr(self, "_lock", _switch_lock):
            if self._closed:
                return
            self._closed = True
        for child in list(self._children):
            child._closed = True
        _kernels.forget(self.context)
        self._drv.sim.cudafdsim_ctx_destroy(self.context)  # type: ignore[union-attr]

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not self._closed:
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<cudafd.sim.Device {self.ordinal} context={getattr(self, 'context', 0):#x} {state}>"


class Stream:
    """A simulated stream. ``__cuda_stream__()`` makes it a cudafd wait target (and a cuda.core one)."""

    def __init__(self, device: Device, handle: int) -> None:
        self._closed = False
        self.device = device
        self.handle = handle

    @property
    def closed(self) -> bool:
        return self._closed

    def __cuda_stream__(self) -> tuple[int, int]:
        if self._closed:
            raise ClosedError("the simulated Stream is closed")
        return (0, self.handle)

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the simulated Stream is closed")

    def launch(self, seconds: float, fault: str | int | bool | None = None) -> None:
        """Enqueue a kernel that occupies the stream for ``seconds``.

        ``seconds``: a number from 0 to 2**63 ns (~292 years); ValueError
        outside that (NaN too), TypeError for a bool or anything else.
        ``fault``: a CUresult name ("CUDA_ERROR_ILLEGAL_ADDRESS"), a code
        (below 2**31; 0 is none), or True (CUDA_ERROR_ILLEGAL_ADDRESS); when
        the kernel ends every live context faults with it (sticky), as on a
        GPU. ValueError for an unknown name or a code out of range, TypeError
        for another type.
        """
        self._check_open()
        ns = int(_kernel_seconds(seconds) * 1e9)
        drv = self.device._drv
        res = drv.sim.cudafdsim_launch(self.handle, ns, _fault_code(fault))  # type: ignore[union-attr]
        _driver.check(res, "cudafdsim_launch")

    def launch_kernel(self, seconds: float, fault: bool = False) -> None:
        """Launch the cudafd_spin kernel through cuLaunchKernel, as on a real GPU (see cudafd._core.kernels).

        ``seconds`` as for launch()."""
        self._check_open()
        _kernels.launch_spin(self.handle, _kernel_seconds(seconds), fault)

    def record(self) -> Event:
        """Record a new event at the stream's current end."""
        self._check_open()
        drv = self.device._drv
        ev = c_void_p()
        with drv.pushed(self.device.context):
            _driver.check(drv.cuEventCreate(byref(ev), _driver.CU_EVENT_DISABLE_TIMING), "cuEventCreate")  # type: ignore[attr-defined]
        event = Event(self.device, ev.value or 0)
        self.device._children.add(event)
        res = drv.cuEventRecord(event.handle, self.handle)  # type: ignore[attr-defined]
        if res:
            event.close()
            raise CudaError(res, where="cuEventRecord")
        return event

    def query(self) -> bool:
        """True if all work enqueued so far is done; raises CudaError on a fault."""
        self._check_open()
        res = self.device._drv.cuStreamQuery(self.handle)  # type: ignore[attr-defined]
        if res == 600:
            return False
        _driver.check(res, "cuStreamQuery")
        return True

    def synchronize(self) -> None:
        """Block (GIL released) until the stream is idle; raises CudaError on a fault."""
        self._check_open()
        _driver.check(self.device._drv.cuStreamSynchronize(self.handle), "cuStreamSynchronize")  # type: ignore[attr-defined]

    def close(self) -> None:
        """Destroy the stream (queued work still runs). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.device._drv.cuStreamDestroy(self.handle)  # type: ignore[attr-defined]

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<cudafd.sim.Stream handle={self.handle:#x} {'closed' if self._closed else 'open'}>"


class Event:
    """A simulated event (recorded by Stream.record()). A cudafd wait target."""

    def __init__(self, device: Device, handle: int) -> None:
        self._closed = False
        self.device = device
        self.handle = handle

    @property
    def context(self) -> int:
        return self.device.context

    @property
    def closed(self) -> bool:
        return self._closed

    def query(self) -> bool:
        """True once the record is complete; raises CudaError on a fault."""
        if self._closed:
            raise ClosedError("the simulated Event is closed")
        res = self.device._drv.cuEventQuery(self.handle)  # type: ignore[attr-defined]
        if res == 600:
            return False
        _driver.check(res, "cuEventQuery")
        return True

    def synchronize(self) -> None:
        """Block (GIL released) until the record completes; raises CudaError on a fault."""
        if self._closed:
            raise ClosedError("the simulated Event is closed")
        _driver.check(self.device._drv.cuEventSynchronize(self.handle), "cuEventSynchronize")  # type: ignore[attr-defined]

    def close(self) -> None:
        """Destroy the event. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.device._drv.cuEventDestroy(self.handle)  # type: ignore[attr-defined]

    def __enter__(self) -> Event:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<cudafd.sim.Event handle={self.handle:#x} {'closed' if self._closed else 'open'}>"


def stats() -> dict[str, int]:
    """The simulator's live counts: contexts, streams, events, queued (operations), hostfuncs_run, kernels_run;
    dead_handle_calls: calls given a dead event, destroyed or gone with its context (a real driver crashes
    on one, or answers about the event that took its handle), or destroying an external semaphore of a
    destroyed context; and busy_semaphore_destroys: external semaphores destroyed while a signal of theirs
    had not run (CUDA forbids it)."""
    return driver().sim.stats()  # type: ignore[union-attr]
