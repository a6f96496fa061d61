"""Why does a spin wait trail sleep(0) polling on long kernels? Side by side, with and without the garbage collector.

    python bench/spin_long.py [--loop asyncio] [--lengths 1ms,10ms,20ms] [--samples 60] [--rounds 3]

The lateness section's one-stream workload (:mod:`cudafd._bench.lateness`)
for ``cudafd_spin`` and ``sleep0`` as they are, and for each again with
Python's cyclic garbage collector off for the length of every await
(``_nogc``), beside the spin floor, the ways taking turns in the same rounds.
Prints p50/p99 lateness minus the floor's p50 per length. If the collector
made the spin wait late on long kernels (a spinning pass allocates, and a
collection runs every so many allocations), the ``_nogc`` rows close the gap.
"""
from __future__ import annotations

import argparse
import gc

from cudafd._bench import lateness, waiters
from cudafd._bench.child import Progress

NOGC = ("cudafd_spin_nogc", "sleep0_nogc")
_make_way = waiters._make


def _make_way_nogc(key, kernels, notifiers):
    if key not in NOGC:
        return _make_way(key, kernels, notifiers)
    way = _make_way(key[: -len("_nogc")], kernels, notifiers)
    inner = way.fn

    async def without_gc(stream, mark):
        gc.disable()
        try:
            await inner(stream, mark)
        finally:
            gc.enable()

    return waiters.Way(without_gc, way.blocking, way.close)


waiters._make = _make_way_nogc
for k in NOGC:
    waiters.LABELS[k] = waiters.LABELS[k[: -len("_nogc")]] + ", gc off"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loop", default="asyncio")
    ap.add_argument("--lengths", default="1ms,10ms,20ms")
    ap.add_argument("--samples", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    spec = [[n, float(n[:-2]) * (1e-3 if n.endswith("ms") else 1e-6), a.samples] for n in a.lengths.split(",")]
    p = {"loop": a.loop, "methods": ["cudafd_spin", "cudafd_spin_nogc", "sleep0", "sleep0_nogc", waiters.FLOOR],
         "one_stream": spec, "random_s": [50e-6, 3000e-6], "rounds": a.rounds, "streams": [], "window_s": 0.4,
         "multi_rounds": 1, "history": None, "warmup": 5, "torch": True, "soft_s": 200}
    out = lateness.run(p, Progress("spin_long", None, 600))
    print(f"{a.loop}: one stream, p50/p99 us minus the spin floor's p50 ({a.samples} samples, {a.rounds} rounds)")
    for name, wl in out["workloads"].items():
        row = []
        for key in p["methods"][:-1]:
            m = wl["methods"].get(key, {})
            n = m.get("net", m)
            row.append(f"{key} {n.get('p50', float('nan')):.1f}/{n.get('p99', float('nan')):.1f}")
        print(f"  {name:8s} " + "  ".join(row) + f"  floor {wl.get('floor_p50', float('nan')):.1f}")
    if out["errors"]:
        print("  errors:", out["errors"])


if __name__ == "__main__":
    main()
