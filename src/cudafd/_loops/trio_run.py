"""trio: the Dispatcher of the current run (the default Notifier is one per run), and wait().

The default Notifier (``cudafd.wait(target)`` without notifier=) is one per
trio run (a RunVar), created on first use and closed at the end of the run
by a system task that sleeps until the run cancels it. A Notifier of the
user's gets one Dispatcher per run, kept with the Notifier
(Notifier.adapter_state) and weakly keyed by the run.
"""

from __future__ import annotations

import weakref
from collections.abc import Coroutine
from typing import Any

import trio
from trio.lowlevel import RunVar, spawn_system_task

from .._core.notifier import Notifier
from .trio_loop import Dispatcher

__all__ = ["Dispatcher", "default_dispatcher", "default_notifier", "dispatcher", "wait"]


class _Run:
    """A weak-referenceable stand-in for the current trio run (kept in a RunVar)."""

    __slots__ = ("__weakref__",)


_RUN: RunVar[_Run] = RunVar("cudafd.run")
_DEFAULT: RunVar[Dispatcher] = RunVar("cudafd.default_dispatcher")


def _run_key() -> _Run:
    try:
        return _RUN.get()
    except LookupError:
        key = _Run()
        _RUN.set(key)
        return key


async def _close_at_run_end(notifier: Notifier) -> None:
    try:
        await trio.sleep_forever()
    finally:
        notifier.close()


def default_dispatcher() -> Dispatcher:
    """The Dispatcher of the current run's default Notifier (created on first use, closed at run end)."""
    try:
        return _DEFAULT.get()
    except LookupError:
        pass
    notifier = Notifier()
    try:
        disp = Dispatcher(notifier)
        spawn_system_task(_close_at_run_end, notifier, name="cudafd: close the run's default Notifier")
    except BaseException:
        notifier.close()
        raise
    _DEFAULT.set(disp)
    return disp


def default_notifier(create: bool = False) -> Notifier | None:
    """The current run's default Notifier if one was created (or now, when ``create``)."""
    if create:
        return default_dispatcher()._notifier
    try:
        return _DEFAULT.get()._notifier
    except LookupError:
        return None


def dispatcher(notifier: Notifier | None) -> Dispatcher:
    """The Dispatcher of ``notifier`` (default: the run's own Notifier) in the current trio run."""
    if notifier is None:
        return default_dispatcher()
    if not isinstance(notifier, Notifier):
        raise TypeError(f"notifier= takes a cudafd.Notifier, not {type(notifier).__qualname__}")
    key = _run_key()
    table = notifier.adapter_state(dispatcher, weakref.WeakKeyDictionary)
    disp = table.get(key)
    if disp is None:
        disp = table[key] = Dispatcher(notifier)
    return disp


def wait(target: object, notifier: Notifier | None = None) -> Coroutine[Any, Any, None]:
    """The coroutine of ``cudafd.wait(target, notifier=notifier)`` in the current trio run."""
    return dispatcher(notifier).wait(target)
