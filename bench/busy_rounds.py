"""What the busy-loop probes share (throughput_probe.py, board_probe.py):
their common options, the streams, and one measured run of N tasks each
looping (launch, await) under asyncio or uvloop."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from thread_cost import snapshot  # noqa: E402

from cudafd._bench.gpu import EV_SPIN, NOT_READY, Gpu  # noqa: E402

KERNEL = 100e-6


def add_options(ap: argparse.ArgumentParser, rounds: int) -> None:
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--loop", default="asyncio", choices=("asyncio", "uvloop"))


class Busy:
    """The GPU, ``n`` streams with a prepared launcher and an event each."""

    def __init__(self, n: int) -> None:
        os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
        self.gpu = gpu = Gpu()
        self.streams = gpu.streams(n)
        self.launchers = [gpu.launcher(s) for s in self.streams]
        self.events = [gpu.event(EV_SPIN) for _ in self.streams]

    def sleep0(self) -> Callable[[int], Awaitable[None]]:
        """The polling baseline: record, then ``while not query(): await sleep(0)``."""
        drv, streams, events, launchers = self.gpu.drv, self.streams, self.events, self.launchers

        async def one(i: int) -> None:
            launchers[i](KERNEL)
            drv.cuEventRecord(events[i], streams[i])  # type: ignore[attr-defined]
            while drv.cuEventQuery(events[i]) == NOT_READY:  # type: ignore[attr-defined]
                await asyncio.sleep(0)

        return one

    def bare(self, yielder: Callable[[], Awaitable[None]]) -> Callable[[int], Awaitable[None]]:
        """The ceiling: a launch and one bare yield, learning nothing."""
        launchers = self.launchers

        async def one(i: int) -> None:
            launchers[i](KERNEL)
            await yielder()

        return one


async def measure(
    one: Callable[[int], Awaitable[None]], tasks: int, seconds: float, counter: Callable[[], int] = lambda: 0
) -> tuple[float, dict, dict, float, int]:
    """``tasks`` tasks each looping ``one(i)``; after 0.3 s of run-in, ``seconds``
    measured: awaits/s, thread snapshots before and after, the wall time, and
    how much ``counter()`` moved meanwhile."""
    count = [0]
    stop = [False]

    async def worker(i: int) -> None:
        while not stop[0]:
            await one(i)
            count[0] += 1

    running = [asyncio.ensure_future(worker(i)) for i in range(tasks)]
    await asyncio.sleep(0.3)
    n0, c0, before, t0 = count[0], counter(), snapshot(), time.perf_counter()
    await asyncio.sleep(seconds)
    n1, c1, after, wall = count[0], counter(), snapshot(), time.perf_counter() - t0
    stop[0] = True
    await asyncio.gather(*running)
    return (n1 - n0) / wall, before, after, wall, c1 - c0


def run_on(loop: str, coro: Awaitable[tuple]) -> tuple:
    if loop == "uvloop":
        import uvloop

        return uvloop.run(coro)  # type: ignore[arg-type]
    return asyncio.run(coro)  # type: ignore[arg-type]


def start(rounds: int, option: str, default: str, text: str) -> tuple[argparse.Namespace, Busy]:
    """Parse the common options plus ``option`` (a probe's own), print the
    header line, and open the streams."""
    ap = argparse.ArgumentParser()
    add_options(ap, rounds)
    ap.add_argument(option, default=default)
    a = ap.parse_args()
    busy = Busy(a.streams)
    print(f"{busy.gpu.description}; {a.streams} streams x 100 us, {a.loop}{text}")
    return a, busy


LOOP_THREAD = open("/proc/self/comm").read().strip()


def per_await(before: dict, after: dict, rate: float, wall: float, threads: tuple[str, ...]) -> list[float]:
    """The process's cores between two snapshots, then the µs of CPU per
    await of the loop's thread and of each of ``threads`` (by name)."""
    cpu = {k: (after[k][0] - before.get(k, [0])[0]) / 1e9 for k in after if k != "core"}
    n = rate * wall
    return [sum(cpu.values()) / wall] + [cpu.get(t, 0.0) / n * 1e6 for t in (LOOP_THREAD, *threads)]


def print_table(got: dict[str, list[tuple[float, ...]]], columns: list[tuple[str, str]]) -> None:
    """Medians per variant: awaits/s (each row's first figure), its ratio to
    ``sleep0``'s, then ``columns`` (title, format) for the row's other
    figures; then every round's awaits/s."""
    base = median(r[0] for r in got["sleep0"])
    print(f"{'variant':14s} {'awaits/s':>10s} {'x sleep0':>8s} " + " ".join(f"{t:>{len(t)}s}" for t, _ in columns))
    for name, rows in got.items():
        med = [median(r[i] for r in rows) for i in range(len(columns) + 1)]
        cells = " ".join(format(m, f).rjust(len(t)) for (t, f), m in zip(columns, med[1:]))
        print(f"{name:14s} {med[0]:10,.0f} {med[0] / base:8.2f} {cells}")
    print("per round (awaits/s): " + "; ".join(f"{k} " + ",".join(f"{r[0]:.0f}" for r in v) for k, v in got.items()))
