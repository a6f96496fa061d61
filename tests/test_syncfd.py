"""The syncfd mechanism (Jetson, experimental) against the simulator's fakes
of NvSciSync and the host1x fence device (native/sim/sim_nvsci.c), which
tests/support.py switches on for the whole suite; the shared behaviour tests
run it through the ``mechanism`` fixture. Here: the probe, step by step and
with each step failing; the pollfd path alone (the backstop out of reach),
under every loop and the blocking API, across the 32-bit wrap; the
per-point sync_file, and its timeout; faults through the backstop."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import REAL, SYNCFD, child_env, readable

import cudafd
from cudafd._core import lib as _lib, syncfd as _syncfd

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = ["library", "driver", "device", "module", "attributes", "reconcile", "syncpoint", "import",
         "signal", "extract", "fence", "pollfd", "trigger", "poll"]

pytestmark = pytest.mark.skipif(REAL, reason="runs against the simulator's NvSciSync and host1x fakes")


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    full = child_env(CUDAFD_SIMULATOR="1")
    for k, v in env.items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = v
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=full)


PROBE_AND_CREATE = """
import json, cudafd
from cudafd._core import syncfd as _syncfd
p = _syncfd.probe()
try:
    cudafd.Notifier("syncfd").close()
    err = None
except cudafd.CudafdError as e:
    err = str(e)
print(json.dumps({"available": p.available, "summary": p.summary, "steps": [list(s) for s in p.steps], "error": err}))
"""


def _probe_in_child(**env: str) -> dict:
    r = _python(PROBE_AND_CREATE, **env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_fakes_are_active_in_the_suite():
    assert SYNCFD and "syncfd" in cudafd.MECHANISMS
    p = _syncfd.probe()
    assert p.available, p.summary
    assert [s.name for s in p.steps] == STEPS
    assert all(s.ok for s in p.steps), p.steps


def test_without_the_fakes_it_is_unavailable_naming_the_library():
    """As on any machine without Tegra: no libnvscisync.so."""
    out = _probe_in_child(CUDAFD_SYNCFD_FAKE=None)
    assert not out["available"]
    assert out["summary"].startswith("unavailable: library: libnvscisync.so")
    steps = dict((name, result) for name, result, _ in out["steps"])
    assert steps["library"].startswith("libnvscisync.so: ")
    assert all(steps[s] == "not run" for s in STEPS[1:])
    assert out["error"] and "step 'library'" in out["error"] and "libnvscisync.so" in out["error"]


def test_a_library_without_nvscisync_calls_is_named():
    out = _probe_in_child(CUDAFD_SYNCFD_FAKE=os.path.join(os.path.dirname(_lib.sim_library_path()), "libcudafd.so"))
    assert not out["available"]
    assert "lacks NvSciSyncModuleOpen" in dict((n, r) for n, r, _ in out["steps"])["library"]


@pytest.mark.parametrize("step", STEPS[1:])
def test_every_probe_failure_is_reported_with_its_step(step):
    out = _probe_in_child(CUDAFD_SIM_SYNCFD_FAIL=step)
    assert not out["available"], out
    assert out["summary"].startswith(f"unavailable: {step}: ")
    results = [r for _, r, _ in out["steps"]]
    i = STEPS.index(step)
    assert results[:i] == ["ok"] * i, out["steps"]
    assert results[i] not in ("ok", "not run")
    assert all(r in ("not run", "ok") for r in results[i + 1:])  # the attribute step is checked before reconcile
    assert out["error"] and f"step '{step}'" in out["error"], out["error"]


def test_doctor_prints_each_step():
    r = subprocess.run([sys.executable, "-m", "cudafd", "doctor", "--sim"], capture_output=True, text=True,
                       timeout=120, env=child_env())
    assert r.returncode == 0, r.stderr
    assert "syncfd" in r.stdout
    for step in STEPS:
        assert f"syncfd {step}" in r.stdout, r.stdout


@pytest.mark.parametrize("flavor", ["asyncio", "uvloop", "trio", "blocking"])
def test_the_pollfd_alone_completes_waits_in_order_across_the_wrap(flavor):
    if flavor in ("uvloop", "trio"):
        pytest.importorskip(flavor)
    r = subprocess.run([sys.executable, os.path.join(HERE, "syncfd_scenario.py"), flavor], capture_output=True,
                       text=True, timeout=150,
                       env=child_env(CUDAFD_SYNCFD_BACKSTOP_MS="600000", CUDAFD_SIM_SYNCPOINT_START="0xfffffff0"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["probe"].startswith("available")
    assert out["completed"] == 160 and out["in_order"], out
    assert out["fence_fd_is_sync_file"]
    assert not any(out["left"].values()), f"the scenario left {out['left']}"



def test_fence_fileno_is_the_sync_file(dev):
    s = dev.stream()
    s.launch(0.2)
    with cudafd.fence(s, "syncfd") as f:
        fd = f.fileno()
        assert fd != f._notifier._fd  # not the Notifier's eventfd
        assert not readable(fd, 0)  # its kernel still runs
        assert readable(fd, 30)
        assert f.wait(30)
    with pytest.raises(cudafd.ClosedError):
        f.fileno()


def test_wrap_around_in_process(dev, monkeypatch):
    """A stream whose syncpoint starts 3 counts short of 2^32 (the fake reads
    the start when the stream's NvSciSync object is made, at its first watch)."""
    monkeypatch.setenv("CUDAFD_SIM_SYNCPOINT_START", str(2**32 - 3))
    s = dev.stream()
    fences = []
    for _ in range(8):
        s.launch(0.002)
        fences.append(cudafd.fence(s, "syncfd"))
    try:
        for f in fences:
            assert f.wait(30)
            assert readable(f.fileno(), 0)
    finally:
        for f in fences:
            f.close()


def test_a_fault_raises_through_the_backstop_and_the_fd_turnsreadable(dev):
    """The fake's syncpoint never passes a faulted stream's threshold (its
    signal was dropped): the backstop's driver query raises CudaError in every
    waiter of the context, and the fence's fd turns readable once the fault is known."""
    s, other = dev.stream(), dev.stream()
    other.launch(5.0)
    s.launch(0.5)  # the fault comes after the fences are made, however loaded the machine
    s.launch(0.01, fault=True)
    with cudafd.fence(s, "syncfd") as f, cudafd.fence(other, "syncfd") as g:
        assert not readable(f.fileno(), 0.05)
        for x in (f, g):
            with pytest.raises(cudafd.CudaError) as e:
                x.wait(30)
            assert e.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
            assert readable(x.fileno(), 0)
            assert not os.get_inheritable(x.fileno())  # still close-on-exec once pointed elsewhere


FENCE_TIMEOUT = """
import json, select, cudafd
from support import Device
cudafd.use_simulator()
dev = Device(0)
s = dev.stream()
s.launch(4.0)
out = {}
with cudafd.fence(s, "syncfd") as f:
    out["sync_file_woke"] = bool(select.select([f.fileno()], [], [], 15)[0])
    out["done_then"] = f.done()
    try:
        f.result()
        out["result_then"] = "no error"
    except cudafd.InvalidStateError:
        out["result_then"] = "InvalidStateError"
    out["waited"] = f.wait(60)
    out["result"] = repr(f.result())
    out["still_readable"] = bool(select.select([f.fileno()], [], [], 0)[0])
dev.close()
print(json.dumps(out))
"""


def test_a_sync_file_timed_out_leaves_the_fence_pending():
    """The kernel's sync_file turns readable at its timeout (30 s after its
    first poll) even while its work runs; the fake's is set to 0.3 s here.
    The Fence still reports not done, then the right result."""
    r = _python(FENCE_TIMEOUT, CUDAFD_SIM_FENCE_TIMEOUT_MS="300")
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.splitlines()[-1])
    assert out == {"sync_file_woke": True, "done_then": False, "result_then": "InvalidStateError",
                   "waited": True, "result": "None", "still_readable": True}, out


def test_sync_file_from_another_mechanism_is_refused(dev):
    s = dev.stream()
    lib = _lib.load()
    with cudafd.Notifier("event") as n:
        with pytest.raises(cudafd.CudafdError, match="syncfd"):
            _syncfd.native_watch_fence(lib, n._backend._ptr, n._backend._token_ref, s.handle, False, None)
