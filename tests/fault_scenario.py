"""A device fault under many pending waiters, as functions and as a script.

On the simulator the tests call scenario() and two_devices() in-process with
fresh simulated contexts. On a real GPU a fault poisons the whole context
for the rest of the process, so the tests run them in a subprocess
(`python fault_scenario.py FLAVOR MECHANISM` for scenario()), which prints
the result as JSON.
"""
from __future__ import annotations

import json
import sys
import time

import cudafd
from cudafd._core import driver as _driver
from support import REAL, Device, run

# The bystanders' kernels. Every wait on them must end with the fault, which
# reaches the driver's queries of every stream ~0.15 s after the faulting
# launch on a GPU (docs/performance.md, "Faults"). SURFACE_BOUND_S, a test's
# bound on how long the fault takes to reach every waiter, is a sixth of their
# length: a wait that sits out its kernel fails it, CPU load does not come near
# it. The simulator drops a faulted context's queued kernels at once, so their
# length costs nothing there; on a GPU they are shorter, in case the driver
# lets them run to their end.
BYSTANDER_S = 12.0 if REAL else 30.0
SURFACE_BOUND_S = BYSTANDER_S / 6


async def guarded(api, s) -> str:
    """"ok" once the wait on ``s`` returned, or the name of the CudaError it raised."""
    try:
        await api.wait(s)
        return "ok"
    except cudafd.CudaError as e:
        assert e.code == 700, e
        return e.name


def _set_up(mechanism: str) -> None:
    """A Notifier of ``mechanism`` made and closed before any kernel: its one-time
    set-up (the syncfd mechanism's self-test) runs in a healthy context, not after
    the fault, where the blocking flavor's first fence would otherwise meet it on a
    loaded machine."""
    cudafd.Notifier(mechanism).close()


def scenario(flavor: str, mechanism: str, streams: int = 4, per_stream: int = 4) -> dict:
    """`streams` busy streams with one BYSTANDER_S kernel each and `per_stream`
    waits on it, plus one stream whose kernel faults after 10 ms. Few streams:
    a GPU maps streams onto CUDA_DEVICE_MAX_CONNECTIONS (default 8) hardware
    queues, and a faulting kernel that shares a queue with a bystander's kernel
    would only run (and fault) after it."""
    dev = Device(0)
    try:
        busy = [dev.stream() for _ in range(streams)]
        faulting = dev.stream()

        async def body(api):
            waits = []
            for s in busy:
                s.launch(BYSTANDER_S)  # only the fault can end these early
            for _ in range(per_stream):
                for s in busy:
                    waits.append(guarded(api, s))
            faulting.launch(0.01, fault=True)
            waits.append(guarded(api, faulting))
            t0 = time.monotonic()
            names = await api.gather(*waits)
            return {"names": names, "elapsed": time.monotonic() - t0}

        _set_up(mechanism)
        return run(flavor, mechanism, body)
    finally:
        if not REAL:
            dev.close()


def two_devices(flavor: str, mechanism: str, streams: int = 3, per_stream: int = 3) -> dict:
    """One Notifier over `streams` streams of each of devices 0 and 1, each
    with a BYSTANDER_S kernel and `per_stream` waits, and one more stream of device 1
    whose kernel faults after 10 ms (few streams per device, as in
    scenario()). Then device 0's streams are queried, a new kernel is
    launched there and awaited, and the faulted stream is awaited again."""
    good, bad = Device(0), Device(1)
    try:
        gs = [good.stream() for _ in range(streams)]
        bs = [bad.stream() for _ in range(streams)]
        faulting = bad.stream()

        async def body(api):
            if api.notifier is not None:
                for d in (good, bad):
                    api.notifier.prepare(d.streams[0])
            for s in gs + bs:
                s.launch(BYSTANDER_S)  # only the fault can end these early
            waits = [guarded(api, s) for _ in range(per_stream) for s in gs + bs]
            faulting.launch(0.01, fault=True)
            waits.append(guarded(api, faulting))
            t0 = time.monotonic()
            names = await api.gather(*waits)
            elapsed = time.monotonic() - t0
            drv = _driver.get()
            with drv.current(good.ctx):
                good_queries = [drv.cuStreamQuery(s.handle) for s in gs]
            try:
                with drv.current(good.ctx):
                    gs[0].launch(0.01)
                after = await guarded(api, gs[0])
            except cudafd.CudaError as e:
                after = f"launch: {e.name}"
            sticky = await guarded(api, faulting)
            n = len(gs) * per_stream
            return {"good": names[:n], "bad": names[n:] + [sticky], "elapsed": elapsed,
                    "good_queries": good_queries, "after": after}

        _set_up(mechanism)
        return run(flavor, mechanism, body, prepare=False)
    finally:
        if not REAL:
            good.close()
            bad.close()


def lone(flavor: str, mechanism: str, fault: bool, streams: int = 3) -> dict:
    """A process of its own (a GPU of its own, CUDA_VISIBLE_DEVICES): `streams`
    streams each with a kernel and a wait, and, with ``fault``, one more
    stream whose kernel faults after 10 ms. Without ``fault`` the kernels run
    2 s, long enough to outlast another process's fault, and the waits return
    after them; with it they are bystanders of BYSTANDER_S."""
    dev = Device(0)
    try:
        ss = [dev.stream() for _ in range(streams)]
        faulting = dev.stream()  # before the kernels: a stream made under load may wait for them (guide)

        async def body(api):
            for s in ss:
                s.launch(BYSTANDER_S if fault else 2.0)
            waits = [guarded(api, s) for s in ss]
            if fault:
                faulting.launch(0.01, fault=True)
                waits.append(guarded(api, faulting))
            t0 = time.monotonic()
            names = await api.gather(*waits)
            return {"names": names, "elapsed": time.monotonic() - t0, "idle": [s.idle() for s in ss]}

        _set_up(mechanism)
        return run(flavor, mechanism, body)
    finally:
        if not REAL:
            dev.close()


if __name__ == "__main__":
    print(json.dumps(scenario(sys.argv[1], sys.argv[2])))
