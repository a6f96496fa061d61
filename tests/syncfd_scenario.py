"""The syncfd mechanism on the pollfd path alone, as a script.

``python syncfd_scenario.py FLAVOR`` runs with the driver-query backstop set
to ten minutes ($CUDAFD_SYNCFD_BACKSTOP_MS, from tests/test_syncfd.py), so
every wait that completes within the test's time was found through the
host1x pollfd of the simulator's fakes. Every simulated syncpoint starts 16
counts short of 2^32 ($CUDAFD_SIM_SYNCPOINT_START), so each stream's
thresholds wrap. Prints the result as JSON.
"""
from __future__ import annotations

import json
import sys

import cudafd
from cudafd._core import syncfd as _syncfd
from support import Device, run, wait_for_zero_counts

STREAMS = 4
PER_STREAM = 40  # past the wrap of every stream's syncpoint


def scenario(flavor: str) -> dict:
    dev = Device(0)
    try:
        streams = [dev.stream() for _ in range(STREAMS)]
        order: list[tuple[int, int]] = []

        async def one(api, i, k):
            await api.wait(streams[i])
            order.append((i, k))

        async def body(api):
            waits = []
            for k in range(PER_STREAM):
                for i, s in enumerate(streams):
                    s.launch(0.0005 * (1 + (i + k) % 3))
                    waits.append(one(api, i, k))
            await api.gather(*waits)
            with cudafd.fence(streams[0], "syncfd") as f:  # a per-point sync_file
                assert f.wait(60), "the sync_file fence never finished"
                readable = f.fileno() != f._notifier._fd
            return readable

        own_fd = run(flavor, "syncfd", body)
        per_stream = {i: [k for j, k in order if j == i] for i in range(STREAMS)}
        return {
            "completed": len(order),
            "in_order": all(ks == sorted(ks) for ks in per_stream.values()),
            "fence_fd_is_sync_file": own_fd,
            "probe": _syncfd.probe().summary,
            "left": wait_for_zero_counts(),
        }
    finally:
        dev.close()


if __name__ == "__main__":
    cudafd.use_simulator()
    print(json.dumps(scenario(sys.argv[1])))
