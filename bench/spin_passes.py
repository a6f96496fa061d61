"""Why does a spin wait trail sleep(0) polling on long kernels? How often each asks, and how long each ask takes.

    python bench/spin_passes.py [--loop asyncio|uvloop] [--lengths 1ms,10ms,20ms] [--samples 40] [--rounds 3]

One stream, PyTorch kernels (``torch.cuda._sleep``), an end event recorded
after each. The ways take turns in every round, in an order rotated each
round:

- ``floor``: ``while not end.query(): pass`` (no yield): the earliest the loop's thread can tell;
- ``sleep0``: ``while not end.query(): await asyncio.sleep(0)``;
- ``spin``: ``await cudafd.wait(stream, notifier=Notifier("spin"))``, its
  asks (``Notifier.adapter_ask``) timed by a wrapper;
- ``ask``: the same asks without the asyncio adapter: a watch
  (``Notifier.adapter_watch``) on a second spin Notifier, then
  ``asyncio.sleep(0)`` and ``adapter_ask`` until over (no fast path, no
  reader on the Notifier's fd, no lanes);
- ``steps``: ``cudafd.wait``'s steps (``policy.WaitPolicy.steps``) on a
  third spin Notifier, driven by a loop that turns each into
  ``asyncio.sleep(0)``, without the asyncio adapter's Dispatcher;
- ``pre``: ``ask`` after what the steps do before their watch (a stream
  query, ``asyncio.sleep(0)``, a stream query);
- ``gen``: ``ask`` through the steps' asking generator
  (``policy._ask_until_over`` and its line of asking waits), each of its
  yields an ``asyncio.sleep(0)``.

Per way and length: p50/p99 of (resumed - launch returned) minus the
floor's p50, the kernel's p50 length on the GPU (timing events before and
after it) minus the floor's (the first column counts the kernel's length
too), ``begin``: the kernel's start after the launch returned and
``after``: the resumption after the kernel's end (each p50, host times of
GPU events through a reference event recorded on the idle stream before
each kernel and spun on), asks per wait, the p50 time between asks (the loop's pass),
the p50 time one ask takes, and the p50 time from the last ask that found
the work running to the one that found it over. If spin's lateness grows
with the kernel's length because its passes slow down as the wait ages,
the last column grows with it.
"""
from __future__ import annotations

import argparse
import asyncio
import time

import cudafd
from cudafd._bench import torchk
from collections import deque

from cudafd._core.policy import WaitPolicy, _ask_until_over
from cudafd._core.targets import resolve

WAYS = ("floor", "sleep0", "spin", "steps", "ask", "pre", "gen")


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


async def run(a: argparse.Namespace) -> None:
    torch, why = torchk.available()
    if torch is None:
        raise SystemExit(why)
    stream = torch.cuda.Stream()
    launch = torchk.launcher(torch, stream, torchk.calibrate(torch, stream)["cycles_per_s"])
    clock = time.perf_counter_ns
    asks: list[tuple[int, int]] = []  # (start ns, duration ns) of each ask of the wait in progress

    def timed(n):  # type: ignore[no-untyped-def]
        ask = n.adapter_ask

        def timed_ask(token: int):  # type: ignore[no-untyped-def]
            t0 = clock()
            r = ask(token)
            asks.append((t0, clock() - t0))
            return r

        n.adapter_ask = timed_ask
        return n

    notifier, stepped = timed(cudafd.Notifier("spin")), timed(cudafd.Notifier("spin"))
    policy = WaitPolicy()

    async def floor(end) -> None:  # type: ignore[no-untyped-def]
        while not end.query():
            pass

    async def sleep0(end) -> None:  # type: ignore[no-untyped-def]
        while True:
            t0 = clock()
            done = end.query()
            asks.append((t0, clock() - t0))
            if done:
                return
            await asyncio.sleep(0)

    async def spin(end) -> None:  # type: ignore[no-untyped-def]
        await cudafd.wait(stream, notifier=notifier)

    bare = cudafd.Notifier("spin")
    target = resolve(stream)

    async def ask_bare(end) -> None:  # type: ignore[no-untyped-def]
        token = bare.adapter_watch(target)
        while True:
            await asyncio.sleep(0)
            t0 = clock()
            over, exc = bare.adapter_ask(token)
            asks.append((t0, clock() - t0))
            if over:
                if exc is not None:
                    raise exc
                return

    async def steps(end) -> None:  # type: ignore[no-untyped-def]
        it = policy.steps(stepped, target)
        try:
            for token in it:
                assert token is None, "a spin wait is never parked"
                await asyncio.sleep(0)
        finally:
            it.close()

    async def pre(end) -> None:  # type: ignore[no-untyped-def]
        if bare.adapter_done_now(target):
            return
        await asyncio.sleep(0)
        if bare.adapter_done_now(target):
            return
        await ask_bare(end)

    genned = timed(cudafd.Notifier("spin"))

    async def gen(end) -> None:  # type: ignore[no-untyped-def]
        it = _ask_until_over(genned, genned.adapter_watch(target), deque())
        try:
            for _ in it:
                await asyncio.sleep(0)
        finally:
            it.close()

    fns = {"floor": floor, "sleep0": sleep0, "spin": spin, "steps": steps, "ask": ask_bare, "pre": pre, "gen": gen}
    lengths = [(n, float(n[:-2]) * (1e-3 if n.endswith("ms") else 1e-6)) for n in a.lengths.split(",")]
    rows: dict[tuple[str, str], dict[str, list[float]]] = {}
    for r in range(a.rounds):
        for name, seconds in lengths:
            order = WAYS[r % len(WAYS) :] + WAYS[: r % len(WAYS)]
            for way in order:
                row = rows.setdefault((name, way), {"lat": [], "gpu": [], "begin": [], "after": [], "asks": [], "pass": [], "ask": [], "last": []})
                for i in range(a.samples + 2):  # the first two of each turn warm the way up
                    ref, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                    ref.record(stream)  # the stream is idle: done at once, its host time read here
                    while not ref.query():
                        pass
                    h_ref = clock()
                    start.record(stream)
                    launch(seconds)
                    end.record(stream)
                    asks.clear()
                    t0 = clock()
                    await fns[way](end)
                    t1 = clock()
                    if i < 2:
                        continue
                    row["lat"].append((t1 - t0) / 1e3)
                    row["gpu"].append(start.elapsed_time(end) * 1e3)
                    row["begin"].append(ref.elapsed_time(start) * 1e3 - (t0 - h_ref) / 1e3)
                    row["after"].append((t1 - h_ref) / 1e3 - ref.elapsed_time(end) * 1e3)
                    if asks:
                        row["asks"].append(len(asks))
                        row["ask"].append(sum(d for _, d in asks) / len(asks) / 1e3)
                        if len(asks) > 1:
                            row["pass"].append((asks[-1][0] - asks[0][0]) / (len(asks) - 1) / 1e3)
                            row["last"].append((asks[-1][0] - asks[-2][0]) / 1e3)
    for n in (notifier, stepped, bare, genned):
        n.close()
    print(f"{a.loop}: one stream, {a.rounds} rounds x {a.samples} samples; µs; lateness minus the floor's p50")
    print(f"{'length':>6} {'way':>7} {'p50':>7} {'p99':>8} {'kernel':>7} {'begin':>7} {'after':>7} {'asks':>7} {'pass':>6} {'ask':>6} {'last gap':>8}")
    for name, _ in lengths:
        base = pct(rows[(name, "floor")]["lat"], 0.5)
        gbase = pct(rows[(name, "floor")]["gpu"], 0.5)
        for way in WAYS:
            row = rows[(name, way)]
            cols = [pct(row[k], 0.5) if row[k] else float("nan") for k in ("asks", "pass", "ask", "last")]
            print(f"{name:>6} {way:>7} {pct(row['lat'], 0.5) - base:7.1f} {pct(row['lat'], 0.99) - base:8.1f} "
                  f"{pct(row['gpu'], 0.5) - gbase:7.1f} {pct(row['begin'], 0.5):7.1f} {pct(row['after'], 0.5):7.1f} "
                  f"{cols[0]:7.0f} {cols[1]:6.2f} {cols[2]:6.2f} {cols[3]:8.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loop", default="asyncio", choices=("asyncio", "uvloop"))
    ap.add_argument("--lengths", default="1ms,10ms,20ms")
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.loop == "uvloop":
        import uvloop

        uvloop.run(run(a))
    else:
        asyncio.run(run(a))


if __name__ == "__main__":
    main()
