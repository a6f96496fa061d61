"""The event-loop layer: which loop is running, and one adapter per loop.

* detect: ``cudafd.wait()``, ``cudafd.prepare()`` and the wait behind
  ``await fence``, dispatching to the running library's adapter;
* asyncio_loop and asyncio_fence: asyncio and uvloop;
* trio_loop (parking and waking), trio_run (the Dispatcher of a run) and
  trio_fence: trio, and anyio on trio (anyio on asyncio is asyncio's).

An adapter only parks a task and wakes it: what happens before the park is
the shared policy (cudafd/_core/policy.py), and all an adapter uses of a
Notifier is its loop-adapter protocol (cudafd/_core/notifier.py). This layer
imports the core and never the other way round: importing it installs its
entry points into cudafd._core.loop_hook, which is how ``Notifier.wait()``
and ``await fence`` reach it.
"""

from __future__ import annotations

from .._core import loop_hook
from .detect import current_async_library, prepare, wait, wait_until

__all__ = ["prepare", "wait"]

loop_hook.install(wait, wait_until, current_async_library)
