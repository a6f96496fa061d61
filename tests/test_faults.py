"""A device fault reaches every waiter on the faulted context as CudaError,
promptly, under every loop flavor and mechanism; never a hang."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fault_scenario import BYSTANDER_S, SURFACE_BOUND_S, scenario
from support import REAL, child_env

HERE = os.path.dirname(os.path.abspath(__file__))


def faulted(flavor, mechanism):
    if not REAL:
        return scenario(flavor, mechanism)
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "fault_scenario.py"), flavor, mechanism],
        capture_output=True, text=True, timeout=60, cwd=HERE, env=child_env(),
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fault_reaches_every_waiter(flavor, mechanism):
    result = faulted(flavor, mechanism)
    assert set(result["names"]) == {"CUDA_ERROR_ILLEGAL_ADDRESS"}, result["names"]
    assert result["elapsed"] < SURFACE_BOUND_S, f"faults took {result['elapsed']:.2f} s to surface"


@pytest.mark.skipif(REAL, reason="a simulator setting")
@pytest.mark.parametrize("flavor", ["blocking", "asyncio"])
@pytest.mark.parametrize("mechanism", ["event", "hostfunc"])
def test_fault_reaches_blocked_waiters_promptly(flavor, mechanism):
    """As on an H200, a cuEventSynchronize blocked when the context faults
    returns only once its stream would have drained: here when the bystanders'
    kernels would have ended (CUDAFD_SIM_LATE_FAULT_MS). The fault must still
    reach every wait at once (the poller and the watchdog only query)."""
    env = child_env(CUDAFD_SIM_LATE_FAULT_MS=str(int(BYSTANDER_S * 1000)), CUDAFD_SIMULATOR="1")
    code = (
        "import json, cudafd; cudafd.use_simulator()\n"
        "from fault_scenario import scenario\n"
        "from support import wait_for_zero_counts\n"
        f"out = scenario({flavor!r}, {mechanism!r})\n"
        "print(json.dumps({**out, 'left': wait_for_zero_counts()}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=HERE, env=env)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(result["names"]) == {"CUDA_ERROR_ILLEGAL_ADDRESS"}, result["names"]
    assert result["elapsed"] < SURFACE_BOUND_S, f"faults took {result['elapsed']:.2f} s to surface"
    assert not any(result["left"].values()), f"the child left {result['left']}"
