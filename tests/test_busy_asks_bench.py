"""bench/busy_asks_sim.py runs its three ways in turn and records what it says (simulator):
every way in every round, with waits counted and the loop's thread's CPU per wait; and
bench/one_ask.py gives only the Notifiers it is handed a policy that asks once. Counts and
shapes only, no timing thresholds."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

import cudafd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
import cudafd
cudafd.use_simulator()
from one_ask import one_ask
from cudafd._core.policy import BUSY_ASKS
from cudafd._loops import asyncio_loop
loop = asyncio.new_event_loop()
chosen, other = one_ask(cudafd.Notifier("event")), cudafd.Notifier("event")
print(asyncio_loop.dispatcher(loop, chosen)._policy.busy_asks,
      asyncio_loop.dispatcher(loop, other)._policy.busy_asks, BUSY_ASKS)
"""


def _env() -> dict:
    env = dict(os.environ, CUDAFD_SIMULATOR="1")
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(cudafd.__file__)))
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _run(tmp_path) -> tuple[dict, str, str]:
    out = tmp_path / "run.json"
    cmd = [sys.executable, os.path.join(ROOT, "bench", "busy_asks_sim.py"), "--streams", "8", "--rounds", "2",
           "--seconds", "0.2", "--launch-us", "5", "--out", str(out)]
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(out.read_text()), str(out), r.stdout


def test_busy_asks_sim_runs_every_way_in_every_round(tmp_path):
    doc, _, stdout = _run(tmp_path)
    assert doc["args"]["streams"] == 8
    assert set(doc["runs"]) == {"cudafd", "oneask", "sleep0"}
    for way, rounds in doc["runs"].items():
        assert len(rounds) == 2, way
        for rd in rounds:
            assert rd["waits_per_s"] > 0 and rd["loop_us_per_wait"] > 0 and rd["p99"] >= rd["p50"], (way, rd)
        assert way in stdout


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                    reason="matplotlib is not importable (pip install matplotlib)")
def test_busy_asks_sim_plots_its_runs(tmp_path):
    _, out, _ = _run(tmp_path)
    png = tmp_path / "plot.png"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "busy_asks_sim.py"), "--plot", str(png), out, out],
                       env=_env(), capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_one_ask_changes_only_the_notifiers_it_is_handed():
    r = subprocess.run([sys.executable, "-c", CHILD, os.path.join(ROOT, "bench")], env=_env(),
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    chosen, other, default = map(int, r.stdout.split())
    assert chosen == 1 and other == default > 1
