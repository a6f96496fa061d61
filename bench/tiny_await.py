"""Await latency of a tiny kernel, and how often a wait's first ask finds it over.

    python bench/tiny_await.py [--loop asyncio|uvloop] [--rounds 3000] [--block 100]

One stream, kernels of 0 ns (the project's kernel), the methods rotating in
blocks as in ``python -m cudafd bench latency``: the loop blocked in a
spinning sync (floor), ``sleep(0)`` polling, and cudafd's ``event`` and
``spin`` waits. For the cudafd methods it counts the driver asks per wait
(``Notifier.adapter_done_now`` calls): the share of waits whose first ask
found the kernel over, and the mean per wait. Run it with different trees
first on PYTHONPATH to compare them in alternating processes. Prints one
JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from cudafd._bench.child import new_loop
from cudafd._bench.gpu import Gpu
from cudafd._bench.methods import Kit, close_all, make

METHODS = ("floor", "sleep0", "cudafd_event", "cudafd_spin")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loop", default="asyncio")
    ap.add_argument("--rounds", type=int, default=3000)
    ap.add_argument("--block", type=int, default=100)
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    gpu = Gpu()
    kit = Kit(gpu)
    stream = gpu.streams(1)[0]
    asks = {"n": 0}
    fns = {k: make(k, kit, stream) for k in METHODS}
    for mech in ("event", "spin"):
        n = kit.notifier(mech)
        done_now = n.adapter_done_now

        def counted(t, done_now=done_now):
            asks["n"] += 1
            return done_now(t)

        n.adapter_done_now = counted
    samples: dict[str, list[float]] = {k: [] for k in METHODS}
    first_hit = {k: 0 for k in METHODS}
    total_asks = {k: 0 for k in METHODS}
    loop = new_loop(a.loop)

    async def measure() -> None:
        for fn in fns.values():
            for _ in range(50):
                await fn(0.0)
        perf = time.perf_counter_ns
        for i in range(a.rounds // a.block):
            shift = i % len(METHODS)
            for key in METHODS[shift:] + METHODS[:shift]:
                fn, xs = fns[key], samples[key]
                for _ in range(a.block):
                    asks["n"] = 0
                    t0 = perf()
                    await fn(0.0)
                    xs.append((perf() - t0) / 1000.0)
                    first_hit[key] += asks["n"] == 1
                    total_asks[key] += asks["n"]

    try:
        loop.run_until_complete(measure())
    finally:
        close_all(loop, kit)
    out = {"tag": a.tag, "loop": a.loop}
    for k, xs in samples.items():
        xs.sort()
        out[k] = {
            "p50": round(statistics.median(xs), 2),
            "p99": round(xs[int(0.99 * (len(xs) - 1))], 2),
            "first_ask_over": round(first_hit[k] / len(xs), 3) if k.startswith("cudafd") else None,
            "asks": round(total_asks[k] / len(xs), 2) if k.startswith("cudafd") else None,
        }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
