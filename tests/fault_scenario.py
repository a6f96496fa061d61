"""A device fault under many pending waiters, as a function and as a script.

On the simulator the tests call scenario() in-process with a fresh simulated
context. On a real GPU a fault poisons the whole process, so the tests run
`python fault_scenario.py FLAVOR MECHANISM`, which prints the result as JSON.
"""
from __future__ import annotations

import json
import sys
import time

import cudafd
from support import REAL, Device, run


def scenario(flavor: str, mechanism: str, streams: int = 4, per_stream: int = 4) -> dict:
    """`streams` busy streams with one 3 s kernel each and `per_stream` waits
    on it, plus one stream whose kernel faults after 10 ms. Few streams: a GPU
    maps streams onto CUDA_DEVICE_MAX_CONNECTIONS (default 8) hardware queues,
    and a faulting kernel that shares a queue with a 3 s kernel would only run
    (and fault) after it."""
    dev = Device(0)
    try:
        busy = [dev.stream() for _ in range(streams)]
        faulting = dev.stream()

        async def guarded(api, s):
            try:
                await api.wait(s)
                return "ok"
            except cudafd.CudaError as e:
                assert e.code == 700, e
                return e.name

        async def body(api):
            waits = []
            for s in busy:
                s.launch(3.0)  # only the fault can end these early
            for _ in range(per_stream):
                for s in busy:
                    waits.append(guarded(api, s))
            faulting.launch(0.01, fault=True)
            waits.append(guarded(api, faulting))
            t0 = time.monotonic()
            names = await api.gather(*waits)
            return {"names": names, "elapsed": time.monotonic() - t0}

        return run(flavor, mechanism, body)
    finally:
        if not REAL:
            dev.close()


if __name__ == "__main__":
    print(json.dumps(scenario(sys.argv[1], sys.argv[2])))
