"""The slot through which the core reaches the event-loop layer without importing it.

``Notifier.wait()`` and ``await fence`` need the running loop's adapter, which
lives above the core (``cudafd/_loops/``). The core never imports that layer:
``cudafd/_loops/__init__.py`` calls :func:`install` when it is imported (and
``cudafd/__init__.py`` imports it), handing down three callables:

* ``wait(target, notifier=...)``: the coroutine of ``cudafd.wait``. install()
  makes it this module's ``wait`` attribute, which ``Notifier.wait()`` calls,
  so a wait passes through no wrapper here;
* ``wait_until(notifier, check)``: a coroutine that returns once ``check()``
  is true (and raises what it raises), looking again whenever the Notifier's
  adapter_hold_fd() fd turns readable (for the "poll" mechanism, its timer).
  A Fence awaits its outcome so;
* ``running()``: the name of the async library running in this thread
  ("asyncio", "trio", ...) or None; ``Fence.wait()`` warns when it would
  block one.

Calls go only downward: the loop layer calls into the core, and the core calls
the layer only through what it was given here.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from .errors import CudafdError

__all__ = ["install", "running", "wait", "wait_until"]

_wait_until: Callable[..., Coroutine[Any, Any, None]] | None = None
_running: Callable[[], str | None] = lambda: None


def install(
    wait_fn: Callable[..., Coroutine[Any, Any, None]],
    wait_until_fn: Callable[..., Coroutine[Any, Any, None]],
    running_fn: Callable[[], str | None],
) -> None:
    """Give the core the loop layer's entry points (called once, at its import)."""
    global wait, _wait_until, _running
    wait, _wait_until, _running = wait_fn, wait_until_fn, running_fn


def running() -> str | None:
    """The async library running in this thread, or None (None too before the loop layer loads)."""
    return _running()


def _missing() -> CudafdError:
    return CudafdError("cudafd's event-loop layer is not loaded: import cudafd (not only cudafd._core)")


def wait(target: object, *, notifier: object) -> Coroutine[Any, Any, None]:  # noqa: F811 (install() rebinds it)
    """``cudafd.wait(target, notifier=notifier)``: install() replaces this with the loop layer's."""
    raise _missing()


def wait_until(notifier: object, check: Callable[[], bool]) -> Coroutine[Any, Any, None]:
    """A coroutine that returns once ``check()`` is true (see the module docstring)."""
    if _wait_until is None:
        raise _missing()
    return _wait_until(notifier, check)
