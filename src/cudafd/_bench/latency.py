"""Await latency of a tiny kernel (0 ns cudafd_spin), every method side by side.

Params: ``loop``, ``rounds`` (samples per method), ``block`` (consecutive
rounds of one method before the next takes over: the methods rotate, so a
drift of the machine hits them alike), ``warmup`` (rounds per method first),
``methods`` (keys of :mod:`.methods`), ``soft_s`` (stop early, marked
``truncated``, once spent). One stream; samples in µs, from before the launch
to the return of the await.
"""

from __future__ import annotations

import math
import time

from .child import Progress, new_loop
from .gpu import Gpu
from .methods import LABELS, Kit, close_all, make_each
from .numbers import summary

__all__ = ["run"]


async def _measure(fns: dict, p: dict, state: dict, progress: Progress) -> None:
    samples, errors = state["samples"], state["errors"]
    deadline = time.monotonic() + float(p["soft_s"])
    for key, fn in fns.items():
        try:
            for _ in range(int(p["warmup"])):
                await fn(0.0)
        except Exception as exc:
            errors[key] = f"{type(exc).__name__}: {exc}"
    order = [k for k in fns if k not in errors]
    block = int(p["block"])
    passes = math.ceil(int(p["rounds"]) / block)
    perf = time.perf_counter_ns
    for i in range(passes):
        if time.monotonic() > deadline:
            state["truncated"] = True
            break
        shift = i % max(1, len(order))
        for key in order[shift:] + order[:shift]:
            if key in errors:
                continue
            fn, xs = fns[key], samples[key]
            try:
                for _ in range(block):
                    t0 = perf()
                    await fn(0.0)
                    xs.append((perf() - t0) / 1000.0)
            except Exception as exc:
                errors[key] = f"{type(exc).__name__}: {exc}"
        progress.tick(f"pass {i + 1}/{passes}")


def _result(p: dict, state: dict) -> dict:
    methods = {}
    for key, xs in state["samples"].items():
        if xs:
            methods[key] = {"label": LABELS[key], **summary(xs)}
    floor = methods.get("floor", {}).get("p50")
    for m in methods.values():
        m["x_floor"] = round(m["p50"] / floor, 3) if floor else None
    return {
        "loop": p["loop"],
        "rounds": p["rounds"],
        "block": p["block"],
        "unit": "us",
        "truncated": state["truncated"],
        "methods": methods,
        "errors": state["errors"],
    }


def run(p: dict, progress: Progress) -> dict:
    gpu = Gpu()
    kit = Kit(gpu)
    state: dict = {"samples": {}, "errors": {}, "truncated": False}
    progress.partial = lambda: _result(p, state)
    loop = new_loop(p["loop"])
    try:
        fns = make_each(p["methods"], kit, gpu.streams(1)[0], state["errors"])
        state["samples"].update((key, []) for key in fns)
        loop.run_until_complete(_measure(fns, p, state, progress))
    finally:
        close_all(loop, kit)
    return _result(p, state)
