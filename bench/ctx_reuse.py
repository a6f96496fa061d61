"""What happens to a context's handle, id and events when the context is destroyed and another is made?

    python bench/ctx_reuse.py [--mechanisms event,hostfunc,spin,poll]
    (a GPU, or the simulator with CUDAFD_DRIVER pointing at libcudafd_sim.so; one JSON line per case)

Every case runs in a fresh process of its own, so a crash is reported as the
signal that ended it. ``raw-*``: device 0's primary context is retained, an
event recorded there, the context released to zero (destroyed) and retained
again; the line says whether the new context has the old handle and the old
id (cuCtxGetId), then makes one driver call on the old event
(``cuEventRecord`` on a new stream, ``cuEventQuery`` or ``cuEventDestroy``)
and prints its result. ``notifier-<mechanism>``: a Notifier open across the
same release, one wait on a stream of the context before and two on a new
stream after, retained again; the line says whether the release destroyed
the context (cudafd holds a reference while a Notifier that watched there
is open), the waits' outcomes and, on the simulator, how many calls were
given an event that died with its context. ``released-<mechanism>``: the
same, but the first wait's Notifier is closed and ``cudafd_release_idle``
called before the release (cudafd then holds no reference, and the context
is destroyed), while another Notifier keeps the core's threads running: the
thread that asked about the first wait in the old context asks about the
new context's at the same handle.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

CHILD = r"""
import ctypes, json, select, sys, time
from ctypes import byref, c_int, c_uint, c_uint64, c_void_p
import cudafd
from cudafd._core import driver as _driver
from cudafd._core import lib as _lib

case = sys.argv[1]
drv = _driver.get()
drv.init()
out = {"case": case}

_dll = ctypes.CDLL(drv.path)

def ctx_id(ctx):
    f = getattr(_dll, "cuCtxGetId", None)
    if f is None:
        return None
    f.argtypes = [c_void_p, ctypes.POINTER(c_uint64)]
    v = c_uint64()
    r = f(ctx, byref(v))
    return v.value if r == 0 else f"error {r}"

def active():
    flags, act = c_uint(), c_int()
    _driver.check(drv.cuDevicePrimaryCtxGetState(0, byref(flags), byref(act)))
    return bool(act.value)

def retain():
    c = c_void_p()
    _driver.check(drv.cuDevicePrimaryCtxRetain(byref(c), 0))
    return c.value

def new_stream(ctx):
    s = c_void_p()
    with drv.pushed(ctx):
        _driver.check(drv.cuStreamCreate(byref(s), 1))
    return s.value

def wait(n, stream):
    token = n.watch(stream)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        select.select([n.fileno()], [], [], 0.5)
        for t, err in n.drain():
            if t == token:
                return "ok" if err is None else repr(err)
    return "timed out"

assert not active(), "device 0's primary context is active at the start"
c1 = retain()
out["id1"] = ctx_id(c1)
s1 = new_stream(c1)
n = None
if case.startswith("raw"):
    ev = c_void_p()
    with drv.pushed(c1):
        _driver.check(drv.cuEventCreate(byref(ev), 2))
        _driver.check(drv.cuEventRecord(ev, s1))
        _driver.check(drv.cuStreamSynchronize(s1))
else:
    mechanism = case.split("-", 1)[1]
    if case.startswith("released"):
        keep = cudafd.Notifier(mechanism)  # open across the release: the core's threads stay
    n = cudafd.Notifier(mechanism)
    out["first"] = wait(n, s1)
    if case.startswith("released"):
        n.close()
        out["freed"] = _lib.loaded().cudafd_release_idle()
        n = cudafd.Notifier(mechanism)
with drv.pushed(c1):
    _driver.check(drv.cuStreamDestroy(s1))
_driver.check(drv.cuDevicePrimaryCtxRelease(0))
out["destroyed"] = not active()
c2 = retain()
out["same_handle"] = c2 == c1
out["id2"] = ctx_id(c2)
s2 = new_stream(c2)
print(json.dumps(out), flush=True)  # what is known before the call that may crash
with drv.pushed(c2):
    if case == "raw-record":
        out["result"] = drv.cuEventRecord(ev, s2)
    elif case == "raw-query":
        out["result"] = drv.cuEventQuery(ev)
    elif case == "raw-destroy":
        out["result"] = drv.cuEventDestroy(ev)
    else:
        out["second"] = wait(n, s2)
        out["third"] = wait(n, s2)
if n is not None:
    n.close()
    if case.startswith("released"):
        keep.close()
    out["left"] = {k: v for k, v in cudafd.stats().items() if k in ("pending", "events", "threads", "contexts") and v}
if drv.sim is not None:
    out["dead_handle_calls"] = drv.sim.stats()["dead_handle_calls"]
print(json.dumps(out), flush=True)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mechanisms", default="event,hostfunc,spin,poll")
    args = ap.parse_args()
    mechanisms = args.mechanisms.split(",")
    cases = ["raw-record", "raw-query", "raw-destroy"] + [f"{how}-{m}" for how in ("notifier", "released") for m in mechanisms]
    for case in cases:
        p = subprocess.run([sys.executable, "-c", CHILD, case], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ))
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        got = json.loads(lines[-1]) if lines else {"case": case}
        got["rc"] = p.returncode
        if p.returncode != 0:
            got["stderr"] = p.stderr[-400:]
        print(json.dumps(got), flush=True)


if __name__ == "__main__":
    main()
