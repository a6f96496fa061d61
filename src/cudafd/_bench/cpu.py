"""CPU while awaiting: process CPU seconds (every thread) per wall second, kernels back to back.

Params: ``loop``, ``kernel_s`` (2 ms), ``seconds`` (measured window per
method and round), ``settle_s`` (the method runs unmeasured first, so threads
another method left spinning have gone quiet and adaptive spin windows have
settled), ``rounds`` (the methods take turns, one window each per round, in
an order rotated by one each round, so a slow spell of the machine falls on
all of them: child.take_turns), ``methods``, ``soft_s``.
One stream. ``cores`` is the figure, the median over the rounds (each
round's in ``rounds_cores``): 1.0 is a whole core busy while the program
only waits.
"""

from __future__ import annotations

import statistics
import time

from .child import Progress, new_loop, take_turns
from .gpu import Gpu
from .methods import LABELS, Kit, close_all, make_each
from .proc import CpuMeter

__all__ = ["run"]


async def _one(fn, p: dict) -> dict:
    kernel = float(p["kernel_s"])
    end = time.perf_counter() + float(p["settle_s"])
    while time.perf_counter() < end:
        await fn(kernel)
    n = 0
    with CpuMeter() as meter:
        end = time.perf_counter() + float(p["seconds"])
        while time.perf_counter() < end:
            await fn(kernel)
            n += 1
    return {
        "cores": round(meter.cores, 4),
        "awaits": n,
        "wall_s": round(meter.wall, 3),
        "cpu_s": round(meter.cpu, 4),
        "per_await_us": round(meter.wall / max(1, n) * 1e6, 1),
        "overhead_us": round((meter.wall / max(1, n) - kernel) * 1e6, 1),
    }


def _median(runs: list[dict]) -> dict:
    """The rounds of one method: the median of each figure, the awaits summed, every round's cores."""
    out = {k: round(statistics.median(r[k] for r in runs), 4) for k in ("cores", "per_await_us", "overhead_us")}
    out["awaits"] = sum(r["awaits"] for r in runs)
    out["wall_s"] = round(sum(r["wall_s"] for r in runs), 3)
    out["cpu_s"] = round(sum(r["cpu_s"] for r in runs), 4)
    out["rounds_cores"] = [r["cores"] for r in runs]
    return out


def run(p: dict, progress: Progress) -> dict:
    gpu = Gpu()
    kit = Kit(gpu)
    state: dict = {"methods": {}, "errors": {}, "truncated": False}

    def result() -> dict:
        return {
            "loop": p["loop"], "kernel_s": p["kernel_s"], "seconds": p["seconds"], "rounds": p.get("rounds", 1), **state
        }

    progress.partial = result
    loop = new_loop(p["loop"])
    def measured(key: str, runs: list[dict]) -> None:
        if runs:
            state["methods"][key] = {"label": LABELS[key], **_median(runs)}

    try:
        fns = make_each(p["methods"], kit, gpu.streams(1)[0], state["errors"])
        take_turns(list(fns), p, state, progress, lambda key: loop.run_until_complete(_one(fns[key], p)), measured)
    finally:
        close_all(loop, kit)
    return result()
