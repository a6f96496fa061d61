"""``await cudafd.wait(target)``: the async entry point, dispatching to the running loop's adapter.

The async library is detected at call time: asyncio (uvloop included) goes
to asyncio_loop, trio to trio_run; anyio needs nothing of its own, since it
runs on one of the two (its cancel scopes are those of the library
underneath). Detection uses sniffio when it is importable (it knows trio,
and asyncio-on-trio bridges), else asyncio's running loop, then a running
trio run if trio is imported. Anything else raises CudafdError naming what
is supported.

The asyncio fast path (a running loop and no other library named by sniffio)
is checked first and costs two lookups; trio, and the cases where wait() is
called outside any running loop, take the slower detection. trio_run (and
trio itself) is imported only when a trio run is detected.
"""

from __future__ import annotations

import asyncio.coroutines as _asyncio_coroutines
import inspect
import sys
from asyncio import AbstractEventLoop, get_running_loop
from asyncio.events import _get_running_loop
from collections.abc import Callable, Coroutine
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .._core.errors import CudafdError
from . import asyncio_fence as _aio_fence, asyncio_loop as _aio

if TYPE_CHECKING:
    from .._core.notifier import Notifier

try:
    import sniffio as _sniffio
except ImportError:  # pragma: no cover - optional
    _sniffio = None  # type: ignore[assignment]

__all__ = ["current_async_library", "prepare", "wait", "wait_until"]


SUPPORTED = "asyncio, uvloop, trio, or anyio on either"


def current_async_library() -> str | None:
    """The name of the running async library ("asyncio", "trio", ...), or None outside any."""
    if _sniffio is not None:
        try:
            return _sniffio.current_async_library()
        except _sniffio.AsyncLibraryNotFoundError:
            return None
    try:
        get_running_loop()
    except RuntimeError:
        pass
    else:
        return "asyncio"
    trio = sys.modules.get("trio")  # trio needs sniffio, but a stripped install may lack it
    if trio is not None:
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            return None
        return "trio"
    return None


_trio_module: ModuleType | None = None


def _trio_adapter() -> ModuleType:
    """cudafd._loops.trio_run, imported on first use (it imports trio)."""
    global _trio_module
    if _trio_module is None:
        from . import trio_run

        _trio_module = trio_run
    return _trio_module


def _plain_asyncio_loop() -> AbstractEventLoop | None:
    """The running asyncio loop, when sniffio was not told another library runs this thread (fast path)."""
    loop = _get_running_loop()
    if loop is None or _sniffio is None:
        return loop
    if _sniffio.thread_local.name is None and _sniffio.current_async_library_cvar.get() is None:
        return loop
    return None


def _unsupported(library: str | None, what: str = "cudafd.wait()") -> CudafdError:
    if library is None:
        return CudafdError(f"{what} must be called inside a running event loop ({SUPPORTED})")
    return CudafdError(
        f"{what} does not support {library}: it supports {SUPPORTED}; elsewhere, wait "
        "in a worker thread with cudafd.fence(target).wait()"
    )


def wait(target: object, *, notifier: Notifier | None = None) -> Coroutine[Any, Any, None]:
    """``await cudafd.wait(target)``: wait, without blocking the event loop, until the GPU has passed ``target``.

    ``target`` is a stream (all work enqueued on it before the await starts)
    or a recorded event (its latest record; with the "poll" mechanism, which
    asks about the event itself, do not re-record or destroy it until the wait
    ends). Without ``notifier``, the running loop's default Notifier is used
    (one per loop, created on first use, closed when the loop is collected).

    Raises CudaError if the awaited work (or its context) faulted, ClosedError
    if the notifier was closed meanwhile, TypeError/ValueError for a bad target,
    ValueError for a malformed $CUDAFD_MECHANISM or $CUDAFD_MAX_LATENESS when
    it makes the default Notifier.
    Cancelling the wait (task.cancel(), asyncio.timeout, trio.move_on_after,
    trio.fail_after, any trio or anyio cancel scope) detaches it: the GPU
    work is not cancelled, and nothing is left registered. A cancellation
    that comes after the wait's fault was found, before its task resumed,
    leaves the task raising the CudaError. No thread is
    blocked and no Python code runs on a native thread.

    The async library is detected when wait() is called: asyncio, uvloop,
    trio, and anyio on either backend; anything else raises CudafdError.
    Under trio the default Notifier is one per trio run, closed when the run
    ends. wait() returns the coroutine of that library's adapter directly,
    saving a coroutine layer on the hot path; called outside any running
    loop (``asyncio.run(cudafd.wait(s))``) it returns a coroutine that
    detects the library when first awaited.
    """
    loop = _get_running_loop()  # (_plain_asyncio_loop, inline: this is every wait's path)
    if loop is not None and (
        _sniffio is None
        or (_sniffio.thread_local.name is None and _sniffio.current_async_library_cvar.get() is None)
    ):
        return _aio.dispatcher(loop, notifier).wait(loop, target)
    if _in_trio():
        return _trio_adapter().wait(target, notifier)
    return _wait_detected(target, notifier)


def _in_trio() -> bool:
    """Inside trio.run on this thread, by sniffio's marks (trio >= 0.23 sets thread_local, older the cvar)."""
    if _sniffio is None or _get_running_loop() is not None:
        return False
    name = _sniffio.thread_local.name
    if name is None:
        name = _sniffio.current_async_library_cvar.get()
    return name == "trio"


if hasattr(inspect, "markcoroutinefunction"):  # Python 3.12+: inspect.iscoroutinefunction(wait) is True
    wait = inspect.markcoroutinefunction(wait)
else:  # 3.10/3.11: asyncio.iscoroutinefunction(wait) is True (the marker asyncio itself checks)
    wait._is_coroutine = _asyncio_coroutines._is_coroutine  # type: ignore[attr-defined]


def prepare(stream: object) -> None:
    """``cudafd.prepare(stream)``, inside a running event loop: make now every
    stream that ``cudafd.wait()``'s waits in ``stream``'s context may need
    later, on the running loop's default Notifier (Notifier.prepare; the
    Notifier is created if need be). Optional: call it once per context
    before the work starts, and no later wait creates a stream (on an H200
    a stream created while the GPU is busy can hold up every CUDA call until
    it drains: docs/guide.md, "Many streams").

    Raises CudafdError outside a running asyncio, uvloop, trio or anyio
    loop, TypeError for something that is not a stream, ValueError for a
    malformed $CUDAFD_MECHANISM or $CUDAFD_MAX_LATENESS when it makes the
    default Notifier.
    """
    loop = _plain_asyncio_loop()
    library = "asyncio" if loop is not None else "trio" if _in_trio() else current_async_library()
    if library == "trio":  # (trio in guest mode too: its tasks see the host's asyncio loop)
        _trio_adapter().default_notifier(create=True).prepare(stream)
    elif library == "asyncio":
        _aio.default_notifier(loop or get_running_loop(), create=True).prepare(stream)  # type: ignore[union-attr]
    else:
        raise _unsupported(library, "cudafd.prepare()")


async def _wait_detected(target: object, notifier: Notifier | None) -> None:
    library = current_async_library()
    if library == "asyncio":
        loop = get_running_loop()
        await _aio.dispatcher(loop, notifier).wait(loop, target)
        return
    if library == "trio":
        await _trio_adapter().wait(target, notifier)
        return
    raise _unsupported(library)


# A coroutine is named after its function: a wait never awaited warns
# "coroutine 'cudafd.wait' was never awaited", whichever adapter made it.
_aio.Dispatcher.wait.__qualname__ = _wait_detected.__qualname__ = "cudafd.wait"


async def wait_until(notifier: Notifier, check: Callable[[], bool]) -> None:
    """Through the running loop's adapter, until ``check()`` is True, looking again whenever
    ``notifier``'s fd turns readable (what ``await fence`` does: cudafd._core.loop_hook).

    asyncio, uvloop, trio and anyio; several tasks may wait on one Fence, and
    cancelling one of them detaches only that one.
    """
    library = "asyncio" if _plain_asyncio_loop() is not None else current_async_library()
    if library == "trio":
        from . import trio_fence

        await trio_fence.wait_until(notifier, check)
        return
    if library != "asyncio":
        raise _unsupported(library)
    await _aio_fence.wait_readiness(notifier, check)
