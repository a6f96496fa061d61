"""bench/loop_split.py counts what it says it counts (on the simulator unless
CUDAFD_TEST_DRIVER=real): one launch per wait for every way, the default's
one ask per wait and a watch for each wait its ask did not find over, the
bound's one watch per wait, sleep(0)'s queries, and the loop's callbacks by
kind. No timing thresholds: only counts and the table's shape."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support import REAL, child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_loop_split_counts_each_step_per_wait(tmp_path):
    env = child_env()
    if not REAL:
        env["CUDAFD_SIMULATOR"] = "1"  # (a GPU machine running the simulator suite)
    out = tmp_path / "split.json"
    cmd = [sys.executable, os.path.join(ROOT, "bench", "loop_split.py"), "--streams", "8", "--rounds", "1",
           "--window", "0.1", "--methods", "cudafd_default,sleep0,bound_handoff", "--out", str(out)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Little" in r.stdout and "8 streams" in r.stdout, r.stdout
    doc = json.loads(out.read_text())
    assert not doc["errors"], doc["errors"]
    assert doc["args"]["gc"] == "freeze"
    methods, counts = doc["workload"]["methods"], doc["counts"]
    assert set(methods) == {"cudafd_default", "sleep0", "bound_handoff"}

    def per_wait(key: str, name: str) -> float:
        return counts[key].get(name, [0, 0])[0] / methods[key]["waits"]

    def at_most(key: str, extra: int) -> float:
        """Calls per wait, at most: the waits that end after the window (one per stream at most)
        launched, asked and watched in it but are not counted, and ``extra`` calls more."""
        return 1.0 + (8 + extra) / methods[key]["waits"] + 0.02

    for key in methods:
        assert methods[key]["waits"] > 0
        assert 1.0 <= per_wait(key, "launch") <= at_most(key, 0), (key, counts[key])
        assert per_wait(key, "step") >= 0.99, (key, counts[key])  # a task step per wait at least
        # the loop thread's scheduler figures, read once per window (Linux has schedstat)
        assert counts[key]["sched run"][0] == 1 and counts[key]["sched run"][1] > 0, (key, counts[key])
        assert counts[key]["launch cpu"][0] == counts[key]["launch"][0], (key, counts[key])
    # the default: one ask per wait (a busy loop's lone waits), a watch for each not found over;
    # the window's first wait, alone in the loop, asks twice (before and after its yield)
    asks, over = per_wait("cudafd_default", "ask"), per_wait("cudafd_default", "ask over")
    assert 0.99 <= asks <= at_most("cudafd_default", 1), counts["cudafd_default"]
    assert abs(per_wait("cudafd_default", "watch") - (asks - over)) <= 0.1, counts["cudafd_default"]
    # a wait it watched ends through the fd's reader and a drain, but for the one per stream
    # still pending at the window's end (on an emulated CPU the asks may find every wait over)
    if counts["cudafd_default"].get("watch", [0, 0])[0] > 8:
        assert per_wait("cudafd_default", "drain") > 0 and per_wait("cudafd_default", "reader") > 0
    # the bound watches every wait and never asks; sleep(0) only queries its end event
    assert 0.99 <= per_wait("bound_handoff", "watch") <= at_most("bound_handoff", 0), counts["bound_handoff"]
    assert "ask" not in counts["bound_handoff"]
    assert per_wait("sleep0", "query") >= 1.0 and "watch" not in counts["sleep0"]
    # the longest single callback, launch and gap between callbacks: each within its own total
    longest = doc["longest_ns"]
    for key in methods:
        c = counts[key]
        handles = sum(c.get(k, [0, 0])[1] for k in ("step", "reader", "other"))
        assert 0 < longest[key]["callback"] <= handles, (key, longest[key])
        assert 0 < longest[key]["launch"] <= c["launch"][1], (key, longest[key])
        assert longest[key]["launch"] <= longest[key]["callback"], (key, longest[key])  # a launch runs in a step
        assert 0 < longest[key]["gap"] < doc["args"]["window"] * 1e9, (key, longest[key])
    assert "longest gap" in r.stdout
