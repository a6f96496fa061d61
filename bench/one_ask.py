"""Notifiers whose waits ask once after their yield, then watch, however long the loop's pass
was (cudafd/_core/policy.py, step 2, with ``busy_asks`` 1): the other side of the side-by-side
runs of bench/busy_watch_ab.py and bench/busy_asks_sim.py (asyncio and uvloop).

    n = one_ask(cudafd.Notifier("event"))
"""
from __future__ import annotations

import weakref

from cudafd._core.policy import WaitPolicy
from cudafd._loops import asyncio_loop

__all__ = ["one_ask"]


class _OneAsk(WaitPolicy):
    __slots__ = ()
    busy_asks = 1


_chosen: weakref.WeakSet = weakref.WeakSet()
_init = asyncio_loop.Dispatcher.__init__


def _init_one_ask(self, loop, notifier) -> None:  # type: ignore[no-untyped-def]
    _init(self, loop, notifier)
    if notifier in _chosen:
        self._policy = _OneAsk()


asyncio_loop.Dispatcher.__init__ = _init_one_ask  # type: ignore[method-assign]


def one_ask(notifier):  # type: ignore[no-untyped-def]
    """``notifier``, its waits asking once (made before its first wait in a loop)."""
    _chosen.add(notifier)
    return notifier
