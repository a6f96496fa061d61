"""Where the time of one await goes (for tuning; prints medians in µs).

    python bench/await_breakdown.py [--rounds N]

Steps, each measured alone on one stream with a 0 ns spin kernel:
  launch        _kernels.launch_spin (ctypes cuLaunchKernel)
  watch         Notifier.watch(stream) (resolve + core: context, event record, lane)
  to-drain      launch + watch, then busy drain() until the token comes back:
                the core's detection + queue, without any event loop
  to-drain-spin the same with the "spin" mechanism
  stream-done   cudafd_stream_done right after the launch (and how often the
                kernel had already finished then: the await fast path)
  sync-floor    launch + cuEventRecord + spinning cuEventSynchronize
  await         launch + await Notifier.wait(stream) under asyncio
  await-uvloop  the same under uvloop
"""
from __future__ import annotations

import argparse
import asyncio
import ctypes
import statistics
import time

import cudafd
from cudafd._core import driver as _driver, kernels as _kernels, lib as _lib

ns = time.perf_counter_ns


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3000)
    rounds = ap.parse_args().rounds
    drv = _driver.get()
    keep = None
    if getattr(drv, "sim", None) is not None:
        keep = cudafd.sim.Device()
        ctx = keep.context
    else:
        c = ctypes.c_void_p()
        _driver.check(drv.cuDevicePrimaryCtxRetain(ctypes.byref(c), 0))
        ctx = c.value
    _driver.check(drv.cuCtxSetCurrent(ctx))
    s = ctypes.c_void_p()
    _driver.check(drv.cuStreamCreate(ctypes.byref(s), 1))
    stream = s.value
    ev = ctypes.c_void_p()
    _driver.check(drv.cuEventCreate(ctypes.byref(ev), 2))
    out: dict[str, list[float]] = {}

    def rec(name, t):
        out.setdefault(name, []).append(t / 1000)

    for mech in ("event", "spin"):
        n = cudafd.Notifier(mech)
        for i in range(rounds):
            t0 = ns()
            _kernels.launch_spin(stream, 0)
            t1 = ns()
            n.watch(stream)
            t2 = ns()
            while not n.drain():
                pass
            t3 = ns()
            if i > 100:
                if mech == "event":
                    rec("launch", t1 - t0)
                    rec("watch", t2 - t1)
                rec("to-drain" if mech == "event" else "to-drain-spin", t3 - t0)
        n.close()
    lib = _lib.load()
    done_at_once = 0
    for i in range(rounds):
        t0 = ns()
        _kernels.launch_spin(stream, 0)
        t1 = ns()
        done = lib.cudafd_stream_done(stream)
        t2 = ns()
        done_at_once += done
        drv.cuStreamSynchronize(stream)
        if i > 100:
            rec("stream-done", t2 - t1)
    print(f"done when the launch returned: {done_at_once} of {rounds} tiny kernels")
    for i in range(rounds):
        t0 = ns()
        _kernels.launch_spin(stream, 0)
        drv.cuEventRecord(ev.value, stream)
        drv.cuEventSynchronize(ev.value)
        if i > 100:
            rec("sync-floor", ns() - t0)

    async def awaits(name):
        n = cudafd.Notifier("event")
        for i in range(rounds):
            t0 = ns()
            _kernels.launch_spin(stream, 0)
            await n.wait(stream)
            if i > 100:
                rec(name, ns() - t0)
        n.close()

    asyncio.run(awaits("await"))
    try:
        import uvloop

        loop = uvloop.new_event_loop()
        loop.run_until_complete(awaits("await-uvloop"))
        loop.close()
    except ImportError:
        pass
    for name, xs in out.items():
        xs.sort()
        print(f"{name:14s} p50 {statistics.median(xs):7.1f}  p99 {xs[int(0.99 * (len(xs) - 1))]:7.1f} µs")


if __name__ == "__main__":
    main()
