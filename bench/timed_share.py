"""Whether timing every wait changes the lateness section's many-stream workloads.

    python bench/timed_share.py [--every 1,8] [--streams 64] [--loop asyncio] [--rounds 2]
                                [--window 0.4] [--methods A,B,...] [--gc-off]

The lateness section's N-stream workload (N tasks each looping over a
random 50-3000 µs kernel and an await), once per ``--every`` value in
turn, ``--rounds`` times: each task times one wait in ``every`` (a timing
event after its kernel) and records an untimed event after the others.
A timing event holds the hardware queue its stream shares with others until
its kernel ends (``bench/c/query_cost.c --hold``), so with more streams than
``CUDA_DEVICE_MAX_CONNECTIONS`` timing every wait makes them run in turn.
Prints, per value and method: the timed waits' lateness p50/p99/max (µs), all
waits a second, and the process's cores.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile

from cudafd._bench import lateness
from cudafd._bench.child import Progress
from cudafd._bench.options import FULL

METHODS = ["cudafd_default", "sleep0", "executor", "thread20us"]


def once(loop: str, every: int, a: argparse.Namespace) -> dict:
    p = dict(FULL["lateness"], loop=loop, methods=a.methods.split(","), one_stream=[], streams=[a.streams],
             history=None, window_s=a.window, multi_rounds=1, timed_every=every, soft_s=120)
    with tempfile.TemporaryDirectory() as d:
        out = lateness.run(p, Progress("timed_share", os.path.join(d, "r.json"), 300))
    return out["workloads"][f"{a.streams}x_random"]["methods"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--every", default="1,8")
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--loop", default="asyncio")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--window", type=float, default=0.4)
    ap.add_argument("--gc-off", action="store_true", help="Python's cyclic garbage collector off for the run")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help="the lateness section's ways, in the order of the first round")
    a = ap.parse_args()
    if a.gc_off:
        gc.disable()
    everies = [int(x) for x in a.every.split(",")]
    print(f"{a.streams} streams, {a.loop}, CUDA_DEVICE_MAX_CONNECTIONS={os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS')}")
    print(f"{'every':>5} {'method':<16} {'p50 us':>8} {'p99 us':>8} {'max us':>8} {'timed':>6} {'waits/s':>9} {'cores':>6}")
    for r in range(a.rounds):
        for every in everies if r % 2 == 0 else everies[::-1]:
            for key, m in once(a.loop, every, a).items():
                print(f"{every:>5} {key:<16} {m['p50']:>8.0f} {m['p99']:>8.0f} {m['max']:>8.0f} {m['n']:>6} "
                      f"{m.get('waits_per_s', 0):>9.0f} {m.get('cores', 0):>6.2f}", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
