"""How forked children of a CUDA process end, with and without cudafd.

    python bench/fork_probe.py        # every variant, each in a process of its own; JSON lines

Each variant makes a parent that initialised the driver (cuInit, the primary
context of device 0 current, a stream), optionally with cudafd in use, then
forks 3 children that exit the normal way (sys.exit: atexit handlers and
finalizers run) or with os._exit. It prints each child's exit status: a
negative number is the signal that ended it (-11: SIGSEGV). Comparing the
variants tells a crash of cudafd's own exit path from one of the driver's.

Variants:
  driver        the parent only initialised the driver; the child exits normally
  driver-_exit  the same, the child ends with os._exit(0)
  imported      the parent also imported cudafd (no Notifier)
  pending       the parent has a Notifier with a pending watch; the child never touches cudafd
  used          as pending, and the child calls cudafd (which refuses: CudafdError)
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time

VARIANTS = ["driver", "driver-_exit", "imported", "pending", "used"]
CHILDREN = 3


def _driver() -> int:
    cu = ctypes.CDLL("libcuda.so.1")
    assert cu.cuInit(0) == 0
    dev, ctx, stream = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p()
    assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    assert cu.cuStreamCreate(ctypes.byref(stream), 1) == 0
    return stream.value or 0


def variant(name: str) -> dict:
    stream = _driver()
    keep = []
    if name in ("imported", "pending", "used"):
        import cudafd

        if name != "imported":
            n = cudafd.Notifier("event")
            n.watch(stream)  # an idle stream: done at once, still a token in its queue
            n.poll()
            keep.append(n)
    results = []
    for _ in range(CHILDREN):
        pid = os.fork()
        if pid == 0:
            if name == "driver-_exit":
                os._exit(0)
            if name == "used":
                import cudafd

                try:
                    cudafd.Notifier("event")
                except cudafd.CudafdError:
                    pass
            sys.exit(0)
        deadline = time.monotonic() + 20
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                results.append(os.waitstatus_to_exitcode(status))
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                results.append("hung")
                break
            time.sleep(0.01)
    return {"variant": name, "children": results}


def main() -> None:
    if len(sys.argv) > 1:
        print(json.dumps(variant(sys.argv[1])))
        return
    for name in VARIANTS:
        p = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True, timeout=120)
        line = p.stdout.strip().splitlines()[-1:] or [json.dumps({"variant": name, "rc": p.returncode, "stderr": p.stderr[-400:]})]
        print(line[0], flush=True)


if __name__ == "__main__":
    main()
