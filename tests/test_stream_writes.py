"""The event mechanism's poller asks the driver about a stream's wait once the
word the GPU writes just before the wait's record holds the wait's value
(native/core/words.c), not at every step of its schedule; where the driver
cannot write it, or the record still reads not done when the word has
landed, the poller asks at its schedule. Either way every wait returns only
after its work, and its stream is idle then (the record is the last work of
ours on it).

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
# driver queries, what the words allow (per wait: one once its word changed,
# one more for a record a moment behind its word, and one per 10 ms backstop
# of its length as measured, which a GPU shared with other processes or a
# loaded machine may stretch), the number of waits, and the
# live counts after the Notifier is closed.
_CHILD = r"""
import asyncio, json, random, sys, time
import cudafd
from support import Device, wait_for_zero_counts

async def main(streams, budget):
    n = cudafd.Notifier("event", max_lateness=budget)
    q0 = cudafd.stats()["queries"]
    allowed = 0.0

    async def worker(i, s):
        nonlocal allowed
        rng = random.Random(i)
        for _ in range(20):
            t0 = time.monotonic()
            s.launch(rng.uniform(1e-3, 4e-3))
            await n.wait(s)
            allowed += 2 + (time.monotonic() - t0) / max(budget, 0.01)
            assert s.idle(), "a wait returned before its work"

    await asyncio.gather(*(worker(i, s) for i, s in enumerate(streams)))
    q1 = cudafd.stats()["queries"]
    n.close()
    return q1 - q0, allowed, 20 * len(streams)

dev = Device(0)
streams = [dev.stream() for _ in range(8)]
queries, allowed, waits = asyncio.run(main(streams, float(sys.argv[1])))
dev.close()
print(json.dumps({"queries": queries, "allowed": allowed, "waits": waits, "left": wait_for_zero_counts()}))
"""


def _run(budget: float, **env: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(budget)], capture_output=True, text=True, timeout=120,
                         cwd=HERE, env=child_env(**env))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_poller_asks_the_driver_when_the_gpus_write_says_so():
    res = _run(400e-6)
    assert not any(res["left"].values()), res["left"]
    assert res["queries"] <= res["allowed"], res


@pytest.mark.skipif(REAL, reason="CUDAFD_SIM_NO_STREAM_WRITES is the simulator's: a GPU's driver writes")
def test_without_stream_writes_the_poller_asks_at_its_schedule():
    res = _run(400e-6, CUDAFD_SIM_NO_STREAM_WRITES="1")
    assert not any(res["left"].values()), res["left"]
    assert res["queries"] >= 2 * res["waits"], res  # the schedule's steps, however late the poller


@pytest.mark.skipif(REAL, reason="CUDAFD_SIM_WRITE_LEAD_US is the simulator's")
def test_a_record_behind_its_landed_word_is_asked_at_the_schedule():
    # each stream goes on to the record 20 ms after its word landed: the query
    # the word prompts finds the record not done, and the schedule's later
    # queries end the wait, its stream idle
    res = _run(400e-6, CUDAFD_SIM_WRITE_LEAD_US="20000")
    assert not any(res["left"].values()), res["left"]
    assert res["queries"] >= 2 * res["waits"], res


# A wait dropped unfinished (its notifier closed, the last one) leaves its
# write queued; the next wait to take its word sees the word change when that
# write lands, long before its own work is over. The query then finds it not
# done and the schedule takes over: it ends after its work, not before, and
# its budget of 0.2 s (backstop 0.2 s) shows the extra queries.
_LATE_WRITE = r"""
import asyncio, json, time
import cudafd
from support import Device, live_counts, wait_for_zero_counts

dev = Device(0)
a, b = dev.stream(), dev.stream()
n = cudafd.Notifier("event")
a.launch(0.05)
token = n.watch(a)
n.close()
assert [t for t, _ in n.drain()] == [token]  # reported closed: the native notifier goes
deadline = time.monotonic() + 10
while any(live_counts()[k] for k in ("pending", "threads")) and time.monotonic() < deadline:
    time.sleep(0.001)
assert not a.idle(), "the dropped wait's work ended before the next wait was made"

async def main():
    n2 = cudafd.Notifier("event", max_lateness=0.2)
    b.launch(0.1)
    q0, t0 = cudafd.stats()["queries"], time.monotonic()
    await n2.wait(b)
    took, queries = time.monotonic() - t0, cudafd.stats()["queries"] - q0
    assert b.idle(), "a wait returned before its work"
    n2.close()
    return took, queries

took, queries = asyncio.run(main())
dev.close()
print(json.dumps({"took": took, "queries": queries, "left": wait_for_zero_counts()}))
"""


def test_a_late_write_into_a_taken_word_ends_no_wait_early():
    out = subprocess.run([sys.executable, "-c", _LATE_WRITE], capture_output=True, text=True, timeout=120,
                         cwd=HERE, env=child_env())
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert not any(res["left"].values()), res["left"]
    assert res["took"] >= 0.09, res
    assert res["queries"] >= 2, res  # the late write's query, then the schedule's
