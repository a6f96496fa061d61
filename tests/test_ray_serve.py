"""The Ray Serve example (examples/ray_serve) on the simulator: every request
answered correctly in both modes, and cudafd's live counts back to zero in the
replica once it closes its Notifier. The same handler without Ray too."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from support import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = os.path.join(ROOT, "examples", "ray_serve", "serve_app.py")
BENCH = os.path.join(ROOT, "examples", "ray_serve", "bench.py")
LIVE = {"pending", "notifiers", "events", "eventfds", "notifications", "threads"}


def _run(*args: str, timeout: float) -> dict:
    env = child_env(CUDAFD_SIMULATOR="1")
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env)
    assert r.returncode in (0, 1), r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    res["returncode"] = r.returncode
    return res


def _check(res: dict) -> None:
    assert res["simulator"] is True and res["backend"] == "sim"
    assert set(res["modes"]) == {"cudafd", "executor"}
    for mode, r in res["modes"].items():
        assert r["answered"] > 0, (mode, r)
        assert r["answered"] == r["sent"], (mode, r)
        assert r["wrong"] == 0 and r["errors"] == 0, (mode, r)
        assert set(r["leftover"]) == LIVE and not any(r["leftover"].values()), (mode, r["leftover"])
    assert res["returncode"] == 0


def test_handler_without_ray():
    _check(_run(APP, "--no-ray", "--sim", "--json", "--seconds", "0.5", "--clients", "8", timeout=60))


def test_bench_line_without_ray():
    res = _run(BENCH, "--no-ray", "--seconds", "0.3", timeout=60)
    _check(res)
    assert "no Ray" in res["driver"]


@pytest.mark.timeout(300)
def test_ray_serve_deployment():
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not importable; pip install 'ray[serve]' (the test extra has it)")
    res = _run(APP, "--sim", "--json", "--seconds", "2", "--clients", "8", timeout=240)
    assert "Ray Serve" in res["driver"]
    _check(res)


def test_bad_arguments_are_usage_errors():
    r = subprocess.run([sys.executable, APP, "--no-ray", "--seconds", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--seconds must be positive" in r.stderr and "Traceback" not in r.stderr
