"""Await latency and idle CPU, cudafd against the workarounds, side by side.

    python bench/latency.py [--rounds N] [--loop asyncio|uvloop] [--json FILE]

Each method launches a tiny kernel (the cudafd_spin PTX kernel with 0 ns, or
its simulated twin) on one stream and awaits it, N times after a warm-up; the
methods alternate in blocks so drift hits them alike. Reports p50/p99 in
microseconds and each one's ratio to the floor: the loop blocked in a
spinning cuEventSynchronize. Then the CPU (all threads, process time per wall
second) while awaiting 2 ms kernels back to back.
"""
from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import statistics
import sys
import time

import cudafd
from cudafd import _driver, _kernels

NOT_READY = 600


def setup():
    drv = _driver.get()
    ctx = ctypes.c_void_p()
    if getattr(drv, "sim", None) is not None:
        global _sim_device
        _sim_device = dev = cudafd.sim.Device(0)  # kept: collecting it destroys the context
        ctx_val = dev.context
    else:
        _driver.check(drv.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
        ctx_val = ctx.value
    _driver.check(drv.cuCtxSetCurrent(ctx_val))
    s = ctypes.c_void_p()
    _driver.check(drv.cuStreamCreate(ctypes.byref(s), 1))
    return drv, ctx_val, s.value


def make_event(drv, flags):
    ev = ctypes.c_void_p()
    _driver.check(drv.cuEventCreate(ctypes.byref(ev), flags))
    return ev.value


def methods(drv, stream):
    spin_ev = make_event(drv, 0x2)          # DISABLE_TIMING: cuEventSynchronize spins
    block_ev = make_event(drv, 0x1 | 0x2)   # BLOCKING_SYNC: cuEventSynchronize sleeps
    launch = _kernels.launch_spin

    async def floor_spin_sync(dur):
        launch(stream, dur)
        drv.cuEventRecord(spin_ev, stream)
        drv.cuEventSynchronize(spin_ev)

    async def executor_blocking(dur):
        launch(stream, dur)
        drv.cuEventRecord(block_ev, stream)
        await asyncio.get_running_loop().run_in_executor(None, drv.cuEventSynchronize, block_ev)

    async def executor_spinning(dur):
        launch(stream, dur)
        drv.cuEventRecord(spin_ev, stream)
        await asyncio.get_running_loop().run_in_executor(None, drv.cuEventSynchronize, spin_ev)

    async def sleep0_poll(dur):
        launch(stream, dur)
        drv.cuEventRecord(spin_ev, stream)
        while drv.cuEventQuery(spin_ev) == NOT_READY:
            await asyncio.sleep(0)

    async def sleep1ms_poll(dur):
        launch(stream, dur)
        drv.cuEventRecord(spin_ev, stream)
        while drv.cuEventQuery(spin_ev) == NOT_READY:
            await asyncio.sleep(0.001)

    out = {
        "floor: loop blocked in spin sync": floor_spin_sync,
        "executor + blocking event": executor_blocking,
        "executor + spinning event": executor_spinning,
        "sleep(0) poll": sleep0_poll,
        "sleep(1 ms) poll": sleep1ms_poll,
    }
    notifiers = {}
    for mech in ("event", "spin", "hostfunc", "poll"):
        def make(mech=mech):
            async def via_cudafd(dur):
                n = notifiers.get(mech)
                if n is None:
                    n = notifiers[mech] = cudafd.Notifier(mech)
                launch(stream, dur)
                await n.wait(stream)
            return via_cudafd
        out[f"cudafd {mech}"] = make()
    return out, notifiers


async def measure(fns, rounds, block, dur):
    samples = {k: [] for k in fns}
    for k, fn in fns.items():  # warm-up
        for _ in range(50):
            await fn(dur)
    done = 0
    while done < rounds:
        for k, fn in fns.items():
            for _ in range(block):
                t0 = time.perf_counter_ns()
                await fn(dur)
                samples[k].append((time.perf_counter_ns() - t0) / 1000)
        done += block
    return samples


async def cpu_while_awaiting(fns, seconds, dur):
    out = {}
    for k, fn in fns.items():
        if "1 ms" in k:
            pass
        w0, c0 = time.perf_counter(), time.process_time()
        n = 0
        while time.perf_counter() - w0 < seconds:
            await fn(dur)
            n += 1
        out[k] = (time.process_time() - c0) / (time.perf_counter() - w0)
    return out


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--loop", default="asyncio")
    ap.add_argument("--cpu-seconds", type=float, default=1.0)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    drv, ctx, stream = setup()
    fns, notifiers = methods(drv, stream)
    if a.loop == "uvloop":
        import uvloop
        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.SelectorEventLoop()
    samples = loop.run_until_complete(measure(fns, a.rounds, 100, 0.0))
    cpu = loop.run_until_complete(cpu_while_awaiting(
        {k: v for k, v in fns.items() if k != "floor: loop blocked in spin sync"}, a.cpu_seconds, 0.002))
    for n in notifiers.values():
        n.close()
    loop.close()
    floor = statistics.median(samples["floor: loop blocked in spin sync"])
    rows = []
    print(f"loop={a.loop} rounds={a.rounds} driver={_driver.get().path}")
    print(f"{'method':34s} {'p50 us':>8s} {'p99 us':>8s} {'x floor':>8s} {'cpu@2ms':>8s}")
    for k, xs in samples.items():
        p50, p99 = statistics.median(xs), pct(xs, 0.99)
        rows.append({"method": k, "p50_us": p50, "p99_us": p99, "ratio": p50 / floor, "cpu_2ms": cpu.get(k)})
        c = cpu.get(k)
        print(f"{k:34s} {p50:8.1f} {p99:8.1f} {p50 / floor:8.2f} {'' if c is None else f'{c:8.3f}'}")
    print("stats:", cudafd.stats())
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"loop": a.loop, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
