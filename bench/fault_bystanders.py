"""What the driver says of other streams' events when their context faults.

    python bench/fault_bystanders.py            # every variant, each in its own process
    python bench/fault_bystanders.py VARIANT    # one variant, prints one JSON line

N bystander streams each run one long kernel (~400 ms) followed by a plain
event record; another stream of the same context runs a 20 ms kernel and then
a kernel that stores to a bad address. Every 0.5 ms for 2 s the probe queries
each bystander's event. When a bystander's query first leaves NOT_READY it
also records, at that instant, what other calls into the context return:
cuStreamQuery on the bystander's stream and on an idle stream, an event
record on the idle stream, cuMemGetInfo, and the faulting stream's event.

Variants: torch20 / torch4 (torch.cuda._sleep kernels, CuPy's bad store),
spin20 / spin4 (the project's spin kernel for both), cudafd20 (20 torch
streams awaited through one cudafd Notifier, as a user would).
"""
from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import time

VARIANTS = ["spin4", "spin20", "torch4", "torch20", "cudafd20"]
LONG_S = 0.4


def _cuda():
    lib = ctypes.CDLL("libcuda.so.1")
    for name in ("cuEventQuery", "cuStreamQuery", "cuEventRecord", "cuEventCreate", "cuStreamCreate"):
        getattr(lib, name).restype = ctypes.c_int
    return lib


def _bad_store():
    """CuPy's kernel that stores to address 8, compiled now (NVRTC takes ~0.3 s), launched later."""
    import cupy

    k = cupy.RawKernel(r'extern "C" __global__ void bad(){ *(volatile int*)8 = 1; }', "bad")
    k.compile()

    def launch(stream_handle: int) -> None:
        with cupy.cuda.ExternalStream(stream_handle):
            k((1,), (1,), ())

    return launch


def _torch_setup(n: int):
    import torch

    torch.cuda.init()
    s0 = torch.cuda.Stream()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(s0):
        a.record()
        torch.cuda._sleep(10_000_000)
        b.record()
    b.synchronize()
    cycles_per_s = 10_000_000 / (a.elapsed_time(b) / 1e3)
    streams = [torch.cuda.Stream() for _ in range(n)]
    faulting = torch.cuda.Stream()

    by_handle = {s.cuda_stream: s for s in streams + [faulting]}
    bad_store = _bad_store()

    def launch_long(h):
        with torch.cuda.stream(by_handle[h]):
            torch.cuda._sleep(int(LONG_S * cycles_per_s))

    def launch_fault(h):
        with torch.cuda.stream(by_handle[h]):
            torch.cuda._sleep(int(0.02 * cycles_per_s))
        bad_store(h)

    return [s.cuda_stream for s in streams], faulting.cuda_stream, launch_long, launch_fault, streams + [faulting]


def _spin_setup(n: int):
    from cudafd._core import driver as _driver, kernels as _kernels

    drv = _driver.get()
    drv.init()
    ctx = ctypes.c_void_p()
    _driver.check(drv.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
    _driver.check(drv.cuCtxSetCurrent(ctx.value))
    handles = []
    for _ in range(n + 1):
        s = ctypes.c_void_p()
        _driver.check(drv.cuStreamCreate(ctypes.byref(s), 1))
        handles.append(s.value)

    def launch_fault(h):
        _kernels.launch_spin(h, 0.02)
        _kernels.launch_spin(h, 0.0, fault=True)

    return handles[:n], handles[n], (lambda h: _kernels.launch_spin(h, LONG_S)), launch_fault, handles


def probe(variant: str) -> dict:
    n = int(variant.lstrip("abcdefghijklmnopqrstuvwxyz"))
    kind = variant.rstrip("0123456789")
    if kind == "cudafd":
        return _via_cudafd(n)
    setup = _torch_setup if kind == "torch" else _spin_setup
    bystanders, faulting, launch_long, launch_fault, _keep = setup(n)
    cu = _cuda()
    idle = ctypes.c_void_p()
    assert cu.cuStreamCreate(ctypes.byref(idle), 1) == 0

    def event():
        e = ctypes.c_void_p()
        assert cu.cuEventCreate(ctypes.byref(e), 2) == 0
        return e.value

    evs = [event() for _ in bystanders]
    fault_ev, probe_ev = event(), event()
    for s, e in zip(bystanders, evs):
        launch_long(s)
        assert cu.cuEventRecord(ctypes.c_void_p(e), ctypes.c_void_p(s)) == 0
    t0 = time.monotonic()
    launch_fault(faulting)
    cu.cuEventRecord(ctypes.c_void_p(fault_ev), ctypes.c_void_p(faulting))
    first: dict[int, dict] = {}
    fault_first = None
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    while time.monotonic() - t0 < 2.0 and (len(first) < len(evs) or fault_first is None):
        if fault_first is None:
            r = cu.cuEventQuery(ctypes.c_void_p(fault_ev))
            if r != 600:
                fault_first = {"t_ms": round((time.monotonic() - t0) * 1e3, 2), "rc": r}
        for i, (s, e) in enumerate(zip(bystanders, evs)):
            if i in first:
                continue
            r = cu.cuEventQuery(ctypes.c_void_p(e))
            if r == 600:
                continue
            first[i] = {
                "t_ms": round((time.monotonic() - t0) * 1e3, 2),
                "event": r,
                "stream": cu.cuStreamQuery(ctypes.c_void_p(s)),
                "idle_stream": cu.cuStreamQuery(idle),
                "record": cu.cuEventRecord(ctypes.c_void_p(probe_ev), idle),
                "meminfo": cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)),
                "fault_event": cu.cuEventQuery(ctypes.c_void_p(fault_ev)),
                "again": cu.cuEventQuery(ctypes.c_void_p(e)),
            }
        time.sleep(0.0005)
    later = [cu.cuEventQuery(ctypes.c_void_p(e)) for e in evs]
    rows = list(first.values())
    summary: dict[str, object] = {"variant": variant, "bystanders": len(evs), "fault_event": fault_first}
    for key in ("event", "stream", "idle_stream", "record", "meminfo", "fault_event", "again"):
        vals: dict[str, int] = {}
        for r in rows:
            vals[str(r[key])] = vals.get(str(r[key]), 0) + 1
        summary[key] = vals
    summary["t_ms"] = [min((r["t_ms"] for r in rows), default=None), max((r["t_ms"] for r in rows), default=None)]
    summary["later"] = {str(v): later.count(v) for v in set(later)}
    summary["rows"] = rows
    return summary


def _via_cudafd(n: int) -> dict:
    import asyncio

    import cudafd

    bystanders, faulting, launch_long, launch_fault, _keep = _torch_setup(n)
    out = {}
    mech = sys.argv[2] if len(sys.argv) > 2 else "event"

    async def main():
        notifier = cudafd.Notifier(mech)

        async def one(s):
            try:
                await notifier.wait(s)
                return "ok", time.monotonic()
            except cudafd.CudaError as e:
                return e.name, time.monotonic()

        for s in bystanders:
            launch_long(s)
        tasks = [asyncio.ensure_future(one(s)) for s in bystanders]
        await asyncio.sleep(0.005)
        t0 = time.monotonic()
        launch_fault(faulting)
        t_launched = time.monotonic()
        tasks.append(asyncio.ensure_future(one(faulting)))
        results = await asyncio.gather(*tasks)
        return results, t0, t_launched, time.monotonic() - t0

    t_begin = time.monotonic()
    results, t0, t_launched, elapsed = asyncio.run(main())
    names = [r[0] for r in results]
    ms = lambda t: round((t - t0) * 1e3, 1)  # noqa: E731
    out["variant"] = f"cudafd{n}-{mech}"
    out["bystanders"] = {v: names[:-1].count(v) for v in set(names[:-1])}
    out["faulting"] = names[-1]
    out["elapsed_s"] = round(elapsed, 3)
    # when each answer came, from the fault's launch (ms): if the bystanders' "ok" come
    # before the faulting stream's error, their kernels did end before the fault ran
    out["setup_ms"] = round((t0 - t_begin) * 1e3, 1)
    out["fault_launch_ms"] = ms(t_launched)
    out["faulting_at_ms"] = ms(results[-1][1])
    out["bystanders_at_ms"] = [min(ms(r[1]) for r in results[:-1]), max(ms(r[1]) for r in results[:-1])]
    return out


def main() -> None:
    if len(sys.argv) > 1:
        print(json.dumps(probe(sys.argv[1])))
        return
    for v in VARIANTS:
        extra = ["event", "spin", "hostfunc", "poll"] if v.startswith("cudafd") else [None]
        for m in extra:
            cmd = [sys.executable, __file__, v] + ([m] if m else [])
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr[-400:]
            print(line, flush=True)


if __name__ == "__main__":
    main()
