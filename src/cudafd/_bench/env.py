"""The environment a run is recorded with: GPU, drivers, Python, loop and library versions."""

from __future__ import annotations

import ctypes
import os
import platform
import re
import subprocess
import sys
from importlib import metadata

from .. import __version__
from .._core import driver as _driver, lib as _lib

__all__ = ["collect"]

PACKAGES = ("uvloop", "torch", "numba", "numba-cuda", "cupy", "cuda-python", "cuda-bindings", "cuda-core", "matplotlib")
ENV_VARS = (
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUDA_VISIBLE_DEVICES",
    "CUDAFD_MECHANISM",
    "CUDAFD_DRIVER",
    "CUDAFD_SIMULATOR",
    "CUDAFD_MAX_LATENESS",
)
OPTIONS = {
    "max_lateness_ns": _lib.OPT_MAX_LATENESS_NS,
    "watchdog_ns": _lib.OPT_WATCHDOG_NS,
}


def _nvidia_driver() -> str | None:
    """The NVIDIA kernel driver's version (/proc/driver/nvidia/version, else nvidia-smi)."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            m = re.search(r"Kernel Module(?: for [\w-]+)?\s+([\d.]+)", f.read())
            if m:
                return m.group(1)
    except OSError:
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _versions() -> dict[str, str]:
    out = {"cudafd": __version__}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _cudafd_options() -> dict[str, int]:
    lib = _lib.try_load()
    out: dict[str, int] = {}
    if lib is None:
        return out
    for name, opt in OPTIONS.items():
        v = ctypes.c_int64()
        if lib.cudafd_get_option(opt, ctypes.byref(v)) == 0:
            out[name] = int(v.value)
    return out


def collect(simulator: bool) -> dict:
    """Everything about this machine and these libraries that a result depends on."""
    drv = _driver.get()
    out: dict = {"simulator": simulator, "driver_library": drv.path}
    try:
        out["device"] = drv.device_name(0)
        out["devices"] = drv.device_count()
    except Exception as exc:
        out["device"] = f"? ({exc})"
    try:
        v = drv.version()
        out["cuda_driver_version"] = v
        out["cuda_version"] = f"{v // 1000}.{v % 1000 // 10}"
    except Exception:
        pass
    if not simulator:
        out["nvidia_driver"] = _nvidia_driver()
    out.update(
        python=sys.version.split()[0],
        python_implementation=platform.python_implementation(),
        platform=platform.platform(),
        cpu=_cpu_model(),
        cpu_count=os.cpu_count(),
        versions=_versions(),
        cudafd_library=_lib.loaded_path(),
        cudafd_options=_cudafd_options(),
        environment={k: os.environ[k] for k in ENV_VARS if k in os.environ},
    )
    return out
