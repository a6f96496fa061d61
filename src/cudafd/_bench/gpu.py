"""What a benchmark child needs from the GPU: a context, streams, events, kernels, GPU timing.

The context is the primary context of device 0 on a GPU, or a fresh
simulated context (``$CUDAFD_SIMULATOR=1``, set by the parent when it chose
the simulator); it is made current on the calling thread. Kernels are
``cudafd_spin`` (:mod:`cudafd._core.kernels`): the same driver calls on both.

Two entry points that :mod:`cudafd._core.driver` does not bind are bound here from
the very library it loaded (dlopen of the same path returns the same handle):
``cuEventElapsedTime`` (absent from the simulator: ``elapsed_ms`` is then
None and callers time on the host) and ``cuStreamWaitEvent``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from ctypes import POINTER, byref, c_char_p, c_float, c_int, c_uint, c_uint64, c_void_p
from typing import Any

from .._core import driver as _driver, kernels as _kernels
from .._cli._device import Setup, choose

__all__ = ["EV_BLOCKING", "EV_SPIN", "EV_TIMING", "NOT_READY", "Gpu"]

NOT_READY = _driver.CUDA_ERROR_NOT_READY
EV_SPIN = _driver.CU_EVENT_DISABLE_TIMING  # cuEventSynchronize spins (the default context policy)
EV_BLOCKING = _driver.CU_EVENT_BLOCKING_SYNC | _driver.CU_EVENT_DISABLE_TIMING  # it sleeps
EV_TIMING = _driver.CU_EVENT_DEFAULT  # for cuEventElapsedTime

_EXTRA: dict[str, list[Any]] = {
    "cuEventElapsedTime": [POINTER(c_float), c_void_p, c_void_p],
    "cuStreamWaitEvent": [c_void_p, c_void_p, c_uint],
}


def _bind_extra(path: str) -> dict[str, object]:
    """Resolve _EXTRA from the driver at ``path`` (cuGetProcAddress_v2 first, then dlsym)."""
    dll = ctypes.CDLL(path)
    gpa = getattr(dll, "cuGetProcAddress_v2", None)
    if gpa is not None:
        gpa.restype = c_int
        gpa.argtypes = [c_char_p, POINTER(c_void_p), c_int, c_uint64, POINTER(c_int)]
    out: dict[str, object] = {}
    for name, argtypes in _EXTRA.items():
        addr = None
        if gpa is not None:
            pfn, status = c_void_p(), c_int(0)
            if gpa(name.encode(), byref(pfn), _driver.CUDA_API_VERSION, 0, byref(status)) == 0 and pfn.value:
                addr = pfn.value
        if addr is None:
            try:
                addr = ctypes.cast(getattr(dll, name), c_void_p).value
            except AttributeError:
                addr = None
        if addr:
            out[name] = ctypes.CFUNCTYPE(c_int, *argtypes)(addr)
    return out


class Gpu:
    """One context for a benchmark child; ``close()`` destroys everything made through it."""

    def __init__(self) -> None:
        self.setup: Setup = choose(False)
        self.setup.open()
        self.drv = drv = _driver.get()
        self.ctx = self.setup.context
        self.simulator = self.setup.kind == "sim"
        self.description = self.setup.description
        _driver.check(drv.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")  # type: ignore[attr-defined]
        self._extra = _bind_extra(drv.path)
        self._events: list[int] = []
        self._warm: set[int] = set()
        self._launchers: dict[int, Callable[..., None]] = {}
        self.make_launcher: Callable[[int], Callable[..., None]] = _kernels.launcher  # use_torch() replaces it

    # ---- streams, events, kernels ----

    def streams(self, n: int) -> list[int]:
        """``n`` new non-blocking streams, warmed up (the kernel is loaded and has run once on each)."""
        handles = self.setup.streams(n)
        if not self._warm:
            self.setup.warm_up(handles[0])
            self._warm.add(handles[0])
        return handles

    def own_stream(self) -> int:
        """A new non-blocking stream that the caller destroys (destroy_stream), not close()."""
        s = c_void_p()
        with self.drv.current(self.ctx):
            _driver.check(self.drv.cuStreamCreate(byref(s), _driver.CU_STREAM_NON_BLOCKING), "cuStreamCreate")  # type: ignore[attr-defined]
        return s.value or 0

    def destroy_stream(self, stream: int) -> None:
        """Destroy a stream of own_stream()."""
        with self.drv.current(self.ctx):
            _driver.check(self.drv.cuStreamDestroy(stream), "cuStreamDestroy")  # type: ignore[attr-defined]

    def event(self, flags: int) -> int:
        """A new event of this context (destroyed by close())."""
        ev = c_void_p()
        with self.drv.current(self.ctx):
            _driver.check(self.drv.cuEventCreate(byref(ev), flags), "cuEventCreate")  # type: ignore[attr-defined]
        self._events.append(ev.value or 0)
        return ev.value or 0

    def launch(self, stream: int, seconds: float) -> None:
        """Enqueue cudafd_spin for ``seconds`` on ``stream``."""
        self.launcher(stream)(seconds)

    def launcher(self, stream: int) -> Callable[..., None]:
        """The prepared launch of cudafd_spin on ``stream`` (_kernels.launcher): every
        method launches this way, so the figures are the waiting's, not launch_spin's setup."""
        fn = self._launchers.get(stream)
        if fn is None:
            fn = self._launchers[stream] = self.make_launcher(stream)
        return fn

    def use_torch(self) -> dict:
        """Launch through PyTorch from now on where torch has a CUDA device: ``torch.cuda._sleep``
        (calibrated, :mod:`.torchk`) on a ``torch.cuda.ExternalStream`` over each stream. Returns
        ``{"launch": "torch", "calibration": ...}``, or ``{"launch": "cudafd_spin", "why": ...}``."""
        from . import torchk

        torch, why = (None, "the simulator") if self.simulator else torchk.available()
        if torch is None:
            return {"launch": "cudafd_spin", "why": why}
        try:
            torch.cuda.set_device(0)  # device 0's primary context: this one
            cal = torchk.calibrate(torch, torch.cuda.ExternalStream(self.streams(1)[0]))
        except Exception as exc:
            return {"launch": "cudafd_spin", "why": f"torch failed: {type(exc).__name__}: {exc}"}
        cps = cal["cycles_per_s"]
        self.make_launcher = lambda h: torchk.launcher(torch, torch.cuda.ExternalStream(h), cps)
        self._launchers.clear()
        return {"launch": "torch", "calibration": cal}

    def record(self, event: int, stream: int) -> None:
        _driver.check(self.drv.cuEventRecord(event, stream), "cuEventRecord")  # type: ignore[attr-defined]

    def sync_event(self, event: int) -> None:
        _driver.check(self.drv.cuEventSynchronize(event), "cuEventSynchronize")  # type: ignore[attr-defined]

    def query_event(self, event: int) -> bool:
        """True once the event's record completed; raises on a fault."""
        rc = self.drv.cuEventQuery(event)  # type: ignore[attr-defined]
        if rc == NOT_READY:
            return False
        _driver.check(rc, "cuEventQuery")
        return True

    def sync_stream(self, stream: int) -> None:
        _driver.check(self.drv.cuStreamSynchronize(stream), "cuStreamSynchronize")  # type: ignore[attr-defined]

    def wait_event(self, stream: int, event: int) -> None:
        """cuStreamWaitEvent: ``stream`` waits for the event's latest record."""
        fn = self._extra.get("cuStreamWaitEvent")
        if fn is None:
            raise RuntimeError("the driver has no cuStreamWaitEvent")
        _driver.check(fn(stream, event, 0), "cuStreamWaitEvent")  # type: ignore[operator]

    # ---- GPU timing ----

    @property
    def has_gpu_timing(self) -> bool:
        return "cuEventElapsedTime" in self._extra

    def elapsed_ms(self, start: int, end: int) -> float | None:
        """GPU milliseconds between two completed timing events, or None without cuEventElapsedTime."""
        fn = self._extra.get("cuEventElapsedTime")
        if fn is None:
            return None
        ms = c_float()
        _driver.check(fn(byref(ms), start, end), "cuEventElapsedTime")  # type: ignore[operator]
        return float(ms.value)

    # ---- teardown ----

    def close(self) -> None:
        """Wait for the GPU, destroy the events and streams, release the context."""
        drv = self.drv
        with drv.current(self.ctx):
            drv.cuCtxSynchronize()  # type: ignore[attr-defined]
            for ev in self._events:
                drv.cuEventDestroy(ev)  # type: ignore[attr-defined]
        self._events.clear()
        self._launchers.clear()
        self.setup.close()
