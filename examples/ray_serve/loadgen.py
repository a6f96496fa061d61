"""A closed-loop load generator: ``clients`` coroutines, each sending the next
request as soon as its last one is answered, for ``seconds``.

``call(x)`` is any coroutine function: a Ray Serve deployment handle's
``remote`` (awaited), or the handler itself in-process. Every answer is checked
against ``expected(x)``; the result counts the wrong ones and the errors.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


async def drive(
    call: Callable[[int], Awaitable[Any]],
    expected: Callable[[int], Any],
    clients: int,
    seconds: float,
) -> dict[str, Any]:
    """Run the load; requests/s, latency p50/p99 (ms), answered, wrong, errors."""
    latencies: list[float] = []
    wrong: list[tuple[int, Any]] = []
    errors: list[str] = []
    sent = 0
    start = time.perf_counter()
    stop = start + seconds

    async def client(c: int) -> None:
        nonlocal sent
        i = c
        while time.perf_counter() < stop:
            x = i % 1000
            i += clients
            sent += 1
            t0 = time.perf_counter()
            try:
                y = await call(x)
            except Exception as e:  # counted and reported, the load goes on
                errors.append(f"{type(e).__name__}: {e}")
                continue
            latencies.append(time.perf_counter() - t0)
            if y != expected(x):
                wrong.append((x, y))

    await asyncio.gather(*(client(c) for c in range(clients)))
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "sent": sent,
        "answered": len(latencies),
        "wrong": len(wrong),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "first_wrong": wrong[0] if wrong else None,
        "elapsed_s": round(elapsed, 3),
        "req_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1e3, 3),
        "p99_ms": round(percentile(latencies, 0.99) * 1e3, 3),
    }
