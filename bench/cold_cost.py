"""What each step of a long wait costs in CPU when it runs cold: right after
the thread slept through a 2 ms kernel, as it does when an event loop awaits
one (for tuning the idle-CPU figure; prints medians).

    python bench/cold_cost.py [--kernel-ms 2] [--rounds 300]

Each step is timed alone, on this thread's CPU clock, once per round, after
a sleep of the kernel's length (a kernel of that length runs meanwhile, so
the GPU side is as in the benchmark). "clock" is the cost of the two clock
reads themselves; the other rows include it.

A second table is whole rounds (process CPU, every thread): a launch, a
sleep and a spinning cuEventSynchronize, with each way of launching; the
bench's CPU bound "thread asleep for the kernel's length" is the first.
"""

from __future__ import annotations

import argparse
import statistics
import time
from ctypes import byref, c_void_p

import cudafd
from cudafd import _kernels
from cudafd._bench.gpu import EV_SPIN, Gpu
from cudafd._timerfd import OneShot
from cudafd._targets import resolve


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel-ms", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=300)
    a = ap.parse_args()
    kernel, rounds = a.kernel_ms / 1e3, a.rounds
    gpu = Gpu()
    drv = gpu.drv
    s = gpu.streams(1)[0]
    ev = gpu.event(EV_SPIN)
    prepared = _kernels.launcher(s)
    record, sync, query = drv.cuEventRecord, drv.cuEventSynchronize, drv.cuEventQuery  # type: ignore[attr-defined]
    cur = c_void_p()
    timer = OneShot()
    n = cudafd.Notifier("event")
    t = resolve(s)
    for _ in range(20):  # a history for the stream: timed watches from here on
        prepared(kernel)
        tok, due = n._watch_timed(t)
        while n._check(tok)[0] > 0 if due else not any(k == tok for k, _ in n.drain()):
            time.sleep(kernel / 20)
    print(f"{gpu.description}; kernel {a.kernel_ms} ms, {rounds} rounds", flush=True)

    clock = time.thread_time_ns
    rows: dict[str, list[int]] = {}

    def step(name: str, before, fn, after) -> None:
        got = rows.setdefault(name, [])
        for _ in range(rounds):
            ctx = before()
            time.sleep(kernel)
            c0 = clock()
            fn(ctx)
            got.append(clock() - c0)
            after(ctx)

    def launch_bg() -> None:
        prepared(kernel)

    def drain_all(_=None) -> None:
        sync(ev) if record(ev, s) == 0 else None

    nothing = lambda *_: None  # noqa: E731
    step("clock", launch_bg, nothing, drain_all)
    step("cuCtxGetCurrent", launch_bg, lambda _: drv.cuCtxGetCurrent(byref(cur)), drain_all)  # type: ignore[attr-defined]
    step("launch_spin (0 ns)", launch_bg, lambda _: _kernels.launch_spin(s, 0), drain_all)
    step("prepared launch (0 ns)", launch_bg, lambda _: prepared(0), drain_all)
    step("cuEventRecord", launch_bg, lambda _: record(ev, s), drain_all)
    step("cuEventQuery", launch_bg, lambda _: query(ev), drain_all)
    step("stream_done", launch_bg, lambda _: n._done_now(t), drain_all)
    step("timerfd arm", launch_bg, lambda _: timer.arm(1.0), lambda _: (timer.disarm(), drain_all()))

    def watch_then_check():
        got_w, got_c = rows.setdefault("watch_timed", []), rows.setdefault("check (done)", [])
        for _ in range(rounds):
            prepared(kernel)
            c0 = clock()
            tok, due = n._watch_timed(t)
            got_w.append(clock() - c0)
            time.sleep(kernel + 200e-6)
            c0 = clock()
            d, _e = n._check(tok) if due else (0, None)
            got_c.append(clock() - c0)
            while d > 0:
                time.sleep(20e-6)
                d, _e = n._check(tok)
            if not due:
                while not any(k == tok for k, _ in n.drain()):
                    time.sleep(20e-6)

    watch_then_check()
    print(f"{'step':26s} {'cpu p50 us':>10s} {'p90':>8s}")
    for name, v in rows.items():
        v.sort()
        print(f"{name:26s} {statistics.median(v) / 1e3:10.2f} {v[int(len(v) * 0.9)] / 1e3:8.2f}")

    def whole(name: str, launch) -> None:
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(rounds):
            launch(kernel)
            record(ev, s)
            time.sleep(kernel)
            sync(ev)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        print(f"{name:34s} {cpu / rounds * 1e6:8.1f} us CPU per round, {cpu / wall:.3f} cores")

    for _ in range(2):
        whole("launch_spin + sleep + sync", lambda k: _kernels.launch_spin(s, k))
        whole("prepared launch + sleep + sync", prepared)
    n.close()
    timer.close()
    gpu.close()


if __name__ == "__main__":
    main()
