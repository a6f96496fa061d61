"""Does a stream's kernel wait for another stream's when both land on one hardware queue?

    python bench/queue_share.py [--between 0-17] [--busy-ms 300] [--new-ms 50] [--reps 2]
    (a GPU; CUDA_DEVICE_MAX_CONNECTIONS as the process has it, 8 by default)

Stream A runs a ``--busy-ms`` kernel; then ``k`` other streams are created
(idle), then stream B, whose ``--new-ms`` kernel is timed on the host from
its launch to ``cuStreamSynchronize``. If the driver handed out its
hardware queues in creation order, one ``k`` in every
CUDA_DEVICE_MAX_CONNECTIONS would put B on A's queue, and B would take about
busy + new ms instead of new ms. Prints one line per ``k``. No cudafd wait is involved: this is the driver's and the
GPU's behaviour, which cudafd's waits on such a stream inherit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from cudafd._bench.gpu import Gpu  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--between", default="0-17", help="the numbers k of streams made between A and B: LO-HI")
    ap.add_argument("--busy-ms", type=float, default=300.0)
    ap.add_argument("--new-ms", type=float, default=50.0)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.between.split("-"))
    gpu = Gpu()

    new_stream, destroy = gpu.own_stream, gpu.destroy_stream
    gpu.launch(gpu.streams(1)[0], 0.0)  # the kernel loaded
    conns = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "driver default (8)")
    print(f"{gpu.description}: CUDA_DEVICE_MAX_CONNECTIONS={conns}, A {args.busy_ms} ms, B {args.new_ms} ms")
    print("  k   B's kernel, ms (each rep)")
    for k in range(lo, hi + 1):
        took = []
        for _ in range(args.reps):
            a = new_stream()
            gpu.launch(a, args.busy_ms / 1e3)
            others = [new_stream() for _ in range(k)]
            b = new_stream()
            t0 = time.perf_counter()
            gpu.launch(b, args.new_ms / 1e3)
            gpu.sync_stream(b)
            took.append((time.perf_counter() - t0) * 1e3)
            gpu.sync_stream(a)
            for s in [a, b, *others]:
                destroy(s)
        print(f"  {k:2d}  {statistics.median(took):8.1f}   ({', '.join(f'{t:.1f}' for t in took)})")
    gpu.close()


if __name__ == "__main__":
    main()
