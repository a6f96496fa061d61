"""A fence made right after a kernel's launch: is its fd readable at once, and was the work over then?

    python bench/fence_stall.py MECHANISM SECONDS [--prepare]

Repeats the set-up of tests/test_fence_notifier.py's readable-fd test on
GPU 0 (or the simulator with CUDAFD_TEST_DRIVER=sim) for SECONDS: the
primary context (released after each round, cudafd's side streams
destroyed first, as the suite's fixture does), a new stream, a 50 ms
kernel, ``cudafd.fence(stream, mechanism=MECHANISM)``, then
``poll(10 ms)`` on its fd. Prints every round whose fd was readable within
those 10 ms (how long after the launch, ``done()``, whether the stream was
idle, the outcome), then the counts. ``--prepare`` makes the mechanism's
streams first (``Notifier.prepare``), as the test does. On an H200 a stream
created while the GPU is busy can hold up every CUDA call until it drains
(docs/guide.md, "Many streams"): the hostfunc fence's side streams, made at
its watch, then return only once the kernel ended.
"""
import ctypes
import gc
import os
import select
import sys
import time

import cudafd
from cudafd._core import driver as _driver, kernels as _kernels, lib as _lib


class Round:
    """The test's set-up: GPU 0's primary context (or a simulated one), one new stream."""

    def __init__(self) -> None:
        self.drv = _driver.get()
        self.sim = None
        if getattr(self.drv, "sim", None) is not None:
            self.sim = cudafd.sim.Device()
            self.ctx = self.sim.context
        else:
            c = ctypes.c_void_p()
            _driver.check(self.drv.cuDevicePrimaryCtxRetain(ctypes.byref(c), 0))
            self.ctx = c.value
        s = ctypes.c_void_p()
        with _driver.pushed(self.ctx):
            _driver.check(self.drv.cuStreamCreate(ctypes.byref(s), 1))
        self.stream = s.value

    def idle(self) -> bool:
        return self.drv.cuStreamQuery(self.stream) == 0

    def close(self) -> None:
        """What the suite's fixture does: cudafd's side streams destroyed, then the context released."""
        gc.collect()
        _lib.load().cudafd_release_idle()
        self.drv.cuStreamSynchronize(self.stream)
        self.drv.cuStreamDestroy(self.stream)
        if self.sim is not None:
            self.sim.close()
        else:
            self.drv.cuDevicePrimaryCtxRelease(0)
            _kernels.forget(self.ctx)


def main() -> None:
    if os.environ.get("CUDAFD_TEST_DRIVER") == "sim":
        cudafd.use_simulator()
    mech, secs, prep = sys.argv[1], float(sys.argv[2]), "--prepare" in sys.argv[3:]
    n = early = 0
    end = time.monotonic() + secs
    while time.monotonic() < end:
        r = Round()
        if prep:
            with cudafd.Notifier(mech) as pn:
                pn.prepare(r.stream)
        t0 = time.perf_counter()
        _kernels.launch_spin(r.stream, 0.05)
        with cudafd.fence(r.stream, mechanism=mech) as f:
            made = time.perf_counter()
            p = select.poll()
            p.register(f.fileno(), select.POLLIN)
            if p.poll(10):
                t1 = time.perf_counter()
                done, idle = f.done(), r.idle()
                try:
                    f.wait(timeout=10)
                    out = repr(f.result())
                except Exception as exc:
                    out = f"{type(exc).__name__}: {exc}"
                print(f"readable: round {n}, fence made {1e3 * (made - t0):.2f} ms and readable {1e3 * (t1 - t0):.2f} ms "
                      f"after the launch, done() {done}, stream idle {idle}, outcome {out}", flush=True)
                early += 1
            else:
                f.wait(timeout=10)
        r.close()
        n += 1
    print(f"pid {os.getpid()} {mech}{' prepared' if prep else ''}: {n} fences, {early} readable within 10 ms", flush=True)


if __name__ == "__main__":
    main()
