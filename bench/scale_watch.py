"""What a watch costs with thousands pending, and which thread makes it so.

    python bench/scale_watch.py [--waits 10000] [--streams 1000] [--gate 3] [--pad N] [--prepare]

The scale section's setting: every stream waits for a gate (a kernel of
--gate seconds on a stream of its own), then --waits / --streams watches
per stream, timed in ten chunks while nothing can complete. Each variant
runs in a process of its own (the core's options are process-wide) and
first makes 200 watches of work already over, as the scale section does:
  event             the event mechanism, default options
  event_lazy        CUDAFD_OPT_MAX_LATENESS_NS 10 ms: long waits asked seldom
  spin, hostfunc    the other mechanisms
Per variant: µs per watch in each chunk, the peak of cudafd's threads, and
each thread's CPU over the watches (µs per watch, by thread name).

--pad N makes N more streams first, moving the streams the core makes
under load (side streams) across the driver's
stream-creation boundaries (now and then a creation blocks until the GPU
drains: docs/performance.md); --prepare calls Notifier.prepare() on the
first stream before the gate, which is what it is for.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

VARIANTS = {
    "event": ("event", {}),
    "event_lazy": ("event", {"OPT_MAX_LATENESS_NS": 10 * 10**6}),
    "spin": ("spin", {}),
    "hostfunc": ("hostfunc", {}),
}


def parse(variant: str) -> tuple[str, dict[str, int]]:
    """A named variant, or ``mechanism[:OPTION=value,...]`` (options without their OPT_ prefix)."""
    if variant in VARIANTS:
        return VARIANTS[variant]
    mechanism, _, rest = variant.partition(":")
    options = {f"OPT_{k}": int(float(v)) for k, v in (kv.split("=") for kv in rest.split(",") if kv)}
    return mechanism, options


def one(variant: str, waits: int, nstreams: int, gate_s: float, nchunks: int, observe: bool,
        pad: int = 0, prepare: bool = False) -> dict:
    from thread_cost import snapshot

    import cudafd
    from cudafd._core import lib as _lib
    from cudafd._bench.gpu import EV_SPIN, Gpu
    from cudafd._core.notifier import Notifier

    mechanism, options = parse(variant)
    lib = _lib.load()
    for name, value in options.items():
        rc = lib.cudafd_set_option(getattr(_lib, name), ctypes.c_int64(value))
        assert rc == 0, (name, rc)
    gpu = Gpu()
    n = Notifier(mechanism)
    if pad:
        gpu.streams(pad)
    handles = gpu.streams(nstreams)
    if prepare:
        n.prepare(handles[0])
    gate_stream = gpu.streams(1)[0]
    warm = [n.watch(handles[i % nstreams]) for i in range(200)]
    while warm:
        got = {token for token, _ in n.drain()}
        warm = [t for t in warm if t not in got]
        time.sleep(0.001)
    gate = gpu.event(EV_SPIN)
    gpu.launch(gate_stream, gate_s)
    gpu.record(gate, gate_stream)
    for h in handles:
        gpu.wait_event(h, gate)
    stop = threading.Event()
    if observe:  # as the scale section does: a thread polling the gate every 50 us meanwhile
        def poll_gate() -> None:
            while not stop.is_set() and not gpu.query_event(gate):
                time.sleep(50e-6)

        threading.Thread(target=poll_gate, daemon=True).start()
    per = waits // nstreams
    chunk = max(1, len(handles) // nchunks)
    chunks, peak = [], 0
    before = snapshot()
    t0 = last = time.perf_counter()
    for k in range(len(handles) // chunk):
        for h in handles[k * chunk : (k + 1) * chunk]:
            for _ in range(per):
                n.watch(h)
        now = time.perf_counter()
        chunks.append(round((now - last) / (chunk * per) * 1e6, 1))
        peak = max(peak, cudafd.stats().get("threads", 0))
        last = now
    total = time.perf_counter() - t0
    after = snapshot()
    held = not gpu.query_event(gate)
    stop.set()
    count = chunk * per * (len(handles) // chunk)
    cpu = {
        name: round((after[name][0] - before.get(name, [0])[0]) / 1e3 / count, 2)
        for name in after
        if name != "core" and after[name][0] - before.get(name, [0])[0] > 0
    }
    from thread_cost import CORE_COUNTS

    core = {k: after["core"][i] - before["core"][i] for i, k in enumerate(CORE_COUNTS) if k in ("wakes", "paced", "direct")}
    n.close()
    stalled = next((i for i, us in enumerate(chunks) if us > 1000), None)
    return {
        "stalled_after": None if stalled is None else stalled * chunk * per,
        "variant": variant + (f" pad {pad}" if pad else "") + (" prepared" if prepare else ""),
        "us_per_watch": round(total / count * 1e6, 1),
        "chunks": chunks,
        "peak_threads": peak,
        "gate_held": held,
        "cpu_us_per_watch": cpu,
        "core_per_watch": {k: round(v / count, 3) for k, v in core.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--waits", type=int, default=10000)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--gate", type=float, default=3.0)
    ap.add_argument("--chunks", type=int, default=10)
    ap.add_argument("--observe", action="store_true", help="poll the gate from a thread during the watches")
    ap.add_argument("--only", default="", help="variants, comma-separated: names above or mechanism:OPTION=value+...")
    ap.add_argument("--pad", type=int, default=0, help="streams made before the gated ones")
    ap.add_argument("--prepare", action="store_true", help="Notifier.prepare() before the gate")
    ap.add_argument("--child", default="")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one(a.child, a.waits, a.streams, a.gate, a.chunks, a.observe, a.pad, a.prepare)))
        return
    for v in [x.replace("+", ",") for x in a.only.split(",")] if a.only else VARIANTS:
        args = [sys.executable, __file__, "--child", v, "--waits", str(a.waits), "--streams", str(a.streams),
                "--gate", str(a.gate), "--chunks", str(a.chunks), "--pad", str(a.pad)]
        args += (["--observe"] if a.observe else []) + (["--prepare"] if a.prepare else [])
        r = subprocess.run(args, capture_output=True, text=True, timeout=120)
        if r.returncode or not r.stdout.strip():
            print(f"{v}: failed (rc {r.returncode}): {r.stderr.strip().splitlines()[-1:]}")
            continue
        d = json.loads(r.stdout.strip().splitlines()[-1])
        cpu = ", ".join(f"{k} {x}" for k, x in sorted(d["cpu_us_per_watch"].items(), key=lambda kv: -kv[1])[:4])
        chunks = d["chunks"] if len(d["chunks"]) <= 10 else "..."
        print(f"{d['variant']:15s} {d['us_per_watch']:7.1f} us/watch  stalled after {d['stalled_after']} watches  chunks {chunks}  "
              f"threads {d['peak_threads']}  gate held {d['gate_held']}  cpu us/watch: {cpu}  core per watch: {d['core_per_watch']}")


if __name__ == "__main__":
    main()
