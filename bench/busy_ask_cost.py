"""What a wait's first steps cost the loop's thread on N busy streams, through the Notifier.

    python bench/busy_ask_cost.py [--streams 64] [--rounds 200]

Each of N streams runs a long ``cudafd_spin`` kernel. Per stream and round,
timed one by one with ``perf_counter_ns``: ``adapter_done_now`` (the policy's
ask before a watch: one stream query), ``adapter_watch`` (the core records its
event), ``adapter_ask`` on that token (one event query), and ``cancel``.
Then the same once the kernels are over (an ask that finds the core's
event passed claims the wait; right after a record, the event and the stream
may not have passed it yet).
Prints the p50 and p99 ns of each step, against ``bench/c/query_cost.c``'s
bare driver calls.
"""
from __future__ import annotations

import argparse
from time import perf_counter_ns

import cudafd
from cudafd._bench.ends import DriverKernels
from cudafd._bench.gpu import Gpu
from cudafd._core.targets import resolve


def pct(xs: list[int], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def steps(n: cudafd.Notifier, targets: list, rounds: int, over: bool) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {"done_now": [], "watch": [], "ask": [], "cancel": [], "ended": [], "done": []}
    for _ in range(rounds):
        for t in targets:
            t0 = perf_counter_ns()
            done = n.adapter_done_now(t)
            t1 = perf_counter_ns()
            tok = n.adapter_watch(t)
            t2 = perf_counter_ns()
            ended, exc = n.adapter_ask(tok)
            t3 = perf_counter_ns()
            if not ended:
                n.cancel(tok)
            t4 = perf_counter_ns()
            if (not over and (done or ended)) or exc is not None:
                raise SystemExit(f"unexpected: done_now {done}, ask {ended} {exc!r}, kernels over: {over}")
            out["ended"].append(ended)
            out["done"].append(done)
            out["done_now"].append(t1 - t0)
            out["watch"].append(t2 - t1)
            out["ask"].append(t3 - t2)
            if not ended:
                out["cancel"].append(t4 - t3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--kernel-s", type=float, default=2.0)
    a = ap.parse_args()
    k = DriverKernels(Gpu())
    streams = k.streams(a.streams)
    targets = [resolve(s) for s in streams]
    with cudafd.Notifier("event") as n:
        steps(n, targets, 5, True)  # warm: pool events made, code paths run
        marks = [k.launch(s, a.kernel_s) for s in streams]
        busy = steps(n, targets, a.rounds, False)
        if all(k.query(m) for m in marks):
            print("(the kernels ended before the busy rounds did: raise --kernel-s)")
        for m in marks:
            k.sync(m)
        n.drain()
        idle = steps(n, targets, a.rounds, True)
    print(f"{a.streams} streams, {a.rounds} rounds, on {k.device}; ns per step p50/p99")
    for name, res in (("running", busy), ("over", idle)):
        ended, done = res.pop("ended"), res.pop("done")
        print(f"  {name:8} " + "  ".join(f"{step} {pct(v, .5):.0f}/{pct(v, .99):.0f}" for step, v in res.items() if v)
              + f"  (over: done_now {sum(done)}, the ask {sum(ended)} of {len(ended)})")
    k.release(marks)
    k.gpu.close()


if __name__ == "__main__":
    main()
