"""``python -m cudafd demo``: many concurrent asyncio waits on spin kernels of varied lengths.

One coroutine per stream launches a kernel, awaits ``cudafd.wait(stream)``,
and measures how long after the kernel's nominal length it woke up (the
overhead of launch + notification + loop wake-up). Runs on the real GPU when
one is usable, else on the simulator; prints latency percentiles, throughput,
and cudafd's live counts at the end (back to zero, bar lingering threads).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time

from .. import CudaError, Notifier, stats
from ._device import Setup, choose

KERNEL_SECONDS = (10e-6, 50e-6, 200e-6, 1e-3, 3e-3)


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[i]


async def _worker(
    setup: Setup, handle: int, count: int, notifier: Notifier, overheads: list[float], rng: random.Random
) -> None:
    from .. import wait

    perf = time.perf_counter
    for _ in range(count):
        seconds = rng.choice(KERNEL_SECONDS)
        t0 = perf()
        setup.launch(handle, seconds)
        await wait(handle, notifier=notifier)
        overheads.append(perf() - t0 - seconds)


async def _progress(done: list[float], total: int, started: float) -> None:
    tty = sys.stdout.isatty()
    next_mark = 0.25
    while True:
        await asyncio.sleep(0.1)
        n = len(done)
        if tty:
            rate = n / max(1e-9, time.perf_counter() - started)
            print(f"\r  {n:>7}/{total} waits  {rate:>8.0f} waits/s", end="", flush=True)
        elif n >= next_mark * total:
            print(f"  {n}/{total} waits", flush=True)
            next_mark += 0.25
        if n >= total:
            break


async def _run(setup: Setup, waits: int, streams: int, mechanism: str | None) -> int:
    handles = setup.streams(streams)
    for h in handles:
        setup.warm_up(h)
    notifier = Notifier(mechanism)
    print(
        f"mechanism: {notifier.mechanism}; {waits} waits over {streams} streams, one coroutine each; "
        f"kernels of {', '.join(f'{s * 1e6:g}' for s in KERNEL_SECONDS)} µs"
    )
    per = [waits // streams + (1 if i < waits % streams else 0) for i in range(streams)]
    overheads: list[float] = []
    rng = random.Random(1234)
    started = time.perf_counter()
    progress = asyncio.ensure_future(_progress(overheads, waits, started))
    try:
        await asyncio.gather(
            *(
                _worker(setup, h, n, notifier, overheads, random.Random(rng.random()))
                for h, n in zip(handles, per, strict=True)
            )
        )
    finally:
        elapsed = time.perf_counter() - started
        progress.cancel()
        try:
            await progress
        except asyncio.CancelledError:
            pass
        if sys.stdout.isatty():
            print()
        notifier.close()
        notifier.drain()
    values = sorted(overheads)
    print(f"done: {len(values)} waits in {elapsed:.2f} s = {len(values) / elapsed:,.0f} waits/s")
    print(
        "wake overhead (await time minus kernel length): "
        f"p50 {_percentile(values, 0.5) * 1e6:.0f} µs, p99 {_percentile(values, 0.99) * 1e6:.0f} µs, "
        f"max {values[-1] * 1e6:.0f} µs"
    )
    if setup.kind == "sim":
        await _fault_demo()
    return 0


async def _fault_demo() -> None:
    from .. import sim, wait

    with sim.Device() as dev, Notifier() as notifier:
        s = dev.stream()
        s.launch(0.001, fault="CUDA_ERROR_ILLEGAL_ADDRESS")
        try:
            await wait(s, notifier=notifier)
        except CudaError as exc:
            print(f"a faulting kernel surfaces in the waiter: CudaError {exc.name} ({exc.code})")
        else:
            print("a faulting kernel did NOT raise: this is a bug")
        s.close()


def run(waits: int = 40000, streams: int = 32, force_sim: bool = False, mechanism: str | None = None) -> int:
    """Run the demo; returns the exit status."""
    if waits <= 0 or streams <= 0:
        print("--waits and --streams must be positive", file=sys.stderr)
        return 2
    setup = choose(force_sim)
    print(f"running on {setup.description}")
    setup.open()
    loop = asyncio.new_event_loop()
    try:
        status = loop.run_until_complete(_run(setup, waits, streams, mechanism))
    finally:
        loop.close()
        setup.close()
    time.sleep(0.05)  # let native waiter threads notice they are idle
    live = stats()
    shown = ", ".join(f"{k} {v}" for k, v in live.items())
    print(f"cudafd live counts now: {shown}")
    held = ("events", "eventfds", "pending", "notifiers", "poll_events", "poll_eventfds")
    leaked = {k: v for k, v in live.items() if k in held and v}
    if leaked:
        print(f"  (still held: {leaked}; threads and per-context records may linger briefly)")
    return status
