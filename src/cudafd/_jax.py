"""Awaiting JAX arrays: what can be had, honestly.

JAX exposes no CUDA stream or event for an array: XLA owns its streams and
keeps them private, so there is no point cudafd could mark and no fd to wait
on. What JAX does offer is ``jax.Array.is_ready()``, a non-blocking check
that the computation producing the array has finished (``block_until_ready``
is its blocking twin, which would stall the loop).

``await cudafd.jax_ready(x)`` therefore polls ``is_ready()`` from the event
loop with backoff: 50 µs doubling to 2 ms. It never blocks the loop and uses
no thread, but its latency is that of the backoff (and, under plain asyncio,
of the selector's millisecond timeouts), and it cannot report a device fault
before JAX does: a failed computation raises from ``is_ready()`` or from the
first use of the array. Cancelling the await stops the polling; the
computation goes on. For a pytree, every leaf is awaited.
"""

from __future__ import annotations

from typing import Any

__all__ = ["jax_ready"]

FIRST_DELAY = 50e-6  # the first sleep between two is_ready() checks, doubled each time ...
MAX_DELAY = 2e-3  # ... up to this


def _sleeper():
    try:
        import sniffio

        library = sniffio.current_async_library()
    except Exception:
        library = "asyncio"
    if library == "trio":
        import trio

        return trio.sleep
    import asyncio

    return asyncio.sleep


def _leaves(x: Any) -> list[Any]:
    if hasattr(x, "is_ready"):
        return [x]
    try:
        import jax

        return [leaf for leaf in jax.tree_util.tree_leaves(x) if hasattr(leaf, "is_ready")]
    except ImportError:
        raise TypeError(f"cudafd.jax_ready needs a jax.Array (or a pytree of them), got {type(x).__qualname__}") from None


async def jax_ready(x: Any) -> Any:
    """Wait, without blocking the loop, until every array in ``x`` is ready; return ``x``."""
    leaves = _leaves(x)
    if not leaves:
        raise TypeError(f"cudafd.jax_ready: no jax.Array in {type(x).__qualname__}")
    sleep = _sleeper()
    delay = FIRST_DELAY
    for leaf in leaves:
        while not leaf.is_ready():
            await sleep(delay)
            delay = min(delay * 2, MAX_DELAY)
    return x
