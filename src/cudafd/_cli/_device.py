"""Choosing what the CLI runs on: the real GPU if one is usable, else the simulator."""

from __future__ import annotations

import os
from ctypes import byref, c_int, c_void_p
from typing import TYPE_CHECKING

from .._core import driver as _driver, kernels as _kernels, lib as _lib

if TYPE_CHECKING:
    from .. import sim as _sim


class Setup:
    """Where the CLI's kernels run: a real GPU's primary context, or a simulated Device.

    ``streams(n)`` creates n streams (handles); ``launch(handle, seconds)``
    enqueues the spin kernel; ``close()`` destroys what was created.
    """

    def __init__(self, kind: str, description: str) -> None:
        self.kind = kind  # "gpu" or "sim"
        self.description = description
        self._handles: list[int] = []
        self._ctx = 0
        self._device_ordinal = 0
        self._sim_device: _sim.Device | None = None
        self._sim_streams: list[_sim.Stream] = []

    def open(self) -> None:
        drv = _driver.get()
        drv.init()
        if self.kind == "sim":
            from .. import sim

            device = self._sim_device = sim.Device()
            self._ctx = device.context
        else:
            dev = c_int()
            _driver.check(drv.cuDeviceGet(byref(dev), 0), "cuDeviceGet")  # type: ignore[attr-defined]
            ctx = c_void_p()
            _driver.check(drv.cuDevicePrimaryCtxRetain(byref(ctx), dev), "cuDevicePrimaryCtxRetain")  # type: ignore[attr-defined]
            self._device_ordinal = dev.value
            self._ctx = ctx.value or 0

    @property
    def context(self) -> int:
        return self._ctx

    def streams(self, n: int) -> list[int]:
        drv = _driver.get()
        out = []
        if self._sim_device is not None:
            for _ in range(n):
                s = self._sim_device.stream(non_blocking=True)
                self._sim_streams.append(s)
                out.append(s.handle)
        else:
            with drv.pushed(self._ctx):
                for _ in range(n):
                    h = c_void_p()
                    _driver.check(drv.cuStreamCreate(byref(h), _driver.CU_STREAM_NON_BLOCKING), "cuStreamCreate")  # type: ignore[attr-defined]
                    out.append(h.value or 0)
        self._handles.extend(out)
        return out

    def launch(self, handle: int, seconds: float, fault: bool = False) -> None:
        _kernels.launch_spin(handle, seconds, fault)

    def synchronize(self, handle: int) -> None:
        """Block until the stream is idle (cuStreamSynchronize)."""
        _driver.check(_driver.get().cuStreamSynchronize(handle), "cuStreamSynchronize")  # type: ignore[attr-defined]

    def warm_up(self, handle: int) -> None:
        """Load the kernel (the driver JIT-compiles its PTX on first use) and run it once."""
        self.launch(handle, 0)
        self.synchronize(handle)

    def close(self) -> None:
        drv = _driver.loaded()
        if drv is None:
            return
        if self._sim_device is not None:
            for s in self._sim_streams:
                s.close()
            self._sim_device.close()
            self._sim_device = None
        elif self._ctx:
            with drv.pushed(self._ctx):
                drv.cuCtxSynchronize()  # type: ignore[attr-defined]
                for h in self._handles:
                    drv.cuStreamDestroy(h)  # type: ignore[attr-defined]
            _kernels.forget(self._ctx)
            drv.cuDevicePrimaryCtxRelease(self._device_ordinal)  # type: ignore[attr-defined]
        self._handles.clear()
        self._ctx = 0


def choose(force_sim: bool) -> Setup:
    """Decide between the real GPU and the simulator, and commit cudafd to that driver.

    The simulator when asked (--sim, $CUDAFD_SIMULATOR=1) or when no usable
    CUDA driver is found (it must load, cuInit must succeed, one device at
    least). A driver already chosen ($CUDAFD_DRIVER, or loaded earlier) is respected.
    """
    sim_path = _lib.sim_library_path()
    committed = _lib.committed_driver_path()
    if committed is not None:
        return _describe(committed)
    if force_sim or os.environ.get("CUDAFD_SIMULATOR", "").strip().lower() in ("1", "true", "yes", "on"):
        _lib.use_simulator()
        return Setup("sim", "the cudafd simulator (as asked)")
    probe = _driver.probe(_lib.default_driver_path())
    if probe.usable:
        _lib.use_driver(os.environ.get("CUDAFD_DRIVER") or None)
        return _describe(probe.path, probe)
    if not os.path.exists(sim_path):
        raise SystemExit(f"no usable CUDA driver ({probe.reason}) and the simulator {sim_path} is not built")
    _lib.use_simulator()
    return Setup("sim", f"the cudafd simulator: {_why_not(probe)}")


def _why_not(probe: _driver.Probe) -> str:
    """Why the machine's driver is not used, in a few words (the loader's own text when it is not "not found")."""
    reason = probe.reason or "unknown"
    if "cannot open shared object file" in reason:
        return f"no CUDA driver on this machine ({os.path.basename(probe.path or 'libcuda.so.1')} not found)"
    return f"no usable CUDA driver ({reason})"


def _describe(path: str, probe: _driver.Probe | None = None) -> Setup:
    drv = _driver.get()
    if drv.sim is not None:
        return Setup("sim", "the cudafd simulator")
    probe = probe or _driver.probe(path)
    name = probe.devices[0] if probe.devices else "a CUDA device"
    return Setup("gpu", f"{name} (driver {probe.version_text})")
