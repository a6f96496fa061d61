"""What the core's poller spends its CPU on with N streams: its wakes and its event queries.

    python bench/poller_split.py [--streams 64] [--window 2.0] [--loop asyncio|uvloop]

N streams, each a task looping over (``torch.cuda._sleep`` of a length
uniform in 50-3000 µs and a timing event, ``await cudafd.wait(stream)``:
the lateness section's launches, on N distinct streams) under the default
Notifier for ``--window`` seconds. Prints the waits, the poller's event
queries and wakes per second (``cudafd.stats()``'s cumulative counts), and
the CPU of each of the process's threads (``/proc/self/task``), so that with
``bench/c/query_cost.c``'s price of one query on N busy streams the poller's
CPU can be split between its wakes and its queries; and the waits' lateness
in the window (resumed minus the kernel's end, from its timing event, as in
the bench's lateness section).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import threading
import time

import cudafd
from cudafd._bench import torchk
from cudafd._bench.child import new_loop
from cudafd._bench.ends import TorchKernels
from cudafd._bench.gpu import Gpu
from cudafd._bench.numbers import quantile


def thread_cpu() -> dict[str, float]:
    """CPU seconds of every thread of this process, by 'tid name'."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        name = raw[raw.index("(") + 1: raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2:].split()
        out[f"{tid} {name}"] = (int(fields[11]) + int(fields[12])) / tick
    return out


async def run(a: argparse.Namespace) -> None:
    torch, why = torchk.available()
    if torch is None:
        raise SystemExit(why)
    kernels = TorchKernels(torch, Gpu())
    streams = kernels.streams(a.streams)
    kernels.prefill(a.streams * 4, False)
    n = cudafd.Notifier()
    stop = False
    waits = [0]
    late: list[float] = []
    counting = False
    kernels.anchor()

    async def worker(i: int, s) -> None:  # type: ignore[no-untyped-def]
        rng = random.Random(i)
        while not stop:
            mark = kernels.launch(s, rng.uniform(50e-6, 3000e-6))
            await cudafd.wait(s, notifier=n)
            if counting:
                late.append(time.perf_counter() - kernels.end_s(mark))
            kernels.release([mark])
            waits[0] += 1

    tasks = [asyncio.ensure_future(worker(i, s)) for i, s in enumerate(streams)]
    await asyncio.sleep(0.3)
    s0, c0, w0, t0 = cudafd.stats(), thread_cpu(), waits[0], time.perf_counter()
    counting = True
    await asyncio.sleep(a.window)
    counting = False
    s1, c1, w1, t1 = cudafd.stats(), thread_cpu(), waits[0], time.perf_counter()
    stop = True
    await asyncio.gather(*tasks)
    n.close()
    kernels.close()
    dt = t1 - t0
    main = f"{threading.get_native_id()} "
    print(f"{a.loop}, {a.streams} streams, {dt:.2f} s: {(w1 - w0) / dt:.0f} waits/s, "
          f"{(s1['queries'] - s0['queries']) / dt:.0f} poller queries/s, {(s1['wakes'] - s0['wakes']) / dt:.0f} wakes/s, "
          f"{(s1['queries'] - s0['queries']) / max(1, w1 - w0):.1f} queries per wait")
    late.sort()
    if late:
        print(f"  lateness p50 {quantile(late, 0.5) * 1e6:.0f} us, p99 {quantile(late, 0.99) * 1e6:.0f} us "
              f"over {len(late)} waits")
    total = sum(c1.values()) - sum(c0.get(k, 0.0) for k in c1)
    print(f"  process: {total / dt:.3f} cores")
    for k in sorted(c1):
        used = (c1[k] - c0.get(k, 0.0)) / dt
        if used >= 0.005:
            print(f"  {'loop ' if k.startswith(main) else ''}{k}: {used:.3f} cores")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--window", type=float, default=2.0)
    ap.add_argument("--loop", default="asyncio", choices=("asyncio", "uvloop"))
    a = ap.parse_args()
    loop = new_loop(a.loop)
    try:
        loop.run_until_complete(run(a))
    finally:
        loop.close()


if __name__ == "__main__":
    main()
