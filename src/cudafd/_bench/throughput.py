"""Throughput: ``streams`` streams, each a coroutine looping (``kernel_s`` kernel, await), per method.

Params: ``loop``, ``streams`` (64), ``kernel_s`` (100 µs), ``seconds``
(measured window per method and round), ``settle_s`` (unmeasured run-in),
``rounds`` (the methods take turns, each round in a rotated order, so a
drift of a shared machine hits them alike), ``methods``, ``soft_s``.
Figures: completed awaits per second in the window and the process's CPU
cores meanwhile (CPU seconds of every thread per wall second), the median
over the rounds; every round's figures are in ``rounds``.
Kernels go through PyTorch (``torch.cuda._sleep``, :meth:`.gpu.Gpu.use_torch`)
where torch has a CUDA device and ``torch`` is not false, else the project's
kernel; ``launch`` in the result says which.
The parent sets ``CUDA_DEVICE_MAX_CONNECTIONS`` (hardware queues; default 8)
for this child unless the caller did, so kernels of different streams are
not falsely serialised on the GPU; its value is in the result.
"""

from __future__ import annotations

import asyncio
import os

from .child import Progress, new_loop, take_turns
from .gpu import Gpu
from .methods import LABELS, Kit, close_all, make
from .numbers import median
from .proc import CpuMeter

__all__ = ["run"]


async def _one(kit: Kit, key: str, handles: list[int], p: dict) -> dict:
    fns = [make(key, kit, h) for h in handles]
    kernel = float(p["kernel_s"])
    count = [0]
    stop = [False]

    async def worker(fn) -> None:
        while not stop[0]:
            await fn(kernel)
            count[0] += 1

    tasks = [asyncio.ensure_future(worker(fn)) for fn in fns]
    try:
        await asyncio.sleep(float(p["settle_s"]))
        for t in tasks:  # a failure in the run-in: report it rather than measure
            if t.done() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
        n0 = count[0]
        with CpuMeter() as meter:
            await asyncio.sleep(float(p["seconds"]))
            n1 = count[0]
    finally:
        stop[0] = True
        done, pending = await asyncio.wait(tasks, timeout=10)
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)
    failed = [t.exception() for t in done if not t.cancelled() and t.exception() is not None]
    if failed:
        raise failed[0]  # type: ignore[misc]
    awaits = n1 - n0
    return {
        "label": LABELS[key],
        "awaits_per_s": round(awaits / meter.wall, 1),
        "cores": round(meter.cores, 3),
        "awaits": awaits,
        "wall_s": round(meter.wall, 3),
        "stuck_tasks": len(pending),
    }


def run(p: dict, progress: Progress) -> dict:
    gpu = Gpu()
    kit = Kit(gpu)
    state: dict = {"methods": {}, "errors": {}, "truncated": False}
    state.update(gpu.use_torch() if p.get("torch", True) else {"launch": "cudafd_spin", "why": "not asked for"})

    def result() -> dict:
        return {
            "loop": p["loop"],
            "streams": p["streams"],
            "kernel_us": float(p["kernel_s"]) * 1e6,
            "seconds": p["seconds"],
            "rounds": p.get("rounds", 1),
            "max_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "driver default (8)"),
            **state,
        }

    progress.partial = result
    loop = new_loop(p["loop"])
    handles: list[int] = []

    def measured(key: str, runs: list[dict]) -> None:
        for h in handles:
            gpu.sync_stream(h)
        if runs:
            state["methods"][key] = _summary(runs)

    try:
        handles += gpu.streams(int(p["streams"]))
        take_turns(
            list(p["methods"]),
            p,
            state,
            progress,
            lambda key: loop.run_until_complete(_one(kit, key, handles, p)),
            measured,
        )
    finally:
        close_all(loop, kit)
    return result()


def rounds_of(keys: list[str], p: dict, loop_name: str, progress: Progress) -> tuple[dict, dict[str, list[dict]]]:
    """For probes beside the section: the workload of ``p`` on a GPU and loop of
    their own, ``keys`` taking turns in ``p["rounds"]`` rounds; the state (the
    launch used, errors) and each key's rounds, by key."""
    gpu = Gpu()
    kit = Kit(gpu)
    state: dict = {"errors": {}, "truncated": False}
    state.update(gpu.use_torch())
    loop = new_loop(loop_name)
    runs: dict[str, list[dict]] = {}
    try:
        handles = gpu.streams(int(p["streams"]))

        def measured(key: str, samples: list[dict]) -> None:
            for h in handles:
                gpu.sync_stream(h)
            runs[key] = samples

        take_turns(keys, p, state, progress, lambda key: loop.run_until_complete(_one(kit, key, handles, p)), measured)
    finally:
        close_all(loop, kit)
    return state, runs


def _summary(rounds: list[dict]) -> dict:
    """One method's figures: medians over its rounds, and the rounds themselves."""
    return {
        "label": rounds[0]["label"],
        "awaits_per_s": round(median([x["awaits_per_s"] for x in rounds]), 1),
        "cores": round(median([x["cores"] for x in rounds]), 3),
        "awaits": sum(x["awaits"] for x in rounds),
        "stuck_tasks": sum(x["stuck_tasks"] for x in rounds),
        "rounds": [{k: x[k] for k in ("awaits_per_s", "cores", "wall_s")} for x in rounds],
    }
