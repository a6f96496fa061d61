"""Where the CPU of a long wait goes, thread by thread.

    python bench/thread_cost.py [--kernel-ms 2] [--waits 300]

For each way of waiting, --waits kernels of --kernel-ms back to back on one
stream; before and after, every thread's on-CPU time (/proc schedstat, ns)
and voluntary context switches (each one a sleep, so a later wake). Prints,
per thread name: CPU µs per wait and sleeps per wait, then the core's own
counts per wait (``wakes``: the poller's wakes from its timer; a sleep not
counted there was a wait for a lock). Linux only.
  cudafd_event     Notifier("event").watch + select() on its fd + drain
  asyncio_event    await Notifier("event").wait(stream) in one asyncio loop (the
                   loop times each wait itself: cudafd_watch_stream_timed)
  asyncio_event_poller  the same with the poller timing them (as before the loop could)
The two asyncio ways take turns, twice.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import select
import time
from collections import defaultdict

from wait_cost import notifier_waiter  # bench/ is on sys.path when run as a script

import cudafd
from cudafd._bench.gpu import Gpu


CORE_COUNTS = ("wakes", "direct", "paced", "timed")


def snapshot() -> dict[str, list[int]]:
    """Per thread name: [cpu ns, voluntary switches, involuntary switches], summed;
    under "core": the native core's CORE_COUNTS."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    stats = cudafd.stats()
    core = [stats.get(k, 0) for k in CORE_COUNTS]
    for tid in os.listdir("/proc/self/task"):
        base = f"/proc/self/task/{tid}"
        try:
            name = open(f"{base}/comm").read().strip()
            cpu = int(open(f"{base}/schedstat").read().split()[0])
            status = open(f"{base}/status").read()
        except OSError:
            continue
        vol = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
        invol = int(status.split("nonvoluntary_ctxt_switches:")[1].split()[0])
        row = out[name]
        row[0] += cpu
        row[1] += vol
        row[2] += invol
    out["core"] = core
    return out


def report(name: str, waits: int, before, after, wall: float, kernel: float) -> None:
    print(f"{name}: {waits} waits, {(wall / waits - kernel) * 1e6:.1f} us over the kernel per wait")
    total = 0.0
    for thread in sorted((set(before) | set(after)) - {"core"}):
        a, b = after.get(thread, [0, 0, 0]), before.get(thread, [0, 0, 0])
        cpu = (a[0] - b[0]) / waits / 1e3
        total += cpu
        print(f"  {thread:18s} cpu/wait {cpu:8.1f} us  sleeps/wait {(a[1] - b[1]) / waits:6.2f}  "
              f"preempted/wait {(a[2] - b[2]) / waits:6.2f}")
    print(f"  {'all':18s} cpu/wait {total:8.1f} us")
    core = ", ".join(f"{k} {(a - b) / waits:.2f}" for k, a, b in zip(CORE_COUNTS, after["core"], before["core"]))
    print(f"  core, per wait: {core}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel-ms", type=float, default=2.0)
    ap.add_argument("--waits", type=int, default=300)
    a = ap.parse_args()
    kernel, waits = a.kernel_ms / 1e3, a.waits
    gpu = Gpu()
    s = gpu.streams(1)[0]
    print(f"{gpu.description}; kernel {a.kernel_ms} ms", flush=True)

    with cudafd.Notifier("event") as n:
        fd = n.fileno()
        one = notifier_waiter(gpu, s, kernel, n)

        for _ in range(30):
            one()
        before, t0 = snapshot(), time.perf_counter()
        for _ in range(waits):
            one()
        report("cudafd_event", waits, before, snapshot(), time.perf_counter() - t0, kernel)

        # the calling thread's CPU, step by step (thread_time: this thread only)
        steps = defaultdict(int)
        clock = time.thread_time_ns
        for _ in range(waits):
            c0 = clock()
            gpu.launch(s, kernel)
            c1 = clock()
            token = n.watch(s)
            c2 = clock()
            select.select([fd], [], [], 5.0)
            c3 = clock()
            got = n.drain()
            c4 = clock()
            while not any(t == token for t, _ in got):
                select.select([fd], [], [], 5.0)
                got = n.drain()
            for key, d in (("launch", c1 - c0), ("watch", c2 - c1), ("select", c3 - c2), ("drain", c4 - c3)):
                steps[key] += d
        print("  calling thread, per step: " + ", ".join(f"{k} {v / waits / 1e3:.1f} us" for k, v in steps.items()))
        c0 = clock()
        for _ in range(waits):
            time.sleep(kernel)
        print(f"  time.sleep({a.kernel_ms} ms) alone: {(clock() - c0) / waits / 1e3:.1f} us of this thread's CPU")

    async def aio(timed: bool):
        with cudafd.Notifier("event") as n:
            if not timed:  # every watch an ordinary one: the poller times it
                n._watch_timed = lambda t: (n._watch(t, False), 0)
            for _ in range(30):
                gpu.launch(s, kernel)
                await n.wait(s)
            before, t0 = snapshot(), time.perf_counter()
            for _ in range(waits):
                gpu.launch(s, kernel)
                await n.wait(s)
            name = "asyncio_event" if timed else "asyncio_event_poller"
            report(name, waits, before, snapshot(), time.perf_counter() - t0, kernel)

    for timed in (True, False, True, False):
        asyncio.run(aio(timed))
    gpu.close()


if __name__ == "__main__":
    main()
