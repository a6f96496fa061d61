"""Stream bubble: the µs a notification point adds between short kernels on one stream.

``kernels`` cudafd_spin kernels of ``kernel_s`` (5 µs) run back to back on
one stream with a point after each; the GPU time of the whole run, minus
that of the same run without points, divided by ``kernels``, is the bubble
per point. Variants: ``none``; ``record`` (a plain cuEventRecord: what any
event-based notification costs at least); ``cudafd_<mechanism>``
(``Notifier.watch(stream)`` after each kernel). A host function calling
nothing cannot be launched from Python without taking the GIL on the
driver's thread, so the hostfunc mechanism stands for it here; the C
benchmark (bench/c) measures the bare host function.

Python enqueues slower than the GPU runs 5 µs kernels, so each batch of
``batch`` kernels waits behind a gate kernel that runs until the host has
enqueued the whole batch (its length adapts to 3x the enqueue time of the
variant's last batch; ``gate_short`` counts batches where it did not last),
and the timing events are recorded after the gate: the GPU runs the batch
back to back. Batches keep the queue well below the driver's limit of
pending launches. Timing is ``cuEventElapsedTime`` where the driver has it;
the simulator does not, so there the host times from the start event's
completion to the end event's (``timing: "host"``).

The variants alternate, ``repeats`` times; the median of each is used.
"""

from __future__ import annotations

import select
import time

from .child import Progress
from .gpu import EV_SPIN, EV_TIMING, Gpu
from .methods import Kit
from .numbers import median

__all__ = ["run"]


def _collect(notifier, tokens: list[int], timeout: float) -> tuple[int, int]:
    """Drain until every token came back; returns (missing, faulted)."""
    left = set(tokens)
    faulted = 0
    end = time.monotonic() + timeout
    while left and time.monotonic() < end:
        notifier.poll()
        for token, exc in notifier.drain():
            if token in left:
                left.discard(token)
                faulted += exc is not None
        if left:
            select.select([notifier.fileno()], [], [], 0.0005 if notifier.needs_polling else 0.05)
    return len(left), faulted


class _Runner:
    def __init__(self, gpu: Gpu, kit: Kit, p: dict) -> None:
        self.gpu, self.kit, self.p = gpu, kit, p
        self.stream = gpu.streams(1)[0]
        self.start, self.end = gpu.event(EV_TIMING), gpu.event(EV_TIMING)
        self.point_ev = gpu.event(EV_SPIN)
        self.gate_s: dict[str, float] = {}  # per variant: their enqueue times differ a lot
        self.gate_short = 0
        self.missing = self.faulted = 0

    def _point(self, variant: str):
        drv, stream, ev = self.gpu.drv, self.stream, self.point_ev
        if variant == "none":
            return None
        if variant == "record":
            record = drv.cuEventRecord  # type: ignore[attr-defined]
            return lambda: record(ev, stream)
        return self.kit.notifier(variant[len("cudafd_") :]).watch

    def batch(self, variant: str, n: int) -> tuple[float, float]:
        """One gated batch of ``n`` kernels (+ points): (GPU seconds, host enqueue seconds)."""
        gpu, stream, kernel = self.gpu, self.stream, float(self.p["kernel_s"])
        point = self._point(variant)
        launch = gpu.launch
        tokens: list[int] = []
        gpu.launch(stream, self.gate_s.get(variant, float(self.p["gate_s"])))
        gpu.record(self.start, stream)
        t0 = time.perf_counter()
        if point is None:
            for _ in range(n):
                launch(stream, kernel)
        elif variant == "record":
            for _ in range(n):
                launch(stream, kernel)
                if rc := point():
                    raise RuntimeError(f"cuEventRecord failed: {rc}")
        else:
            for _ in range(n):
                launch(stream, kernel)
                tokens.append(point(stream))
        gpu.record(self.end, stream)
        enqueue = time.perf_counter() - t0
        if gpu.query_event(self.start):
            self.gate_short += 1
        self.gate_s[variant] = min(1.0, max(float(self.p["gate_min_s"]), 3 * enqueue * max(1, self.p["batch"] / n)))
        ms = None
        if gpu.has_gpu_timing:
            gpu.sync_event(self.end)
            ms = gpu.elapsed_ms(self.start, self.end)
        if ms is None:
            gpu.sync_event(self.start)
            h0 = time.perf_counter()
            gpu.sync_event(self.end)
            ms = (time.perf_counter() - h0) * 1e3
        if tokens:
            missing, faulted = _collect(self.kit.notifier(variant[len("cudafd_") :]), tokens, 10.0)
            self.missing += missing
            self.faulted += faulted
        return ms / 1e3, enqueue


def run(p: dict, progress: Progress) -> dict:
    gpu = Gpu()
    kit = Kit(gpu)
    variants = list(p["variants"])
    gpu_s: dict[str, list[float]] = {v: [] for v in variants}
    host_s: dict[str, list[float]] = {v: [] for v in variants}
    errors: dict[str, str] = {}
    state = {"truncated": False}
    runner = _Runner(gpu, kit, p)
    kernels, batch = int(p["kernels"]), int(p["batch"])

    def result() -> dict:
        out: dict = {
            "kernels": kernels,
            "kernel_us": float(p["kernel_s"]) * 1e6,
            "batch": batch,
            "timing": "gpu" if gpu.has_gpu_timing else "host",
            "gate_short": runner.gate_short,
            "missing_completions": runner.missing,
            "faulted_completions": runner.faulted,
            "truncated": state["truncated"],
            "errors": errors,
            "variants": {},
        }
        base = median(gpu_s["none"]) if gpu_s.get("none") else None
        base_host = median(host_s["none"]) if host_s.get("none") else None
        for v in variants:
            if not gpu_s[v]:
                continue
            t = median(gpu_s[v])
            row = {"gpu_ms": round(t * 1e3, 3), "us_per_kernel": round(t / kernels * 1e6, 3), "runs": len(gpu_s[v])}
            if base is not None and base_host is not None:
                row["us_per_point"] = round((t - base) / kernels * 1e6, 3)
                row["host_us_per_point"] = round((median(host_s[v]) - base_host) / kernels * 1e6, 3)
            out["variants"][v] = row
        return out

    progress.partial = result
    deadline = time.monotonic() + float(p["soft_s"])
    try:
        runner.batch("none", min(batch, 50))  # warm-up: kernel loaded, notifier threads started
        for v in variants:
            if v.startswith("cudafd_"):
                try:
                    runner.batch(v, min(batch, 50))
                except Exception as exc:
                    errors[v] = f"{type(exc).__name__}: {exc}"
        for rep in range(int(p["repeats"])):
            for v in variants:
                if v in errors:
                    continue
                if time.monotonic() > deadline:
                    state["truncated"] = True
                    break
                total_gpu = total_host = 0.0
                for done in range(0, kernels, batch):
                    g, h = runner.batch(v, min(batch, kernels - done))
                    total_gpu += g
                    total_host += h
                gpu_s[v].append(total_gpu)
                host_s[v].append(total_host)
            progress.tick(f"repeat {rep + 1}/{p['repeats']}")
    finally:
        kit.close()
        gpu.close()
    return result()
