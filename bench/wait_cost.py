"""What one long wait costs: process CPU and added latency per way of learning
that a kernel finished (for tuning the idle-CPU figure; prints a table).

    python bench/wait_cost.py [--kernel-ms 2] [--waits 300]

Each strategy waits for --waits kernels of --kernel-ms back to back on one
stream, on the calling thread, with no event loop unless named:
  sleep_only      time.sleep(kernel) and no GPU: what any wake-up costs here
  spin_query      spin on cuEventQuery (one core; the latency floor)
  blocking_sync   cuEventSynchronize on a CU_EVENT_BLOCKING_SYNC event
  sleep_poll_N    cuEventQuery, then time.sleep(N µs) until it succeeds
  cudafd_<mech>   Notifier(mech).watch + select() on its fd + drain
  cudafd_event_nospin  the same with the poller's spin budget at 0
  asyncio_<mech>  await Notifier(mech).wait(stream) under asyncio
Figures: cpu_us = process CPU (every thread) per wait; over_us = median of
(wall per wait - kernel); cores = CPU seconds per wall second.
"""
from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import select
import statistics
import time

import cudafd
from cudafd import _lib
from cudafd._bench.gpu import EV_BLOCKING, EV_SPIN, Gpu

OPT_SPIN_NS = 0


def notifier_waiter(gpu, stream, kernel, n):
    """One wait as a C program would do it: launch, watch, select() on the fd, drain."""
    fd = n.fileno()

    def one():
        gpu.launch(stream, kernel)
        token = n.watch(stream)
        while True:
            select.select([fd], [], [], 5.0)
            if any(t == token for t, _ in n.drain()):
                return

    return one


def measure(name, waits, kernel, one, rows):
    one()  # warm
    walls = []
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(waits):
        t = time.perf_counter()
        one()
        walls.append(time.perf_counter() - t)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    walls.sort()
    rows[name] = {
        "cpu_us": round(cpu / waits * 1e6, 1),
        "over_us": round((statistics.median(walls) - kernel) * 1e6, 1),
        "over_p99_us": round((walls[int(0.99 * (len(walls) - 1))] - kernel) * 1e6, 1),
        "cores": round(cpu / wall, 4),
    }
    r = rows[name]
    print(f"{name:22s} cpu/wait {r['cpu_us']:8.1f} us  over p50 {r['over_us']:8.1f} us  "
          f"p99 {r['over_p99_us']:8.1f}  cores {r['cores']:.4f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel-ms", type=float, default=2.0)
    ap.add_argument("--waits", type=int, default=300)
    ap.add_argument("--json")
    a = ap.parse_args()
    kernel, waits = a.kernel_ms / 1e3, a.waits
    gpu = Gpu()
    print(f"{gpu.description}; kernel {a.kernel_ms} ms, {waits} waits per strategy", flush=True)
    s = gpu.streams(1)[0]
    ev_spin, ev_block = gpu.event(EV_SPIN), gpu.event(EV_BLOCKING)
    rows: dict[str, dict] = {}

    measure("sleep_only", waits, kernel, lambda: time.sleep(kernel), rows)

    def spin_query():
        gpu.launch(s, kernel)
        gpu.record(ev_spin, s)
        while not gpu.query_event(ev_spin):
            pass

    measure("spin_query", waits, kernel, spin_query, rows)

    def blocking_sync():
        gpu.launch(s, kernel)
        gpu.record(ev_block, s)
        gpu.sync_event(ev_block)

    measure("blocking_sync", waits, kernel, blocking_sync, rows)

    for us in (50, 100, 250, 500):
        def sleep_poll(us=us):
            gpu.launch(s, kernel)
            gpu.record(ev_spin, s)
            while not gpu.query_event(ev_spin):
                time.sleep(us * 1e-6)

        measure(f"sleep_poll_{us}", waits, kernel, sleep_poll, rows)

    lib = _lib.load()

    def notifier_way(n):
        return notifier_waiter(gpu, s, kernel, n)

    for mech in ("event", "spin", "hostfunc"):
        with cudafd.Notifier(mech) as n:
            measure(f"cudafd_{mech}", waits, kernel, notifier_way(n), rows)

    old = ctypes.c_int64()
    lib.cudafd_get_option(OPT_SPIN_NS, ctypes.byref(old))
    lib.cudafd_set_option(OPT_SPIN_NS, 0)
    try:
        with cudafd.Notifier("event") as n:
            measure("cudafd_event_nospin", waits, kernel, notifier_way(n), rows)
    finally:
        lib.cudafd_set_option(OPT_SPIN_NS, old.value)

    for mech in ("event", "poll"):
        loop = asyncio.new_event_loop()
        n = cudafd.Notifier(mech)

        async def one_await(n=n):
            gpu.launch(s, kernel)
            await n.wait(s)

        measure(f"asyncio_{mech}", waits, kernel, lambda loop=loop, f=one_await: loop.run_until_complete(f()), rows)
        n.close()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()

    gpu.close()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"env": gpu.description, "kernel_ms": a.kernel_ms, "waits": waits, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
