"""Scale: many pending waits at once on one Notifier: they all complete, with bounded threads and memory.

Params: ``mechanism``, ``loop``, ``waits`` (10,000), ``streams`` (1,000),
``soft_s``. Every stream first waits (cuStreamWaitEvent) for a gate: an
event recorded after a kernel on a stream of its own, long enough (3x the
enqueue time, at no less than 150 µs a watch: what a watch costs with
thousands pending) for every watch to be made while nothing can complete. Then ``waits / streams`` watches per stream, all pending at once
(``all_pending_when_measured`` checks that the gate still held; the
slowest chunk of 100 watches is ``slowest_watches``: where a stall was).

Figures: resident memory added by the watches (/proc/self/statm) per wait
(cudafd's native records, its pooled events and the Notifier's bookkeeping;
the caller's own futures are not included); peak native threads of cudafd
(``cudafd.stats()["threads"]``, sampled every 2 ms and at every drain)
against the threads a notifier may need (the poller; for hostfunc its
watchdog); peak threads of the whole process;
completions per second once the gate opens: every wait over the time from
the gate's completion (seen by a thread polling cuEventQuery every ~50 µs)
to the last completion drained by the event loop through the fd.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time

from .. import Notifier, stats
from .._core import lib as _lib
from .bubble import _collect
from .child import Progress, new_loop
from .gpu import EV_SPIN, Gpu
from .proc import os_threads, rss_bytes

__all__ = ["run"]

WATCH_AT_SCALE_S = 150e-6  # the least the gate allows per watch


def _thread_cap() -> int | None:
    """The native threads a notifier may need: the poller, and for hostfunc its watchdog."""
    return 2 if _lib.try_load() is not None else None


class _Peaks:
    def __init__(self) -> None:
        self.native = 0
        self.process = 0

    def sample(self) -> None:
        self.native = max(self.native, stats().get("threads", 0))
        self.process = max(self.process, os_threads())


def _observe(gpu: Gpu, event: int, seen: list[float], stop: threading.Event) -> threading.Thread:
    """A thread that notes (in ``seen``) when the event completes, polling every ~50 µs."""

    def watch() -> None:
        while not stop.is_set():
            if gpu.query_event(event):
                seen.append(time.perf_counter())
                return
            time.sleep(50e-6)

    t = threading.Thread(target=watch, name="bench-gate-observer", daemon=True)
    t.start()
    return t


def _watch_all(n: Notifier, handles: list[int], per: int, chunk: int = 100) -> tuple[list[int], dict]:
    """``per`` watches on each stream, timed in chunks of ``chunk``: the tokens, the
    whole time, and the slowest chunk (which watches, µs per watch): a stall shows there."""
    todo = [h for h in handles for _ in range(per)]
    tokens: list[int] = []
    worst, at = 0.0, 0
    t0 = last = time.perf_counter()
    for k in range(0, len(todo), chunk):
        tokens += [n.watch(h) for h in todo[k : k + chunk]]
        now = time.perf_counter()
        if now - last > worst:
            worst, at = now - last, k
        last = now
    took = time.perf_counter() - t0
    span = min(chunk, len(todo) - at)
    return tokens, {"total_s": took, "from": at, "to": at + span, "us_per_watch": round(worst / span * 1e6, 1)}


async def _drain_all(
    n: Notifier, tokens: list[int], peaks: _Peaks, timeout: float, out: dict, opened: list[float]
) -> None:
    loop = asyncio.get_running_loop()
    left = set(tokens)
    done = loop.create_future()
    times: list[float] = []
    faulted = [0]

    def on_ready() -> None:
        for token, exc in n.drain():
            if token in left:
                left.discard(token)
                faulted[0] += exc is not None
        times.append(time.perf_counter())
        peaks.sample()
        if not left and not done.done():
            done.set_result(None)

    def tick() -> None:
        peaks.sample()
        if not done.done():
            loop.call_later(0.002, tick)

    loop.add_reader(n.fileno(), on_ready)
    tick()
    try:
        await asyncio.wait_for(done, timeout)
    except asyncio.TimeoutError:
        pass
    finally:
        loop.remove_reader(n.fileno())
    out["completed"] = len(tokens) - len(left)
    out["faulted"] = faulted[0]
    out["wakeups"] = len(times)
    if times and opened:
        span = max(times[-1] - opened[0], 1e-6)
        out["first_after_gate_us"] = round((times[0] - opened[0]) * 1e6, 1)
        out["drain_s"] = round(span, 5)
        out["drain_per_s"] = round(out["completed"] / span, 1)


def run(p: dict, progress: Progress) -> dict:
    waits, nstreams = int(p["waits"]), int(p["streams"])
    per = max(1, waits // nstreams)
    out: dict = {"mechanism": p["mechanism"], "loop": p["loop"], "waits": per * nstreams, "streams": nstreams}
    progress.partial = lambda: dict(out)
    gpu = Gpu()
    loop = new_loop(p["loop"])
    n = Notifier(p["mechanism"])
    peaks = _Peaks()
    try:
        handles = gpu.streams(nstreams)
        gate_stream = gpu.streams(1)[0]
        gate_ev = gpu.event(EV_SPIN)
        t0 = time.perf_counter()  # warm-up, and the cost of one watch for the gate's length
        warm = [n.watch(handles[i % nstreams]) for i in range(200)]
        per_watch = (time.perf_counter() - t0) / 200
        _collect(n, warm, 10.0)
        gc.collect()
        time.sleep(0.05)
        # A watch costs far more with thousands pending than in the warm-up (140-160 us on the H200's
        # event and hostfunc mechanisms, against ~10): the gate must outlast the watches at that cost.
        gate = min(10.0, max(0.3, 3 * max(per_watch, WATCH_AT_SCALE_S) * waits + 0.2))
        out.update(thread_cap=_thread_cap(), native_threads_before=stats().get("threads", 0), gate_s=round(gate, 3))
        gpu.launch(gate_stream, gate)
        gpu.record(gate_ev, gate_stream)
        for h in handles:
            gpu.wait_event(h, gate_ev)
        rss0 = rss_bytes()
        progress.tick(f"watching {per * nstreams} points on {nstreams} streams")
        tokens, slowest = _watch_all(n, handles, per)
        out["watch_us"] = round(slowest.pop("total_s") / len(tokens) * 1e6, 2)
        out["slowest_watches"] = slowest
        rss1 = rss_bytes()
        peaks.sample()
        out["all_pending_when_measured"] = not gpu.query_event(gate_ev)
        # only now: a thread polling the gate during the watches would be timed with them
        opened: list[float] = []
        stop = threading.Event()
        observer = _observe(gpu, gate_ev, opened, stop)
        out["native_pending"] = stats().get("pending", 0)
        out["bytes_per_wait"] = round((rss1 - rss0) / len(tokens), 1)
        progress.tick("waiting for the gate, then draining")
        try:
            loop.run_until_complete(_drain_all(n, tokens, peaks, gate + float(p["soft_s"]), out, opened))
        finally:
            stop.set()
            observer.join(1.0)
        out["all_completed"] = out["completed"] == len(tokens) and out["faulted"] == 0
    finally:
        out["peak_native_threads"] = peaks.native
        out["peak_process_threads"] = peaks.process
        n.close()
        n.drain()
        loop.close()
        gpu.close()
    return out
