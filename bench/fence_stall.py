"""A fence made right after a kernel's launch: is its fd readable at once, and was the work over then?

    python bench/fence_stall.py MECHANISM SECONDS [--prepare]

Repeats the set-up of tests/test_fence_notifier.py's readable-fd test on
GPU 0 (or the simulator with CUDAFD_TEST_DRIVER=sim) for SECONDS: a test
Device (the primary context, released after each round), a new stream, a
50 ms kernel, ``cudafd.fence(stream, mechanism=MECHANISM)``, then
``poll(10 ms)`` on its fd. Prints every round whose fd was readable within
those 10 ms (how long after the launch, ``done()``, whether the stream was
idle, the outcome), then the counts. ``--prepare`` makes the mechanism's
streams first (``Notifier.prepare``), as the test does. On an H200 a stream
created while the GPU is busy can hold up every CUDA call until it drains
(docs/guide.md, "Many streams"): the hostfunc fence's side streams, made at
its watch, then return only once the kernel ended.
"""
import os
import select
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
os.environ.setdefault("CUDAFD_TEST_DRIVER", "real")

import cudafd  # noqa: E402
from support import Device, prepare, wait_for_zero_counts  # noqa: E402


def main() -> None:
    mech, secs, prep = sys.argv[1], float(sys.argv[2]), "--prepare" in sys.argv[3:]
    n = early = 0
    end = time.monotonic() + secs
    while time.monotonic() < end:
        d = Device(0)
        s = d.stream()
        if prep:
            prepare(s, mech)
        t0 = time.perf_counter()
        s.launch(0.05)
        with cudafd.fence(s, mechanism=mech) as f:
            made = time.perf_counter()
            p = select.poll()
            p.register(f.fileno(), select.POLLIN)
            if p.poll(10):
                t1 = time.perf_counter()
                done, idle = f.done(), s.idle()
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
        d.close()
        counts = wait_for_zero_counts()
        assert not any(counts.values()), counts
        n += 1
    print(f"pid {os.getpid()} {mech}{' prepared' if prep else ''}: {n} fences, {early} readable within 10 ms", flush=True)


if __name__ == "__main__":
    main()
