"""``python -m cudafd demo``: many concurrent asyncio waits on spin kernels of varied lengths.

One coroutine per stream launches a kernel, awaits ``cudafd.wait(stream)``,
and measures how long after the kernel's end (its launch time plus its
length: the kernel spins on the GPU's clock) it resumed: the launch, the
notification, the loop's wake-up and, with many coroutines, its turn on the
loop. Then one wait at a time on the otherwise idle loop, which shows the
wake-up alone. Runs on the real GPU when one is usable (with a hardware queue
per stream, up to the driver's 32: CUDA_DEVICE_MAX_CONNECTIONS, unless set,
so that no stream's kernel waits for another's), else on the simulator (and
says so beside its figures); shows a progress bar while it runs (rich or tqdm
when importable), then throughput, CPU, lateness percentiles, how the waits
were answered, and whether cudafd holds anything afterwards (it should not).

Exit status: 0; 2 for bad input (--waits or --streams not positive, a
malformed $CUDAFD_MECHANISM or $CUDAFD_MAX_LATENESS), 1 for a mechanism
this machine cannot use (``--mechanism syncfd`` off Jetson), each with a
one-line error. On the simulator a faulting kernel's wait follows, on the
demo's mechanism.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time

from .. import CudaError, CudafdError, Notifier, stats
from .progress import Progress
from ._device import Setup, choose

KERNEL_SECONDS = (10e-6, 50e-6, 200e-6, 1e-3, 3e-3)
ONE_AT_A_TIME = 300  # waits of the second part


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


async def _show_progress(bar: Progress, done: list[float], total: int) -> None:
    while len(done) < total:
        await asyncio.sleep(0.1)
        bar.update(len(done))


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


def _spread(values: list[float]) -> str:
    """p50, p99 and max of sorted ``values`` (seconds), in µs."""
    p50, p99 = (f"{_percentile(values, q) * 1e6:,.0f}" for q in (0.5, 0.99))
    return f"p50 {p50}, p99 {p99}, max {_us(values[-1])}"


def _kernels() -> str:
    lo, hi = min(KERNEL_SECONDS), max(KERNEL_SECONDS)
    return f"{lo * 1e6:g} µs to {hi * 1e3:g} ms"


def _native_counts() -> dict[str, int]:
    s = stats()
    return {k: s.get(k, 0) for k in ("completed", "faults", "queries", "wakes")}


async def _crowd(
    setup: Setup, handles: list[int], waits: int, notifier: Notifier, rng: random.Random
) -> tuple[list[float], float, float, float]:
    """``waits`` waits shared among one coroutine per stream, all at once, behind a progress
    bar: the lateness of each, the seconds taken, process cores and the loop thread's cores."""
    streams = len(handles)
    per = [waits // streams + (1 if i < waits % streams else 0) for i in range(streams)]
    overheads: list[float] = []
    cpu0, loop_cpu0 = time.process_time(), time.thread_time()
    started = time.perf_counter()
    with Progress(waits, "waits") as bar:
        shown = asyncio.ensure_future(_show_progress(bar, overheads, waits))
        try:
            await asyncio.gather(
                *(
                    _worker(setup, h, n, notifier, overheads, random.Random(rng.random()))
                    for h, n in zip(handles, per, strict=True)
                )
            )
        finally:
            elapsed = time.perf_counter() - started
            cores = (time.process_time() - cpu0) / elapsed
            loop_cores = (time.thread_time() - loop_cpu0) / elapsed
            shown.cancel()
            try:
                await shown
            except asyncio.CancelledError:
                pass
    return overheads, elapsed, cores, loop_cores


async def _run(setup: Setup, waits: int, streams: int, mechanism: str | None) -> int:
    handles = setup.streams(streams)
    for h in handles:
        setup.warm_up(h)
    try:
        notifier = Notifier(mechanism)
    except (ValueError, CudafdError) as exc:  # a bad $CUDAFD_MECHANISM or $CUDAFD_MAX_LATENESS; a mechanism unusable here
        print(f"python -m cudafd demo: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) else 1
    print(
        f"mechanism {notifier.mechanism}: {waits:,} waits over {streams} streams (one coroutine each), "
        f"kernels of {_kernels()}"
    )
    rng = random.Random(1234)
    try:
        before = _native_counts()
        overheads, elapsed, cores, loop_cores = await _crowd(setup, handles, waits, notifier, rng)
        after = _native_counts()
        alone: list[float] = []
        await _worker(setup, handles[0], min(ONE_AT_A_TIME, waits), notifier, alone, random.Random(rng.random()))
    finally:
        notifier.close()
        notifier.drain()
    values = sorted(overheads)
    print(
        f"{len(values):,} waits in {elapsed:.2f} s: {len(values) / elapsed:,.0f} waits/s, "
        f"process CPU {cores:.2f} cores (the loop's thread {loop_cores:.2f})"
    )
    print(f"resumed after the kernel's end, {streams} at once: {_spread(values)} (in turn on one loop)")
    print(f"resumed after the kernel's end, one at a time: {_spread(sorted(alone))} (on an idle loop)")
    if setup.kind == "sim":
        print(f"  {SIM_CAVEAT}")
    print(_how_they_ended(notifier.mechanism, len(values), before, after))
    if setup.kind == "sim":
        await _fault_demo(notifier.mechanism)
    return 0


SIM_CAVEAT = "(simulator: host-timed kernels; these figures show that the waits work, not GPU timings)"


def _how_they_ended(mechanism: str, waits: int, before: dict[str, int], after: dict[str, int]) -> str:
    """Which part of cudafd answered the waits: the loop's own check, or the native core through the fd."""
    if mechanism == "poll":
        return f"how the waits ended: all {waits:,} by the loop's own queries (poll: no native thread)"
    native = max(0, min(waits, after["completed"] - before["completed"]))
    queries = after["queries"] - before["queries"]
    text = (
        f"how the waits ended: {waits - native:,} by the loop's own check, {native:,} through the Notifier's fd"
    )
    if mechanism != "hostfunc" and native:
        text += f" ({queries / native:.1f} driver queries each)"
    return text


async def _fault_demo(mechanism: str) -> None:
    from .. import sim, wait

    with sim.Device() as dev, Notifier(mechanism) as notifier:
        s = dev.stream()
        s.launch(0.001, fault="CUDA_ERROR_ILLEGAL_ADDRESS")
        try:
            await wait(s, notifier=notifier)
        except CudaError as exc:
            print(f"a faulting kernel (simulated): its waiter got CudaError {exc.name} ({exc.code})")
        else:
            print("a faulting kernel did NOT raise: this is a bug")
        s.close()


def run(waits: int = 40000, streams: int = 32, force_sim: bool = False, mechanism: str | None = None) -> int:
    """Run the demo; returns the exit status."""
    if waits <= 0 or streams <= 0:
        print("python -m cudafd demo: error: --waits and --streams must be positive", file=sys.stderr)
        return 2
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", str(min(streams, 32)))  # read when the context is made
    setup = choose(force_sim)
    print(f"running on {setup.description}")
    setup.open()
    loop = asyncio.new_event_loop()
    try:
        status = loop.run_until_complete(_run(setup, waits, streams, mechanism))
    finally:
        loop.close()
        setup.close()
    if status != 2:  # (2: the input was refused before any wait)
        print(_left_open())
    return status


HELD = ("threads", "events", "eventfds", "pending", "notifiers", "notifications", "poll_events", "poll_eventfds")


def _left_open() -> str:
    """What cudafd still holds, once every Notifier is closed: nothing, unless something leaked."""
    deadline = time.monotonic() + 1.0
    while True:  # native waiter threads notice they are idle within a few ms
        live = stats()
        held = {k: live.get(k, 0) for k in HELD if live.get(k, 0)}
        if not held or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    if not held:
        return "left open afterwards: nothing (threads, events, fds, pending waits: all 0)"
    return "left open afterwards: " + ", ".join(f"{k} {v}" for k, v in held.items()) + " (a leak: please report it)"
