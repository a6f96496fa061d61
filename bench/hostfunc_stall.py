"""Which driver call blocks while host functions wait behind a long kernel.

    python bench/hostfunc_stall.py [--gate 2] [--only base,hf16,...]

Found by the scale section: with the hostfunc mechanism, one watch among the
first 200 of 10,000 took the whole gate (every stream waits for a kernel of
--gate seconds). This probe makes the same setting with the driver alone, no
cudafd: 1,000 streams behind the gate, then --hostfuncs host functions
launched on one side stream (each after a wait for an event recorded on a
gated stream), then each step below, every call timed on its own:
  record    2,000 cuEventRecord on the gated streams (events made beforehand)
  wait      cuStreamWaitEvent of 40 side streams made beforehand, one each
  create    40 cuStreamCreate
  events    200 cuEventCreate
A step that blocks until the gate opens shows a call of about --gate seconds;
"held" says whether the gate still held after the step. Each variant runs in
a process of its own: base (no host function), hfN (N host functions),
hfN_steps=record+create (those steps only, in that order); bg_create (a
thread makes the 40 streams while this one records on the gated streams for
a second: does the blocked create hold up the other thread's calls?);
many:N (N gated streams, then up to 1,200 cuStreamCreate: which one blocks).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from ctypes import byref, c_int, c_uint, c_void_p

STEPS = ("record", "wait", "create", "events")
VARIANTS = ("base", "hf16", "hf4", "hf16_steps=create", "hf16_steps=events", "hf16_steps=wait", "hf40",
            "bg_create", "many:100", "many:500")


def one(variant: str, gate_s: float) -> dict:
    from cudafd._core import driver as _driver
    from cudafd._bench.gpu import EV_SPIN, Gpu

    name, _, only = variant.partition("_steps=")
    nhf = int(name[2:]) if name.startswith("hf") else 0
    steps = only.split("+") if only else list(STEPS)
    nstreams = int(name[5:]) if name.startswith("many:") else 1000
    if name.startswith("many:"):
        steps = ["many"]
    elif name == "bg_create":
        steps = ["bg_create"]
    gpu = Gpu()
    drv = gpu.drv
    dll = ctypes.CDLL(drv.path)
    launch_hf = dll.cuLaunchHostFunc
    launch_hf.restype = c_int
    launch_hf.argtypes = [c_void_p, c_void_p, c_void_p]
    ran = [0]
    callback = ctypes.CFUNCTYPE(None, c_void_p)(lambda _: ran.__setitem__(0, ran[0] + 1))

    def new_stream() -> int:
        s = c_void_p()
        _driver.check(drv.cuStreamCreate(byref(s), c_uint(1)), "cuStreamCreate")
        return s.value or 0

    handles = gpu.streams(nstreams)
    gate_stream = gpu.streams(1)[0]
    sides = [new_stream() for _ in range(41)]
    marks = [gpu.event(EV_SPIN) for _ in range(2000 + nhf)]
    gate = gpu.event(EV_SPIN)
    gpu.launch(gate_stream, gate_s)
    gpu.record(gate, gate_stream)
    for h in handles:
        gpu.wait_event(h, gate)
    for i in range(nhf):  # as the hostfunc mechanism: a point on a gated stream, the side stream waits, then the call
        ev = marks.pop()
        gpu.record(ev, handles[i // 10])
        gpu.wait_event(sides[40], ev)
        _driver.check(launch_hf(sides[40], ctypes.cast(callback, c_void_p), None), "cuLaunchHostFunc")
    calls = {
        "record": lambda k: drv.cuEventRecord(marks[k], handles[k % nstreams]),
        "wait": lambda k: gpu.wait_event(sides[k], marks[k]),
        "create": lambda k: new_stream(),
        "events": lambda k: gpu.event(EV_SPIN),
    }
    counts = {"record": 2000, "wait": 40, "create": 40, "events": 200, "many": 1200}
    calls["many"] = calls["create"]
    out: dict = {"variant": variant, "hostfuncs": nhf, "steps": {}}
    if steps == ["bg_create"]:
        out["steps"]["bg_create"] = _bg_create(lambda: (drv.cuCtxSetCurrent(gpu.ctx), new_stream()), lambda k: drv.cuEventRecord(marks[k % 2000], handles[k % nstreams]))
        out["steps"]["bg_create"]["held"] = not gpu.query_event(gate)
        steps = []
    for step in steps:
        clock = time.perf_counter
        worst, at = 0.0, 0
        t0 = clock()
        for k in range(counts[step]):
            c0 = clock()
            calls[step](k)
            took = clock() - c0
            if took > worst:
                worst, at = took, k
        total = clock() - t0
        out["steps"][step] = {
            "calls": counts[step],
            "us_each": round(total / counts[step] * 1e6, 2),
            "slowest_us": round(worst * 1e6, 1),
            "slowest_at": at,
            "held": not gpu.query_event(gate),
        }
    gpu.sync_event(gate)
    time.sleep(0.1)  # the host functions run on the driver's thread
    out["hostfuncs_ran"] = ran[0]
    return out


def _bg_create(new_stream, record) -> dict:
    """40 stream creations on a thread of their own while this thread records for a second."""
    import threading

    made: list[float] = []
    t0 = time.perf_counter()

    def create() -> None:  # (new_stream makes the context current on this thread first)
        time.sleep(0.1)
        for _ in range(40):
            new_stream()
            made.append(time.perf_counter() - t0)

    threading.Thread(target=create, daemon=True).start()
    worst, at, k = 0.0, 0.0, 0
    while time.perf_counter() - t0 < 1.0:
        c0 = time.perf_counter()
        record(k)
        took = time.perf_counter() - c0
        if took > worst:
            worst, at = took, c0 - t0
        k += 1
        time.sleep(0.0002)
    slow = max((b - a for a, b in zip([0.1] + made, made)), default=0.0)
    return {"calls": k, "us_each": 0.0, "slowest_us": round(worst * 1e6, 1), "slowest_at": round(at, 3),
            "creates_done": len(made), "slowest_create_s": round(slow, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gate", type=float, default=2.0)
    ap.add_argument("--only", default="", help="variants, comma-separated (names above)")
    ap.add_argument("--child", default="")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one(a.child, a.gate)))
        return
    env = dict(os.environ)
    for v in a.only.split(",") if a.only else VARIANTS:
        r = subprocess.run([sys.executable, __file__, "--child", v, "--gate", str(a.gate)],
                           capture_output=True, text=True, timeout=120, env=env)
        if r.returncode or not r.stdout.strip():
            print(f"{v}: failed (rc {r.returncode}): {r.stderr.strip().splitlines()[-3:]}")
            continue
        d = json.loads(r.stdout.strip().splitlines()[-1])
        steps = "  ".join(
            f"{s} {x['us_each']} us (slowest {x['slowest_us']} at {x['slowest_at']}, held {x['held']}"
            + "".join(f", {k} {v}" for k, v in x.items() if k in ("creates_done", "slowest_create_s", "calls"))
            + ")"
            for s, x in d["steps"].items()
        )
        print(f"{v:20s} ran {d['hostfuncs_ran']:3d}  {steps}")


if __name__ == "__main__":
    main()
