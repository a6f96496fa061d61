"""Why a notification point can cost the host milliseconds: the cost of
(launch + record) while many records are pending behind a busy GPU.

    python bench/record_cost.py [--points 2000] [--gate-s 1.0]

On the H200 (bench/results/2026-11-29-h200-suite) the bubble section saw
3-4.5 ms of host time per cudafd point behind a gate kernel. A plain re-record
of one spin event cost 1.1 us there, and the poll mechanism, whose events are
not blocking-sync, cost 10 us. The variants below separate the suspects: many
distinct events, the blocking-sync flag, and another thread in the driver.
Each variant: a gate kernel of --gate-s on one stream, then --points rounds
of (0 ns kernel + record), host time per round; then the stream drains.
  same_plain            one CU_EVENT_DISABLE_TIMING event, re-recorded
  distinct_plain        a new DISABLE_TIMING event per point
  distinct_blocking     a new BLOCKING_SYNC | DISABLE_TIMING event per point
  blocking_with_waiter  the same, while a thread blocks in cuEventSynchronize on the first
  plain_with_querier    distinct_plain, while a thread spins cuEventQuery on the first
  cudafd_<mech>         Notifier(mech).watch(stream) as the point
"""
from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import cudafd
from cudafd._bench.gpu import EV_BLOCKING, EV_SPIN, Gpu


def run_variant(gpu, stream, points, gate_s, point, helper=None):
    gpu.launch(stream, gate_s)
    stop = threading.Event()
    th = None
    times = []
    t_all = time.perf_counter()
    for i in range(points):
        t = time.perf_counter()
        gpu.launch(stream, 0)
        point(i)
        times.append(time.perf_counter() - t)
        if i == 0 and helper is not None:
            th = threading.Thread(target=helper, args=(stop,), daemon=True)
            th.start()
    host = time.perf_counter() - t_all
    gpu.sync_stream(stream)
    stop.set()
    if th is not None:
        th.join(5)
    times.sort()
    return {
        "p50_us": round(statistics.median(times) * 1e6, 2),
        "p99_us": round(times[int(0.99 * (len(times) - 1))] * 1e6, 2),
        "max_us": round(times[-1] * 1e6, 1),
        "host_s": round(host, 4),
        "gate_covered": host < gate_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=2000)
    ap.add_argument("--gate-s", type=float, default=1.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    gpu = Gpu()
    stream = gpu.streams(1)[0]
    print(f"{gpu.description}; {a.points} points behind a {a.gate_s} s gate", flush=True)
    rows = {}
    drv = gpu.drv

    def show(name, r):
        rows[name] = r
        print(f"{name:22s} p50 {r['p50_us']:9.2f} us  p99 {r['p99_us']:9.2f}  max {r['max_us']:9.1f}  "
              f"host {r['host_s']:.3f} s{'' if r['gate_covered'] else '  (host outlasted the gate)'}",
              flush=True)

    one = gpu.event(EV_SPIN)
    show("same_plain", run_variant(gpu, stream, a.points, a.gate_s, lambda i: gpu.record(one, stream)))
    for name, flags in (("distinct_plain", EV_SPIN), ("distinct_blocking", EV_BLOCKING)):
        evs = [gpu.event(flags) for _ in range(a.points)]
        show(name, run_variant(gpu, stream, a.points, a.gate_s, lambda i, evs=evs: gpu.record(evs[i], stream)))
    evs = [gpu.event(EV_BLOCKING) for _ in range(a.points)]
    show("blocking_with_waiter", run_variant(
        gpu, stream, a.points, a.gate_s, lambda i: gpu.record(evs[i], stream),
        helper=lambda stop: drv.cuEventSynchronize(evs[0])))  # type: ignore[attr-defined]
    evs2 = [gpu.event(EV_SPIN) for _ in range(a.points)]

    def querier(stop):
        while not stop.is_set() and drv.cuEventQuery(evs2[0]) != 0:  # type: ignore[attr-defined]
            pass

    show("plain_with_querier", run_variant(
        gpu, stream, a.points, a.gate_s, lambda i: gpu.record(evs2[i], stream), helper=querier))
    for mech in ("event", "spin", "hostfunc", "poll"):
        with cudafd.Notifier(mech) as n:
            show(f"cudafd_{mech}", run_variant(gpu, stream, a.points, a.gate_s, lambda i, n=n: n.watch(stream)))
            deadline = time.monotonic() + 10
            while n.pending and time.monotonic() < deadline:
                n.poll()
                n.drain()
                time.sleep(0.001)
    gpu.close()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"env": gpu.description, "points": a.points, "gate_s": a.gate_s, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
