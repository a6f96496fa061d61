"""When the host first sees a kernel's end, by what it asks and who asks.

    python bench/event_seen.py [--reps N]     (a GPU with torch; prints a table)

Behind one ``torch.cuda._sleep`` kernel of each length (interleaved, N reps),
on one stream:

* ``timing``: a timing event recorded right after the kernel (the lateness
  bench's end mark), the reference;
* ``plain``: an event without timing (what cudafd's pool holds), recorded
  right after it;
* ``late``: another plain event, recorded 30 us later on the host, while the
  kernel runs (what a watch after the policy's short spin records);
* ``stream``: ``cuStreamQuery`` of the stream;
* ``spin``: a watch of a cudafd ``spin`` Notifier made with ``late``, found
  by its native poller and read from the Notifier's queue;

and one thread asks all of them in turn, without sleeping, noting when each
first reads done. Prints p50/p99 of each one's time minus ``timing``'s, in
us: what the event kind, the record's moment and the core's hand-over add to
when the end is seen, with no event loop and no sleep involved.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

LENGTHS_S = (200e-6, 1e-3, 5e-3, 10e-3)
LATE_S = 30e-6
KEYS = ("plain", "late", "stream", "spin")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()

    import torch

    import cudafd
    from cudafd._bench import torchk

    stream = torch.cuda.Stream()
    cps = torchk.calibrate(torch, stream)["cycles_per_s"]
    launch = torchk.launcher(torch, stream, cps)
    timing = torch.cuda.Event(enable_timing=True)
    plain, late = torch.cuda.Event(), torch.cuda.Event()
    n = cudafd.Notifier("spin")
    perf = time.perf_counter
    seen: dict[float, dict[str, list[float]]] = {s: {k: [] for k in KEYS} for s in LENGTHS_S}
    order = [s for s in LENGTHS_S for _ in range(args.reps)]
    random.Random(1).shuffle(order)
    for s in order:
        launch(s)
        timing.record(stream)
        plain.record(stream)
        until = perf() + LATE_S
        while perf() < until:
            pass
        late.record(stream)
        token = n.watch(stream)
        t: dict[str, float] = {}
        deadline = perf() + 10 + s
        while len(t) < 5:
            if perf() > deadline:
                raise SystemExit(f"not everything read done 10 s after a {s * 1e6:.0f} us kernel: {sorted(t)}")
            if "timing" not in t and timing.query():
                t["timing"] = perf()
            if "plain" not in t and plain.query():
                t["plain"] = perf()
            if "late" not in t and late.query():
                t["late"] = perf()
            if "stream" not in t and stream.query():
                t["stream"] = perf()
            if "spin" not in t and any(tok == token for tok, _ in n.drain()):
                t["spin"] = perf()
        for k in KEYS:
            seen[s][k].append((t[k] - t["timing"]) * 1e6)
    n.close()
    gpu = torch.cuda.get_device_name()
    print(f"first seen done, minus the timing event's first, p50/p99 us ({args.reps} reps each, {gpu})")
    print(f"{'kernel':>8}" + "".join(f"{k:>16}" for k in KEYS))
    for s in LENGTHS_S:
        cells = []
        for k in KEYS:
            x = sorted(seen[s][k])
            cells.append(f"{statistics.median(x):7.1f}/{x[int(len(x) * 0.99) - 1]:<7.1f}")
        print(f"{s * 1e6:6.0f}us" + "".join(f"{c:>16}" for c in cells))


if __name__ == "__main__":
    main()
