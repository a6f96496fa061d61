"""fork(): a child of a process that used cudafd gets a clear CudafdError
(CUDA cannot be used in a process forked after its parent initialised it)
on every use, exits without hanging, and leaves its parent unaffected; a
child forked before any use works. Each case runs tests/fork_scenario.py in
a fresh interpreter, under a deadline: nothing here can hang the suite."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import REAL, child_env

HERE = os.path.dirname(os.path.abspath(__file__))
CHILDREN = 5  # fork_scenario.CHILDREN (a script: importing it would set up its process)


def _scenario(mechanism: str, when: str) -> dict:
    env = child_env()
    try:
        r = subprocess.run([sys.executable, os.path.join(HERE, "fork_scenario.py"), mechanism, when],
                           capture_output=True, text=True, timeout=150, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the fork scenario itself hung: {exc}")
    assert r.returncode == 0, f"the scenario failed: {r.stderr[-3000:]}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["stderr"] = r.stderr[-3000:]  # where a stuck child was (faulthandler)
    return out


@pytest.mark.timeout(210)  # (the scenario has its own limit of 150 s)
def test_child_after_use_refuses_clearly_and_exits(mechanism):
    out = _scenario(mechanism, "after")
    assert out["children"] == ["exit 0"] * CHILDREN, out
    assert out["parent_ok"], f"the parent's waits broke after the forks: {out}"
    assert not any(out["left"].values()), f"the parent left {out['left']}"


@pytest.mark.timeout(210)
@pytest.mark.skipif(REAL, reason="on a GPU each child would create its own CUDA context: slow, and not what is tested")
def test_child_forked_before_use_works(mechanism):
    out = _scenario(mechanism, "before")
    assert out["children"] == ["exit 0"] * CHILDREN, out
    assert out["parent_ok"], out
    assert not any(out["left"].values()), f"the parent left {out['left']}"


@pytest.mark.skipif(REAL, reason="the simulator's own rule")
def test_the_simulator_refuses_in_a_forked_child():
    """Like CUDA, the simulator cannot be used in a child forked after it was
    initialised (its stream threads are the parent's): every call there fails
    with CUDA_ERROR_NOT_INITIALIZED at once, and never waits on a lock a
    parent's thread held."""
    import ctypes
    import warnings

    from cudafd._core import driver as _driver

    drv = _driver.get()
    drv.init()
    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads: what is tested
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            s = ctypes.c_void_p()
            got = [drv.cuInit(0), drv.cuStreamCreate(ctypes.byref(s), 1), drv.cuCtxSynchronize()]
            os.write(w, repr(got).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    out = os.read(r, 1000).decode()
    os.close(r)
    assert os.waitstatus_to_exitcode(status) == 0
    assert out == repr([3, 3, 3]), out
