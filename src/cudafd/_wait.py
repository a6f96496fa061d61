"""``await cudafd.wait(target)``: the async entry point, dispatching to the running loop's adapter.

The async library is detected at call time: asyncio (uvloop included) today;
trio and anyio adapters are to come. Detection uses sniffio when it is
importable (it knows trio, and asyncio-on-trio bridges), else asyncio's
running loop.
"""

from __future__ import annotations

import asyncio.coroutines as _asyncio_coroutines
import inspect
from asyncio import AbstractEventLoop, get_running_loop
from asyncio.events import _get_running_loop
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from . import _aio
from ._errors import CudafdError

if TYPE_CHECKING:
    from ._fence import Fence
    from ._notifier import Notifier

try:
    import sniffio as _sniffio
except ImportError:  # pragma: no cover - optional
    _sniffio = None  # type: ignore[assignment]

__all__ = ["wait", "wait_fence", "current_async_library"]


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
        return None
    return "asyncio"


def _plain_asyncio_loop() -> AbstractEventLoop | None:
    """The running asyncio loop, when sniffio was not told another library runs this thread (fast path)."""
    loop = _get_running_loop()
    if loop is None or _sniffio is None:
        return loop
    if _sniffio.thread_local.name is None and _sniffio.current_async_library_cvar.get() is None:
        return loop
    return None


def _unsupported(library: str | None) -> CudafdError:
    if library is None:
        return CudafdError("cudafd.wait() must be awaited inside a running event loop (asyncio or uvloop)")
    return CudafdError(
        f"cudafd.wait() does not support {library} yet: use asyncio or uvloop, or wait in a "
        "worker thread with cudafd.fence(target).wait()"
    )


def wait(target: object, *, notifier: Notifier | None = None) -> Coroutine[Any, Any, None]:
    """``await cudafd.wait(target)``: wait, without blocking the event loop, until the GPU has passed ``target``.

    ``target`` is a stream (all work enqueued on it before the await starts)
    or a recorded event (its latest record). Without ``notifier``, the running
    loop's default Notifier is used (one per loop, created on first use,
    closed when the loop is collected).

    Raises CudaError if the awaited work (or its context) faulted, ClosedError
    if the notifier was closed meanwhile, TypeError/ValueError for a bad target.
    Cancelling the awaiting task (task.cancel(), asyncio.timeout) detaches the
    wait: the GPU work is not cancelled, and nothing is left registered.
    No thread is blocked and no Python code runs on a native thread.

    The async library is detected when wait() is called (asyncio and uvloop
    today; anything else raises CudafdError). wait() returns the coroutine of
    that library's adapter directly, saving a coroutine layer on the hot
    path; called outside any running loop (``asyncio.run(cudafd.wait(s))``)
    it returns a coroutine that detects the library when first awaited.
    """
    loop = _plain_asyncio_loop()
    if loop is not None:
        if notifier is None:
            return _aio.default_dispatcher(loop).wait(loop, target)
        return _aio.dispatcher(loop, notifier).wait(loop, target)
    return _wait_detected(target, notifier)


if hasattr(inspect, "markcoroutinefunction"):  # Python 3.12+: inspect.iscoroutinefunction(wait) is True
    wait = inspect.markcoroutinefunction(wait)
else:  # 3.10/3.11: asyncio.iscoroutinefunction(wait) is True (the marker asyncio itself checks)
    wait._is_coroutine = _asyncio_coroutines._is_coroutine  # type: ignore[attr-defined]


async def _wait_detected(target: object, notifier: Notifier | None) -> None:
    library = current_async_library()
    if library == "asyncio":
        loop = get_running_loop()
        await _aio.dispatcher(loop, notifier).wait(loop, target)
        return
    raise _unsupported(library)


async def wait_fence(fence: Fence) -> None:
    """Await a Fence through the running loop's adapter (what ``await fence`` does)."""
    if fence.done():
        fence.result()
        return
    library = "asyncio" if _plain_asyncio_loop() is not None else current_async_library()
    if library != "asyncio":
        raise _unsupported(library)
    notifier = fence._notifier
    if notifier is None:
        fence.result()
        return
    await _aio.wait_readiness(fence, notifier, fence.done)
    fence.result()
