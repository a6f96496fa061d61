"""cudafd: a pollable file descriptor for CUDA stream progress.

    await cudafd.wait(stream)            # asyncio / uvloop: no thread per wait, no busy loop
    f = cudafd.fence(stream)             # one-shot; f.fileno() readable once the GPU passed the point
    n = cudafd.Notifier()                # one fd, many waits (what the loop adapters use)

A fault in the awaited work raises CudaError in the waiter (never a hang).
Cancelling a wait detaches it; the GPU work is not cancelled. Nothing of
Python ever runs on a driver or native waiter thread. ``python -m cudafd
doctor`` says what works on this machine; ``cudafd.sim`` is a simulated GPU.

Importing cudafd loads nothing native: the core (libcudafd.so) and the CUDA
driver are loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._core.errors import ClosedError, CudaError, CudafdError, InvalidStateError, LibraryError
from ._core.fence import Fence, fence
from ._core.lib import use_driver, use_simulator
from ._core.notifier import MECHANISMS, Notifier
from ._core.stats import stats
from ._jax import jax_ready
from ._loops import prepare, wait  # also installs the loop layer into the core (cudafd._core.loop_hook)

if TYPE_CHECKING:
    from . import sim

__version__ = "0.1.0"

__all__ = [
    "wait",
    "prepare",
    "fence",
    "Fence",
    "jax_ready",
    "Notifier",
    "MECHANISMS",
    "CudaError",
    "CudafdError",
    "ClosedError",
    "InvalidStateError",
    "LibraryError",
    "stats",
    "use_driver",
    "use_simulator",
    "sim",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name == "sim":  # lazy: importing it loads nothing either, but keep the top level small
        import importlib

        return importlib.import_module(".sim", __name__)
    raise AttributeError(f"module 'cudafd' has no attribute {name!r}")
