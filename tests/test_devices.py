"""Streams of two devices in one process: the simulator's two devices, and two
GPUs where the machine has them (CUDAFD_TEST_DRIVER=real; skipped with fewer).

One Notifier serves streams of both devices, each wait making its stream's
context current itself whatever context the caller has current (and leaving
the caller's as it was); a framework's default stream or event of device 1
is device 1's, not the current context's, and one of device 0 is device 0's
primary context's while another context of device 0 is current; a fault on
one device ends every
wait of the process, as the driver of two H200s reports it on both, while a
process per GPU keeps it to its own."""
from __future__ import annotations

import asyncio
import ctypes
import json
import os
import random
import subprocess
import sys
import time
import types

import pytest
from fault_scenario import SURFACE_BOUND_S, two_devices
from support import MECHANISMS, REAL, Device, child_env, readable, release_idle, run
from test_own_context import _OwnContext

import cudafd
from cudafd._core import driver as _driver
from cudafd._core import kernels as _kernels

HERE = os.path.dirname(os.path.abspath(__file__))


def _devices() -> int:
    return _driver.get().device_count()


two = pytest.mark.skipif(REAL and _devices() < 2, reason="needs two CUDA devices (this machine has fewer)")


def _retain_primaries(drv) -> list[int]:
    """Devices 0 and 1's primary contexts, held as a framework holds them."""
    ctxs = []
    for ordinal in (0, 1):
        c = ctypes.c_void_p()
        _driver.check(drv.cuDevicePrimaryCtxRetain(ctypes.byref(c), ordinal))
        ctxs.append(c.value)
    return ctxs


def _release_primaries(drv, ctxs: list[int], events=()) -> None:
    """After a test: its work waited for, ``events`` destroyed, the contexts released."""
    for c in ctxs:
        with drv.pushed(c):
            drv.cuCtxSynchronize()
    for ev in events:
        drv.cuEventDestroy(ev)
    release_idle()
    for ordinal, c in enumerate(ctxs):
        _kernels.forget(c)
        drv.cuDevicePrimaryCtxRelease(ordinal)


def _current() -> int:
    return _driver.get().current_ctx()


def _mark(s) -> int:
    """An event recorded on test stream ``s`` now: done once the work enqueued so far is."""
    drv = _driver.get()
    ev = ctypes.c_void_p()
    with drv.current(s.device.ctx):
        _driver.check(drv.cuEventCreate(ctypes.byref(ev), _driver.CU_EVENT_DISABLE_TIMING))
        _driver.check(drv.cuEventRecord(ev.value, s.handle))
    return ev.value


@two
def test_one_notifier_over_two_devices(flavor, mechanism):
    """Four streams on each device, waited on in rounds through one Notifier with device
    1's context current: every wait returns after its work, in order per stream, and the
    caller's context is still current after each."""
    devices = [Device(0), Device(1)]
    drv = _driver.get()
    marks: list[int] = []
    try:
        streams = [d.stream() for d in devices for _ in range(4)]
        prep = cudafd.Notifier(mechanism)
        for d in devices:  # side streams before the kernels (support.run does it for one device)
            prep.prepare(d.streams[0])
        prep.close()
        rng = random.Random(5)
        rounds = 6 if flavor != "blocking" else 2
        mine = devices[1].ctx

        async def body(api):
            order: dict[int, list[int]] = {i: [] for i in range(len(streams))}

            async def one(i: int, k: int) -> None:
                await api.wait(streams[i])
                # (not the stream's idleness: the later waits' watches record on it)
                assert drv.cuEventQuery(marks[i]) == 0, f"stream {i} (device {i // 4}): a wait returned before its work"
                assert _current() == mine, "a wait left another context current"
                order[i].append(k)

            waits = []
            for k in range(rounds):
                for i, s in enumerate(streams):
                    s.launch(rng.choice((0.0, 0.0002, 0.001, 0.004)))
                    waits.append(one(i, k))
            marks.extend(_mark(s) for s in streams)  # after each stream's last kernel: every wait covers it
            await api.gather(*waits)
            return order

        with drv.current(mine):
            order = run(flavor, mechanism, body, prepare=False)
        for i, seen in order.items():
            assert seen == list(range(rounds)), f"stream {i}: completions out of order: {seen}"
    finally:
        for ev in marks:
            drv.cuEventDestroy(ev)
        for d in devices:
            d.close()


# What a torch.cuda.Stream, a CuPy stream and a torch.cuda.Event of device 1 show
# cudafd (the class name and module are what it recognises them by).
_DEVICE_0 = types.SimpleNamespace(type="cuda", index=0)
_DEVICE_1 = types.SimpleNamespace(type="cuda", index=1)
_TorchStream0 = type("Stream", (), {"__module__": "torch.cuda.streams", "cuda_stream": 0, "device": _DEVICE_0})
_TorchStream = type("Stream", (), {"__module__": "torch.cuda.streams", "cuda_stream": 0, "device": _DEVICE_1})
_CupyStream = type("Stream", (), {"__module__": "cupy.cuda.stream", "ptr": 0, "device_id": 1})
_TorchEvent = type("Event", (), {"__module__": "torch.cuda.streams", "cuda_event": 0, "device": _DEVICE_1})


@two
@pytest.mark.parametrize("framework", ["torch", "cupy", "torch-event"])
def test_device_1s_default_stream_and_events(loop_flavor, framework):
    """A framework's default stream (handle 0) of device 1, or its event recorded there,
    awaited with device 0's context current, is device 1's: the wait returns only once
    device 1's default stream is idle, and device 0's context is current again after it."""
    drv = _driver.get()
    drv.init()
    events: list[int] = []
    ctxs = _retain_primaries(drv)  # as a framework does: it holds each device's primary context

    def target():
        if framework == "torch":
            return _TorchStream()
        if framework == "cupy":
            return _CupyStream()
        ev, e = ctypes.c_void_p(), _TorchEvent()
        with drv.pushed(ctxs[1]):
            _driver.check(drv.cuEventCreate(ctypes.byref(ev), _driver.CU_EVENT_DISABLE_TIMING))
            _driver.check(drv.cuEventRecord(ev.value, 0))
        events.append(ev.value)
        e.cuda_event = ev.value
        return e

    def idle(ctx: int) -> bool:
        with drv.pushed(ctx):
            return drv.cuStreamQuery(0) == 0

    try:
        async def body(api):
            for _ in range(3):
                with drv.pushed(ctxs[1]):
                    _kernels.launch_spin(0, 0.05)
                await api.wait(target())
                assert idle(ctxs[1]), "the wait returned before device 1's default stream was idle"
                assert _current() == ctxs[0], "the wait left another context current"

        with drv.current(ctxs[0]):
            assert drv.current_device() == 0
            run(loop_flavor, "event", body, prepare=False)
    finally:
        _release_primaries(drv, ctxs, events)


@two
@pytest.mark.parametrize("mech", MECHANISMS)
def test_default_streams_of_two_devices_keep_their_own_order(loop_flavor, mech):
    """Waits on the default streams (handle 0) of two devices, device 0's context current,
    keep separate orders: the wait on device 1's short kernel returns while device 0's
    long one, awaited first, still runs."""
    drv = _driver.get()
    drv.init()
    ctxs = _retain_primaries(drv)

    def busy(ctx: int) -> bool:
        with drv.pushed(ctx):
            return drv.cuStreamQuery(0) != 0

    try:
        async def body(api):
            seen: list[bool] = []

            async def device_1() -> None:
                for _ in range(3):  # device 0's wait starts first
                    await api.sleep(0)
                with drv.pushed(ctxs[1]):
                    _kernels.launch_spin(0, 0.01)
                await api.wait(_TorchStream())
                seen.append(busy(ctxs[0]))

            with drv.pushed(ctxs[0]):
                _kernels.launch_spin(0, 1.0)
            first = api.cancelled_when(lambda: bool(seen), api.wait(0))
            cancelled, _ = await api.gather(first, device_1())
            return cancelled, seen

        with drv.current(ctxs[0]):
            cancelled, seen = run(loop_flavor, mech, body, prepare=False)
        assert seen == [True], "device 1's wait returned only after device 0's kernel had ended"
        assert cancelled, "device 0's wait returned before its kernel had ended"
    finally:
        _release_primaries(drv, ctxs)


def _child(code: str, *args: str, **env: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         timeout=60, cwd=HERE, env=child_env(**env))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@two
def test_a_fault_on_one_device_ends_every_wait_of_the_process(flavor, mechanism):
    """Device 1 faults under waits of both devices on one Notifier. On an H200 pair the
    driver then reports the fault on device 0's context too (its stream queries and a
    new launch there fail with it), and the simulator does the same: every waiter of
    both devices raises CudaError, promptly, none hangs, and none is told its work is
    done."""
    if REAL:
        r = _child("import json, sys; from fault_scenario import two_devices; "
                   "print(json.dumps(two_devices(sys.argv[1], sys.argv[2])))", flavor, mechanism)
    else:
        r = two_devices(flavor, mechanism)
    assert set(r["bad"]) == {"CUDA_ERROR_ILLEGAL_ADDRESS"}, r
    assert set(r["good"]) == {"CUDA_ERROR_ILLEGAL_ADDRESS"}, r
    assert r["good_queries"] == [700] * len(r["good_queries"]), f"the driver did not report it on device 0: {r}"
    assert r["after"] == "launch: CUDA_ERROR_ILLEGAL_ADDRESS", r
    assert r["elapsed"] < SURFACE_BOUND_S, f"the fault took {r['elapsed']:.2f} s to reach every waiter"


@two
@pytest.mark.parametrize("flavor", ["asyncio", "blocking"])
def test_a_process_per_gpu_keeps_a_fault_to_itself(flavor, mechanism):
    """Two processes, one per GPU (CUDA_VISIBLE_DEVICES), awaiting at once: the one
    whose kernel faults raises CudaError in every waiter; the other's waits all
    return after their work."""
    code = ("import json, sys; from fault_scenario import lone; from support import wait_for_zero_counts; "
            "out = lone(sys.argv[1], sys.argv[2], sys.argv[3] == 'fault'); "
            "print(json.dumps({**out, 'left': wait_for_zero_counts()}))")
    children = []
    for gpu, what in (("0", "clean"), ("1", "fault")):
        e = child_env(**({"CUDA_VISIBLE_DEVICES": gpu} if REAL else {"CUDAFD_SIMULATOR": "1"}))
        children.append(subprocess.Popen([sys.executable, "-c", code, flavor, mechanism, what], cwd=HERE, env=e,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for p in children:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    clean, faulted = results
    assert clean["names"] == ["ok"] * 3 and all(clean["idle"]), clean
    assert set(faulted["names"]) == {"CUDA_ERROR_ILLEGAL_ADDRESS"}, faulted
    assert faulted["elapsed"] < SURFACE_BOUND_S, f"the fault took {faulted['elapsed']:.2f} s to reach every waiter"
    assert not any(clean["left"].values()), f"the clean child left {clean['left']}"
    if not REAL:  # (what a faulted context of a real GPU lets go of is not measured: the simulator checks it)
        assert not any(faulted["left"].values()), f"the faulted child left {faulted['left']}"


@pytest.mark.gpu
@two
def test_torch_streams_events_and_tensors_of_device_1():
    """torch.cuda.Stream(device=1), an event recorded there, a tensor of device 1 and
    device 1's default stream, awaited while device 0 is torch's current device."""
    torch = pytest.importorskip("torch")
    torch.cuda.set_device(0)
    s = torch.cuda.Stream(device=1)
    a = torch.randn(2048, 2048, device="cuda:1")
    cycles = 50_000_000  # ~25 ms at H200 clocks: the work is still running when each wait starts

    async def main():
        with torch.cuda.stream(s):
            torch.cuda._sleep(cycles)
            b = a @ a
            ev = torch.cuda.Event()
            ev.record(s)
            torch.cuda._sleep(cycles)
        assert torch.cuda.current_device() == 0
        await cudafd.wait(ev)
        assert ev.query(), "the event's wait returned before the event"
        await cudafd.wait(s)
        assert s.query(), "the stream's wait returned before its work"
        with torch.cuda.device(1):
            torch.cuda._sleep(cycles)  # device 1's default stream
        c = b @ a  # there too: b is on device 1
        await cudafd.wait(c)
        assert torch.cuda.current_stream(1).query(), "the tensor's wait returned before device 1's stream"
        with torch.cuda.device(1):
            torch.cuda._sleep(cycles)
        await cudafd.wait(torch.cuda.default_stream(1))
        assert torch.cuda.default_stream(1).query(), "device 1's default stream was not waited for"
        assert torch.cuda.current_device() == 0
        return c

    c = asyncio.run(main())
    assert torch.isfinite(c).all()


@pytest.mark.gpu
@two
def test_cupy_streams_events_and_arrays_of_device_1():
    """A CuPy stream of device 1, an event recorded there, and an array of device 1 (its
    current stream: the null stream), awaited while device 0 is CuPy's current device."""
    cp = pytest.importorskip("cupy")
    cp.cuda.Device(0).use()
    with cp.cuda.Device(1):
        s = cp.cuda.Stream(non_blocking=True)
        a = cp.random.rand(4096, 4096, dtype=cp.float32) / 4096

    def work(x):  # a few milliseconds of device 1's time
        for _ in range(20):
            x = x @ a
        return x

    async def main():
        with cp.cuda.Device(1):
            with s:
                b = work(a)
                ev = s.record()
                work(b)
            d = work(a)  # on device 1's null stream
        assert cp.cuda.Device().id == 0
        await cudafd.wait(ev)
        assert ev.done, "the event's wait returned before the event"
        await cudafd.wait(s)
        assert s.done, "the stream's wait returned before its work"
        await cudafd.wait(d)
        with cp.cuda.Device(1):
            assert cp.cuda.Stream.null.done, "the array's wait returned before device 1's null stream"
        return d

    d = asyncio.run(main())
    assert bool(cp.isfinite(d).all())


@two
@pytest.mark.parametrize("mech", MECHANISMS)
def test_a_fence_of_device_1s_default_stream_waits_for_device_1(mech):
    """A Fence of device 1's default stream (handle 0, named by a framework's stream
    object) made with device 0's context current: neither its fd nor done() says
    done while device 1's kernel runs, whatever the mechanism (syncfd's sync_file
    included); it is done once the kernel has ended."""
    drv = _driver.get()
    drv.init()
    ctxs = _retain_primaries(drv)

    def running() -> bool:
        with drv.pushed(ctxs[1]):
            return drv.cuStreamQuery(0) != 0

    try:
        with drv.current(ctxs[0]):
            with drv.pushed(ctxs[1]):
                _kernels.launch_spin(0, 1.0)
            with cudafd.fence(_TorchStream(), mech) as f:
                _pending_until_it_ends(f, running, "device 1's kernel")
    finally:
        _release_primaries(drv, ctxs)


@pytest.mark.parametrize("mech", MECHANISMS)
def test_a_framework_default_stream_with_an_own_context_of_its_device_current(mech):
    """A Fence of device 0's default stream (handle 0, named by a framework's stream
    object) made while a context of the caller's own on device 0 is current (as a
    PyCUDA context would be) is the framework's, in device 0's primary context: it
    is not done while the kernel there runs, though the own context's default stream
    is idle, and it is done once the kernel has ended; the own context is current
    again after each call."""
    drv = _driver.get()
    drv.init()
    primary = ctypes.c_void_p()
    _driver.check(drv.cuDevicePrimaryCtxRetain(ctypes.byref(primary), 0))  # as a framework holds it
    mine = _OwnContext()

    def running() -> bool:
        with drv.pushed(primary.value):
            return drv.cuStreamQuery(0) != 0

    try:
        with drv.pushed(mine.ctx):
            with drv.pushed(primary.value):
                _kernels.launch_spin(0, 1.0)
            with cudafd.fence(_TorchStream0(), mech) as f:

                def looked() -> None:
                    assert _current() == mine.ctx, "the fence left another context current"

                _pending_until_it_ends(f, running, "the primary context's kernel", looked)
    finally:
        with drv.pushed(primary.value):
            drv.cuCtxSynchronize()
        release_idle()
        mine.destroy()
        _kernels.forget(primary.value)
        drv.cuDevicePrimaryCtxRelease(0)


def _pending_until_it_ends(f, running, what: str, looked=lambda: None) -> None:
    """Look at the fence (readable, done) until ``running()`` says the 1 s kernel
    ``what`` ended, each look before the query, calling ``looked()`` after each:
    the fence must say pending at every look while the kernel ran, and be looked
    at at least once so; then it completes."""
    looks, deadline = 0, time.monotonic() + 30
    while True:
        said = (readable(f, 0.01), f.done())
        looked()
        if not running():
            break
        assert said == (False, False), f"(readable, done) {said} while {what} ran"
        looks += 1
        assert time.monotonic() < deadline, f"{what} (1 s) still runs after 30 s"
    assert looks, f"{what} ended before the fence was looked at"
    assert f.wait(timeout=30)
