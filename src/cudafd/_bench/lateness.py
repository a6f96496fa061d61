"""Lateness: how long after its kernel ended an awaiting coroutine resumed, per way of waiting.

Params (:data:`.options.FULL`): ``loop``, ``methods`` (keys of
:mod:`.waiters`), ``one_stream`` (``[name, seconds or null for random,
samples]``), ``random_s`` (the uniform range of random lengths),
``rounds`` (one-stream: the methods take turns in this many rounds, each a
block of ``samples / rounds`` awaits, in an order rotated every round),
``streams`` (the N of the N-stream workloads: N tasks each looping over
(random kernel, await) for ``window_s``, ``multi_rounds`` rounds; each
task times one wait in ``timed_every``, the others' end events untimed so
that streams sharing a hardware queue do not run in turn, :mod:`.ends`),
``history`` (``stretch_s`` of ``kernel_s`` waits, then ``samples`` waits
of ``after_s`` in ``blocks`` alternating with the spin floor and the
bound, a loop told at once, which ran no stretch: ``bound`` in the
result; for ``methods``), ``warmup``, ``soft_s``.

Workloads in the result: ``1x<name>`` (one stream), ``<N>x_random`` and
``history``. Per workload and method: the lateness summary in µs
(:func:`.numbers.summary`, over the timed waits), ``waits`` and ``waits_per_s`` (all of them),
``net`` (one stream: minus the spin floor's p50 in the same rounds), and
``cores``: process CPU seconds over wall seconds of that method's measured
stretches, and of that ``cores_loop`` (the event loop's thread) and
``cores_cudafd`` (cudafd's native threads: its poller); the rest is the
other threads' (the executor's, the polling thread, the driver's);
``poller_wakes_per_wait`` and ``poller_queries_per_wait`` (the native core's
poller over those stretches, :func:`cudafd.stats`) and ``cudafd_us_per_wake``
(cudafd's threads' CPU over its wakes). ``max_lateness_us``: the default
Notifier's max_lateness, which the targets' bounds use. Kernels
go through PyTorch when it has a CUDA device (``torch`` param true), else
the project's kernel (:mod:`.ends`).

Before the first way runs, the set-up's objects (PyTorch's among them) are
frozen out of Python's cyclic garbage collector (``gc.freeze``;
``gc_freeze`` false leaves them in). At the end they are thawed if nothing
was frozen before the run; otherwise everything stays frozen, since gc
cannot thaw part of what it froze (the H200 machine's Python starts with
375 objects frozen). On the H200 host a full collection over them stalled
the loop for 82-117 ms in every fresh process and every few seconds after,
landing on whichever way ran then, and with them frozen no wait was later
than 7 ms (docs/performance.md, "A collector stall"); the guide tells
users the same (docs/guide.md, "What it cannot bound: your loop's
thread"). Each method's ``gc_max_ms`` is the collector's longest pause
within its measured stretches (:class:`.proc.CpuMeter`), so that a stall
shows where it fell.
"""

from __future__ import annotations

import asyncio
import gc
import math
import random
import time
from typing import Any

import cudafd

from . import torchk
from .child import Progress, new_loop
from .clocks import lateness_us, net
from .ends import DriverKernels, TorchKernels
from .gpu import Gpu
from .numbers import summary
from .proc import CpuMeter
from .waiters import FLOOR, HANDOFF, LABELS, build, has_max_lateness

__all__ = ["run", "kernels_for"]

SETTLE_S = 0.002  # between two methods' stretches: let the previous one's threads go idle


def poller_counts() -> tuple[int, int]:
    """The native core's poller so far: (wakes from sleep, event queries); zeros without it."""
    s = cudafd.stats()
    return s.get("wakes", 0), s.get("queries", 0)


def _since(counts: tuple[int, int]) -> tuple[int, int]:
    now = poller_counts()
    return now[0] - counts[0], now[1] - counts[1]


def kernels_for(p: dict, notes: list[str]):
    """PyTorch's kernels when asked for and usable, else the project's (a real GPU or the simulator)."""
    gpu = Gpu()
    if gpu.simulator:
        notes.append("kernels: cudafd_spin on the simulator")
    elif p.get("torch", True):
        torch, why = torchk.available()
        if torch is not None:
            try:
                return TorchKernels(torch, gpu)
            except Exception as exc:
                notes.append(f"PyTorch launches failed, using cudafd_spin: {type(exc).__name__}: {exc}")
        else:
            notes.append(f"kernels: cudafd_spin ({why})")
    return DriverKernels(gpu)


class _Acc:
    """One method's samples (µs) and CPU over one workload."""

    def __init__(self) -> None:
        self.lat: list[float] = []
        self.waits = 0
        self.cpu = self.wall = 0.0
        self.split: dict[str, float] | None = {}  # CPU s of the loop's and cudafd's threads; None: unknown
        self.anchor_us: list[float] = []
        self.gc_max = 0.0  # the collector's longest pause in a measured stretch, s
        self.wakes = self.queries = 0  # the core's poller in the measured stretches

    def add(self, kernels, recs: list, meter: CpuMeter | None, half: float, polled: tuple[int, int] = (0, 0)) -> None:
        self.lat += [lateness_us(t, kernels.end_s(m)) for m, t in recs if m.timed]
        self.waits += len(recs)
        kernels.release([m for m, _ in recs])
        if meter is not None:
            self.cpu += meter.cpu
            self.wall += meter.wall
            self.gc_max = max(self.gc_max, meter.gc_max)
            self.wakes += polled[0]
            self.queries += polled[1]
            if self.split is not None and meter.split:
                for k, v in meter.split.items():
                    self.split[k] = self.split.get(k, 0.0) + v
            else:
                self.split = None
        self.anchor_us.append(half * 1e6)

    def result(self, key: str) -> dict:
        out: dict[str, Any] = {"label": LABELS[key], **summary(self.lat)}
        if self.wall > 0:
            out["cores"] = round(self.cpu / self.wall, 4)
            out["waits"], out["waits_per_s"] = self.waits, round(self.waits / self.wall, 1)
            out["cpu_s"], out["wall_s"] = round(self.cpu, 4), round(self.wall, 4)
            for k, v in (self.split or {}).items():
                out[f"cores_{k}"] = round(v / self.wall, 4)
            out["gc_max_ms"] = round(self.gc_max * 1e3, 2)
            if self.waits:
                out["poller_wakes_per_wait"] = round(self.wakes / self.waits, 2)
                out["poller_queries_per_wait"] = round(self.queries / self.waits, 2)
            if self.wakes and self.split and "cudafd" in self.split:
                out["cudafd_us_per_wake"] = round(self.split["cudafd"] / self.wakes * 1e6, 2)
        if self.anchor_us:
            out["anchor_err_us"] = round(max(self.anchor_us), 2)
        return out


def _lengths(spec: float | None, p: dict, rng: random.Random, n: int) -> list[float]:
    if spec is not None:
        return [float(spec)] * n
    lo, hi = p["random_s"]
    return [rng.uniform(lo, hi) for _ in range(n)]


class Run:
    def __init__(self, p: dict, kernels, ways: dict, state: dict, progress: Progress) -> None:
        self.p, self.k, self.ways, self.state, self.progress = p, kernels, ways, state, progress
        self.deadline = time.monotonic() + float(p["soft_s"])
        self.reserved = float(p["history"]["stretch_s"]) + 3 if p.get("history") else 0.0  # kept for the history

    def _late(self, reserve: bool = True) -> bool:
        if time.monotonic() > self.deadline - (self.reserved if reserve else 0.0):
            self.state["truncated"] = True
            return True
        return False

    def _keys(self, floor: bool) -> list[str]:
        return [k for k in self.ways if (floor or k != FLOOR) and k not in self.state["errors"]]

    async def _block(self, key: str, stream: Any, lengths: list[float], acc: _Acc, meter: bool = True) -> None:
        way, k = self.ways[key], self.k
        fn, blocking, perf = way.fn, way.blocking, time.perf_counter
        half = k.anchor()
        recs = []
        counts = poller_counts()
        m = CpuMeter().start() if meter else None
        try:
            for s in lengths:
                mark = k.launch(stream, s, blocking)
                await fn(stream, mark)
                recs.append((mark, perf()))
        except Exception as exc:
            self.state["errors"][key] = f"{type(exc).__name__}: {exc}"
        finally:  # (a cancellation too: the meter lets go of gc's callbacks)
            if m is not None:
                m.stop()
        acc.add(k, recs, m, half, _since(counts))
        await asyncio.sleep(SETTLE_S)

    async def warmup(self, stream: Any) -> None:
        for key in self._keys(True):
            await self._block(key, stream, [50e-6] * int(self.p["warmup"]), _Acc(), meter=False)

    async def one_stream(self, name: str, spec: float | None, samples: int, stream: Any) -> dict:
        rounds = max(1, int(self.p["rounds"]))
        block = max(1, math.ceil(samples / rounds))
        keys = self._keys(True)
        self._prefill(block + 1, keys)
        accs = {k: _Acc() for k in keys}
        for r in range(rounds):
            if self._late():
                break
            lengths = _lengths(spec, self.p, random.Random(f"{name}/{r}"), block)  # the same for every method
            for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
                if key not in self.state["errors"]:
                    await self._block(key, stream, lengths, accs[key])
            self.progress.tick(f"one stream {name}: round {r + 1}/{rounds}")
        return self._summaries(accs, {"streams": 1, "kernel": name, "kernel_s": spec, "samples_per_method": samples,
                                      "rounds": rounds, "block": block})

    def _summaries(self, accs: dict, head: dict) -> dict:
        methods = {k: a.result(k) for k, a in accs.items() if a.lat}
        floor = methods.get(FLOOR, {}).get("p50")
        for k, m in methods.items():
            if k != FLOOR and (d := net(m, floor)) is not None:
                m["net"] = d
        return {**head, "floor_p50": floor, "methods": methods}

    async def _tasks(self, key: str, streams: list, seed: str, acc: _Acc, every: int) -> None:
        way, k, p = self.ways[key], self.k, self.p
        fn, blocking, perf = way.fn, way.blocking, time.perf_counter
        lo, hi = p["random_s"]
        stop = [False]
        recs: list = []
        tail: list = []  # awaits that ended after the window: not counted

        async def worker(i: int, stream: Any) -> None:
            rng = random.Random(f"{seed}/{i}")
            j = i  # the tasks' timed waits staggered
            while not stop[0]:
                mark = k.launch(stream, rng.uniform(lo, hi), blocking, j % every == 0)
                j += 1
                await fn(stream, mark)
                (tail if stop[0] else recs).append((mark, perf()))

        half = k.anchor()
        counts = poller_counts()
        meter = CpuMeter().start()
        tasks = [asyncio.ensure_future(worker(i, s)) for i, s in enumerate(streams)]
        try:
            await asyncio.sleep(float(p["window_s"]))
        finally:
            stop[0] = True
            meter.stop()
            polled = _since(counts)
            done, pending = await asyncio.wait(tasks, timeout=10)
            for t in pending:
                t.cancel()
        failed = [t.exception() for t in done if not t.cancelled() and t.exception() is not None]
        if failed or pending:
            why = f"{type(failed[0]).__name__}: {failed[0]}" if failed else f"{len(pending)} tasks stuck"
            self.state["errors"][key] = why
        acc.add(k, recs, meter, half, polled)
        k.release([m for m, _ in tail])
        await asyncio.sleep(SETTLE_S)

    def _prefill(self, n: int, keys: list[str], untimed: int = 0) -> None:
        for blocking in sorted({self.ways[k].blocking for k in keys}):
            self.k.prefill(n, blocking)
            if untimed:
                self.k.prefill(untimed, blocking, False)

    async def many_streams(self, n: int, streams: list) -> dict:
        rounds = max(1, int(self.p["multi_rounds"]))
        keys = self._keys(False)
        lo, hi = self.p["random_s"]
        waits = int(n * float(self.p["window_s"]) / ((lo + hi) / 2) * 1.5) + 2 * n
        every = max(1, int(self.p["timed_every"]))
        self._prefill(waits // every + n, keys, 0 if every == 1 else waits)
        accs = {k: _Acc() for k in keys}
        for r in range(rounds):
            if self._late():
                break
            for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
                if key not in self.state["errors"]:
                    await self._tasks(key, streams[:n], f"{n}/{r}", accs[key], every)
            self.progress.tick(f"{n} streams: round {r + 1}/{rounds}")
        return self._summaries(accs, {"streams": n, "kernel": f"random {lo * 1e6:.0f}-{hi * 1e6:.0f} us",
                                      "window_s": self.p["window_s"], "rounds": rounds, "timed_every": every})

    async def history(self, stream: Any) -> dict:
        h = self.p["history"]
        keys = [k for k in h["methods"] if k in self.ways and k not in self.state["errors"]]
        blocks = max(1, int(h["blocks"]))
        per = max(1, math.ceil(int(h["samples"]) / blocks))
        out: dict[str, Any] = {"stretch_s": h["stretch_s"], "stretch_kernel_us": h["kernel_s"] * 1e6,
                               "after_us": h["after_s"] * 1e6, "methods": {}, "floor": {}}
        for key in keys:
            if self._late(reserve=False):
                break
            stretch = _Acc()
            end = time.monotonic() + float(h["stretch_s"])
            while time.monotonic() < end and key not in self.state["errors"]:
                await self._block(key, stream, [float(h["kernel_s"])] * 10, stretch, meter=False)
            after, floor, first, bound = _Acc(), _Acc(), _Acc(), _Acc()
            for b in range(blocks):
                await self._block(key, stream, [float(h["after_s"])] * per, first if b == 0 else after, meter=False)
                for other, acc in ((FLOOR, floor), (HANDOFF, bound)):  # the same waits, no stretch before
                    if other in self.ways and other not in self.state["errors"]:
                        await self._block(other, stream, [float(h["after_s"])] * per, acc, meter=False)
            after.lat = first.lat + after.lat
            res = after.result(key)
            floor_res = floor.result(FLOOR) if floor.lat else {"n": 0}
            if bound.lat:
                b_res = bound.result(HANDOFF)
                if (d := net(b_res, floor_res.get("p50"))) is not None:
                    b_res["net"] = d
                out["bound"] = b_res
            res["first_block"] = {q: first.result(key).get(q) for q in ("n", "p50", "p99", "max")}
            res["stretch"] = {q: stretch.result(key).get(q) for q in ("n", "p50", "p99")}
            if (d := net(res, floor_res.get("p50"))) is not None:
                res["net"] = d
                res["first_block"]["net"] = net(first.result(key), floor_res.get("p50"))
            out["methods"][key] = res
            out["floor"][key] = floor_res
            self.progress.tick(f"history {key} done", force=True)
        return out

    async def main(self, streams: list) -> None:
        wl = self.state["workloads"]
        await self.warmup(streams[0])
        for name, spec, samples in self.p["one_stream"]:
            if self._late():
                return
            wl[f"1x{name}"] = await self.one_stream(name, spec, int(samples), streams[0])
        for n in self.p["streams"]:
            if self._late():
                return
            wl[f"{n}x_random"] = await self.many_streams(int(n), streams)
        if self.p.get("history") and not self._late(reserve=False):
            wl["history"] = await self.history(streams[0])


def run(p: dict, progress: Progress) -> dict:
    state: dict = {"workloads": {}, "errors": {}, "notes": [], "truncated": False}
    freeze = bool(p.get("gc_freeze", True))
    kernels = kernels_for(p, state["notes"])
    info = {"kind": kernels.kind, "device": kernels.device, "timing": kernels.timing,
            "estimated_ends": kernels.estimated, "calibration": kernels.calibration}
    max_lateness_us = None  # (a cudafd without max_lateness: no bound that needs it)
    if has_max_lateness():
        with cudafd.Notifier() as n:
            max_lateness_us = n.max_lateness * 1e6

    def result() -> dict:
        return {"loop": p["loop"], "kernels": info, "random_us": [x * 1e6 for x in p["random_s"]],
                "labels": {k: LABELS[k] for k in p["methods"]}, "gc_frozen": freeze, "max_lateness_us": max_lateness_us, **state}

    progress.partial = result
    loop = new_loop(p["loop"])
    asyncio.set_event_loop(loop)
    close_ways = None
    thaw = False  # nothing was frozen before this run: thaw at the end
    try:
        streams = kernels.streams(max([1] + [int(n) for n in p["streams"]]))
        ways, close_ways = build(list(p["methods"]), kernels, state["errors"])
        if freeze:
            thaw = gc.get_freeze_count() == 0
            gc.collect()
            gc.freeze()
        loop.run_until_complete(Run(p, kernels, ways, state, progress).main(streams))
    finally:
        if thaw:
            gc.unfreeze()
        if close_ways is not None:
            close_ways()
        loop.run_until_complete(loop.shutdown_default_executor())
        asyncio.set_event_loop(None)
        loop.close()
        kernels.close()
    return result()
