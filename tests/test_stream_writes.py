"""The event mechanism's poller asks the driver about a stream's wait when the
word the GPU writes after the wait's record changes (native/core/words.c), not
at every step of its schedule; where the driver cannot write it, the poller
asks at its schedule, and every wait still returns only after its work.

Counts, not times: on a loaded machine a late poller asks less, never more.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import REAL, child_env

HERE = os.path.dirname(os.path.abspath(__file__))

# 8 streams, each a task looping over (a 1-4 ms kernel, await) 20 times: the
# schedule would ask each wait every ~100 us (10-40 times). Prints the
# driver queries per wait and the live counts after the Notifier is closed.
_CHILD = r"""
import asyncio, json, random, time
import cudafd
from support import Device, wait_for_zero_counts

async def main(streams):
    n = cudafd.Notifier("event")
    q0 = cudafd.stats()["queries"]

    async def worker(i, s):
        rng = random.Random(i)
        for _ in range(20):
            s.launch(rng.uniform(1e-3, 4e-3))
            await n.wait(s)
            assert s.idle(), "a wait returned before its work"

    await asyncio.gather(*(worker(i, s) for i, s in enumerate(streams)))
    q1 = cudafd.stats()["queries"]
    n.close()
    return (q1 - q0) / (20 * len(streams))

dev = Device(0)
streams = [dev.stream() for _ in range(8)]
per_wait = asyncio.run(main(streams))
dev.close()
print(json.dumps({"queries_per_wait": per_wait, "left": wait_for_zero_counts()}))
"""


def _run(**env: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120,
                         cwd=HERE, env=child_env(**env))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_poller_asks_the_driver_when_the_gpus_write_says_so():
    res = _run()
    assert not any(res["left"].values()), res["left"]
    # one query per wait when its word changes; more only at a backstop (a wait
    # older than 10 ms on a starved machine) or for a lane's next wait after a pop
    assert res["queries_per_wait"] <= 1.5, res


@pytest.mark.skipif(REAL, reason="CUDAFD_SIM_NO_STREAM_WRITES is the simulator's: a GPU's driver writes")
def test_without_stream_writes_the_poller_asks_at_its_schedule():
    res = _run(CUDAFD_SIM_NO_STREAM_WRITES="1")
    assert not any(res["left"].values()), res["left"]
    assert res["queries_per_wait"] >= 2, res  # the schedule's steps, however late the poller
