"""Does a new stream get the handle of one destroyed while its work still runs, and does a wait on it then wait for that work?

    python bench/handle_reuse.py [--reps N] [--busy-ms MS] [--mechanisms event,hostfunc,spin,poll]
    (a GPU, or the simulator; prints a table per mechanism)

The core keeps a stream's waits in order by the stream's handle (its lanes).
In each rep, for each case: stream A runs a kernel of ``--busy-ms`` (or
none: ``idle``), a cudafd fence watches A (or none: ``no wait``), A is
destroyed, stream B is created, and B's handle is compared with A's. Then a
kernel on B (``--new-ms``, default empty) and a fence on B: how long that fence took to report done
(a B that shares A's lane waits for A's kernel). Prints, per case, how often
B had A's handle and the p50/max of B's wait in ms, per mechanism of the fences.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import cudafd  # noqa: E402
from cudafd._bench.gpu import Gpu  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--busy-ms", type=float, default=100.0)
    ap.add_argument("--mechanisms", default="event,hostfunc,spin,poll")
    ap.add_argument("--new-ms", type=float, default=0.0, help="the kernel on B (default: an empty one)")
    args = ap.parse_args()
    gpu = Gpu()

    new_stream, destroy = gpu.own_stream, gpu.destroy_stream
    gpu.launch(gpu.streams(1)[0], 0.0)  # the kernel loaded
    cases = [(busy, watched) for busy in (False, True) for watched in (False, True)]
    print(f"{gpu.description}: {args.reps} reps, A busy for {args.busy_ms} ms, B's kernel {args.new_ms} ms")
    for mech in args.mechanisms.split(","):
        same: dict = {c: 0 for c in cases}
        took: dict = {c: [] for c in cases}
        for _ in range(args.reps):
            for busy, watched in cases:
                a = new_stream()
                if busy:
                    gpu.launch(a, args.busy_ms / 1e3)
                fa = cudafd.fence(a, mechanism=mech) if watched else None
                destroy(a)
                b = new_stream()
                same[(busy, watched)] += b == a
                gpu.launch(b, args.new_ms / 1e3)
                t0 = time.perf_counter()
                fb = cudafd.fence(b, mechanism=mech)
                fb.wait(10.0)
                took[(busy, watched)].append((time.perf_counter() - t0) * 1e3)
                fb.close()
                if fa is not None:
                    fa.wait(10.0)
                    fa.close()
                gpu.sync_stream(b)
                destroy(b)
                time.sleep(args.busy_ms / 1e3 if busy else 0.0)  # A's kernel over before the next case
        print(f"{mech}: case                 B had A's handle   B's wait p50 ms   max ms")
        for busy, watched in cases:
            t = took[(busy, watched)]
            name = f"A {'busy' if busy else 'idle'}, {'a wait on A' if watched else 'no wait'}"
            print(f"  {name:24} {same[(busy, watched)]:7d}/{args.reps:<10d} {statistics.median(t):14.3f} {max(t):8.3f}")
    gpu.close()


if __name__ == "__main__":
    main()
