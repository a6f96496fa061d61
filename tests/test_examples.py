"""The Python examples run to their end with every check passed: on the
simulator here, on the GPU (through PyTorch, where it is installed) with
CUDAFD_TEST_DRIVER=real. Each runs in a subprocess in well under 5 s."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from support import REAL, child_env


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


def run_example(name: str, *args: str) -> str:
    sim = () if REAL else ("--sim",)
    r = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, name), *sim, *args],
        capture_output=True, text=True, timeout=60, check=False, env=child_env(),
    )
    assert r.returncode == 0, f"{name} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.mark.skipif(importlib.util.find_spec("trio") is None, reason="needs trio")
def test_trio_example():
    out = run_example("trio_wait.py", *(() if REAL else ("--fault",)))
    assert "FAIL" not in out and "ok   nothing left pending" in out, out
    if not REAL:
        assert "CUDA_ERROR_ILLEGAL_ADDRESS" in out, out


@pytest.mark.parametrize("mechanism", ["event", "poll"])
def test_selectors_example(mechanism):
    out = run_example("selectors_wait.py", mechanism)
    assert "all checks passed" in out, out
    assert f"{mechanism} mechanism" in out, out


def run_refused(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, name), "--sim", *args],
        capture_output=True, text=True, timeout=60, check=False, env=child_env(),
    )


@pytest.mark.skipif(importlib.util.find_spec("trio") is None, reason="needs trio")
@pytest.mark.parametrize("args", [("--streams", "0"), ("--rounds", "0"), ("--streams", "-3"), ("--rounds", "-1")])
def test_trio_example_refuses_bad_counts(args):
    r = run_refused("trio_wait.py", *args)
    assert r.returncode == 2 and f"{args[0]} must be at least 1" in r.stderr, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("args", [("--streams", "0"), ("--watches", "0"), ("--streams", "-3"), ("--watches", "-1")])
def test_selectors_example_refuses_bad_counts(args):
    r = run_refused("selectors_wait.py", *args)
    assert r.returncode == 2 and f"{args[0]} must be at least 1" in r.stderr, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "checks passed" not in r.stdout, (r.stdout, r.stderr)


@pytest.mark.skipif(REAL, reason="the simulator's mechanisms")
def test_selectors_example_reports_an_unusable_mechanism():
    env = child_env(CUDAFD_MECHANISM="bogus")
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "selectors_wait.py"), "--sim"],
                       capture_output=True, text=True, timeout=60, check=False, env=env)
    assert r.returncode == 2 and "error: $CUDAFD_MECHANISM='bogus'" in r.stderr, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
