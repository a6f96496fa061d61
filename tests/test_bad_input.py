"""Bad input gets a clear exception, never a crash or a hang."""
from __future__ import annotations

import threading
import time

import pytest

import cudafd
from support import REAL, RUNNING_S, run



@pytest.mark.parametrize("target", [None, "stream", 1.5, object(), [1, 2], True])
def test_not_a_stream_or_event(target, loop_flavor):
    async def body(api):
        with pytest.raises(TypeError):
            await api.wait(target)

    run(loop_flavor, "event", body)
    with pytest.raises(TypeError):
        cudafd.fence(target)


@pytest.mark.parametrize("handle", [1.5, 3.0, "5", b"7", 2j])
def test_a_cuda_stream_protocol_handle_that_is_not_an_integer(handle):
    """int() would read 1.5 as the legacy default stream and "5" as stream 5: refused."""
    class Stream:
        def __cuda_stream__(self):
            return (0, handle)

    with pytest.raises(TypeError, match="integer handle"):
        cudafd.fence(Stream())


def test_negative_handle():
    with pytest.raises(ValueError):
        cudafd.fence(-5)


def test_unknown_mechanism():
    with pytest.raises(ValueError, match="event"):
        cudafd.Notifier("telepathy")


@pytest.mark.skipif(REAL, reason="a made-up or destroyed handle is undefined behaviour in the real driver")
def test_made_up_and_destroyed_streams(dev, mechanism):
    with pytest.raises(cudafd.CudaError) as info:
        cudafd.fence(0xBAD0, mechanism=mechanism)
    assert info.value.name == "CUDA_ERROR_INVALID_HANDLE"
    s = dev.stream()
    handle = s.handle
    dev.drv.cuStreamDestroy(handle)
    dev.streams.remove(s)
    with pytest.raises(cudafd.CudaError):
        cudafd.fence(handle, mechanism=mechanism)


def test_use_after_close(dev, mechanism):
    n = cudafd.Notifier(mechanism)
    n.close()
    s = dev.stream()
    with pytest.raises(cudafd.ClosedError):
        n.watch(s)
    assert n.drain() == []
    n.close()


def test_stream_of_a_closed_simulated_device():
    if REAL:
        pytest.skip("simulator only")
    d = cudafd.sim.Device(1)
    s = d.stream()
    handle = s.handle
    d.close()
    with pytest.raises(cudafd.CudafdError, match="closed"):
        cudafd.fence(s)
    with pytest.raises(cudafd.CudaError):  # the raw handle of a destroyed context's stream
        cudafd.fence(handle)


def test_wait_outside_any_loop(dev):

    s = dev.stream()
    coro = cudafd.wait(s)
    with pytest.raises(cudafd.CudafdError, match="inside a running event loop"):
        coro.send(None)
    coro.close()


@pytest.mark.parametrize("kernel_s", [RUNNING_S, 0.0], ids=["busy", "already-over"])
@pytest.mark.parametrize("own_notifier", [False, True], ids=["default", "own"])
def test_proactor_like_loop_is_refused(dev, kernel_s, own_notifier):
    """Refused on the first wait whether or not that wait needs the fd:
    support must not depend on how fast the GPU was."""
    import asyncio

    class NoReaderLoop(asyncio.SelectorEventLoop):
        def add_reader(self, *args, **kwargs):
            raise NotImplementedError

    s = dev.stream()
    loop = NoReaderLoop()
    n = cudafd.Notifier() if own_notifier else None
    try:
        if kernel_s:
            s.launch(kernel_s)
        with pytest.raises(cudafd.CudafdError, match="uvloop|selector"):
            loop.run_until_complete(cudafd.wait(s, notifier=n))
        assert s.idle() is not bool(kernel_s), "the wait did not see the work it is named for"
    finally:
        loop.close()
        if n is not None:
            n.close()


def test_handle_out_of_range_and_bad_token(mechanism):
    with pytest.raises(ValueError, match="64-bit"):
        cudafd.fence(1 << 64, mechanism=mechanism)
    with cudafd.Notifier(mechanism) as n:
        with pytest.raises(TypeError):
            n.cancel("a token")
        assert n.cancel(12345) is False


@pytest.mark.parametrize("busy", [False, True], ids=["already-over", "busy"])
def test_a_notifier_serves_one_loop_at_a_time(dev, busy):
    """A second loop's wait on a Notifier that another loop is waiting on is
    refused, even when it would not need the fd; once the first loop's wait
    is over (cancelled here), the second loop may use it."""
    import asyncio

    first, other, last = dev.stream(), dev.stream(), dev.stream()
    n = cudafd.Notifier()
    parked = threading.Event()
    first_wait = []  # the first loop and its task
    outcome = []

    async def first_loop():
        first.launch(RUNNING_S)  # the first wait stays pending until the test cancels it
        task = asyncio.ensure_future(n.wait(first))
        first_wait.extend([asyncio.get_running_loop(), task])
        deadline = time.monotonic() + 10
        while not n.pending and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        parked.set()  # the wait has watched and is parked on a future (or the deadline passed)
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        return "finished"

    thread = threading.Thread(target=lambda: outcome.append(asyncio.run(first_loop())))
    thread.start()
    try:
        assert parked.wait(20)
        assert n.statistics()["loop_busy"] == 1 and n.pending == 1, "the first loop's wait is not pending"
        if busy:
            other.launch(RUNNING_S)
        with pytest.raises(cudafd.CudafdError, match="another event loop"):
            asyncio.run(n.wait(other))
        assert not first.idle() and other.idle() is not busy, "the waits did not see the work they are named for"
    finally:
        if first_wait:
            first_wait[0].call_soon_threadsafe(first_wait[1].cancel)
        thread.join(10)
    assert outcome == ["cancelled"]
    last.launch(0.01)
    asyncio.run(n.wait(last))  # the first loop is done with it
    n.close()


def test_a_wait_called_in_one_loop_and_awaited_in_another_is_refused(dev):
    """cudafd.wait() binds the running loop when called; awaited in another loop it raises
    at once, before touching either loop or its Notifier, and leaves nothing pending."""
    import asyncio

    s = dev.stream()
    s.launch(0.05)

    async def make():
        return cudafd.wait(s)

    async def wait_here():
        await cudafd.wait(s)  # this loop's own wait works
        return cudafd.stats()["pending"]

    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        coro = first.run_until_complete(make())
        with pytest.raises(cudafd.CudafdError, match="awaited in another"):
            second.run_until_complete(coro)
        assert second.run_until_complete(wait_here()) == 0
    finally:
        first.close()
        second.close()


@pytest.mark.skipif(REAL, reason="the simulator's own API: tested on the simulator")
def test_simulated_launch_says_what_a_length_is():
    dev = cudafd.sim.Device()
    try:
        s = dev.stream()
        with pytest.raises(TypeError, match="seconds"):
            s.launch("1ms")
        with pytest.raises(ValueError, match=">= 0"):
            s.launch(-1.0)
        s.launch(0.0, fault=False)  # a fault flag is accepted as a bool
    finally:
        dev.close()


@pytest.mark.skipif(REAL, reason="the simulator's own API: tested on the simulator")
@pytest.mark.parametrize("seconds", [float("inf"), 1e300, 2**70, float("nan"), -1])
def test_simulated_kernel_lengths_out_of_range_are_refused(seconds):
    """The simulator counts a kernel in uint64 ns: a length past that, or not a length at
    all, is refused by launch() and launch_kernel() alike, and nothing is enqueued."""
    dev = cudafd.sim.Device()
    try:
        s = dev.stream()
        for launch in (s.launch, s.launch_kernel):
            with pytest.raises(ValueError, match="length in seconds must be >= 0 and at most"):
                launch(seconds)
        with pytest.raises(TypeError, match="seconds"):
            s.launch_kernel("1ms")
        assert s.query(), "a refused launch enqueued a kernel"
    finally:
        dev.close()


@pytest.mark.skipif(REAL, reason="the simulator's own API: tested on the simulator")
@pytest.mark.parametrize("ordinal", [2**32, 2**32 + 1, 2**70, -1, 64])
def test_simulated_device_that_does_not_exist_is_refused(ordinal):
    """The ordinal is a C int: 2**32 + 1 must not wrap round to device 1."""
    count = cudafd.sim.driver().device_count()
    with pytest.raises(ValueError, match=rf"no simulated device {ordinal}: the simulator has {count}"):
        cudafd.sim.Device(ordinal)


@pytest.mark.skipif(REAL, reason="the simulator's own API: tested on the simulator")
@pytest.mark.parametrize("ordinal", [1.0, "0", None, True])
def test_simulated_device_ordinal_is_an_int(ordinal):
    with pytest.raises(TypeError, match="integer|int"):
        cudafd.sim.Device(ordinal)


@pytest.mark.skipif(REAL, reason="the simulator's own API: tested on the simulator")
def test_simulated_fault_code_out_of_range_is_refused():
    """A CUresult is a C int: 2**32 + 700 must not wrap round to 700."""
    dev = cudafd.sim.Device()
    try:
        s = dev.stream()
        with pytest.raises(ValueError, match="a fault is a positive CUresult"):
            s.launch(0.0, fault=2**32 + 700)
        s.synchronize()
        assert dev.fault() is None
    finally:
        dev.close()


def test_prepare_outside_a_loop_names_prepare(dev):
    with pytest.raises(cudafd.CudafdError, match=r"cudafd\.prepare\(\) must be called inside a running event loop"):
        cudafd.prepare(dev.stream())


def test_wait_with_a_mechanism_name_for_notifier_is_a_clear_error(dev):
    import asyncio

    with pytest.raises(TypeError, match="notifier= takes a cudafd.Notifier"):
        asyncio.run(cudafd.wait(dev.stream(), notifier="event"))
    import trio  # (a test dependency)

    async def under_trio():
        await cudafd.wait(dev.stream(), notifier="event")

    with pytest.raises(TypeError, match="notifier= takes a cudafd.Notifier"):
        trio.run(under_trio)


def test_demo_with_an_unknown_mechanism_is_a_usage_error():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "cudafd", "demo", "--mechanism", "bogus"],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2, r
    assert "invalid choice: 'bogus'" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_result_of_a_fence_the_user_closed_says_the_fence_was_closed(dev):
    s = dev.stream()
    s.launch(RUNNING_S)
    f = cudafd.fence(s)
    f.close()
    assert not s.idle(), "the GPU passed the point before the close"
    assert f.done()
    with pytest.raises(cudafd.ClosedError, match="the Fence was closed before the GPU passed its point"):
        f.result()
    with pytest.raises(cudafd.ClosedError, match="the Fence was closed"):
        f.wait()


def _unawaited_warnings(make):
    import gc
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make()
        gc.collect()
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("where", ["no loop", "asyncio", "trio"])
def test_a_wait_never_awaited_warns_with_the_public_name(dev, where):
    import asyncio

    s = dev.stream()

    def make():
        cudafd.wait(s)  # the coroutine is dropped unawaited

    if where == "asyncio":
        async def body():
            make()
        messages = _unawaited_warnings(lambda: asyncio.run(body()))
    elif where == "trio":
        trio = pytest.importorskip("trio")

        async def tbody():
            make()
        messages = _unawaited_warnings(lambda: trio.run(tbody))
    else:
        messages = _unawaited_warnings(make)
    assert "coroutine 'cudafd.wait' was never awaited" in messages, messages
    assert not any("_wait" in m or "Dispatcher" in m for m in messages), messages


@pytest.mark.parametrize("library", ["asyncio", "trio"])
def test_blocking_fence_wait_inside_a_running_loop_warns(dev, library):
    import asyncio
    import warnings

    s, idle = dev.stream(), dev.stream()

    async def body():
        s.launch(RUNNING_S)  # still running at every wait on its fence: each would block
        with cudafd.fence(s) as f:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                assert f.wait(0) is False  # only looks: no warning (an error here)
            with pytest.warns(RuntimeWarning, match=r"blocks the running \w+ event loop.*`await fence`"):
                assert f.wait(0.25) is False  # blocks the loop until its timeout
        with cudafd.fence(idle) as f:
            deadline = time.monotonic() + 10
            while not f.done() and time.monotonic() < deadline:  # (done() never blocks)
                time.sleep(0.001)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                assert f.wait()  # done: it does not block, no warning

    if library == "trio":
        pytest.importorskip("trio").run(body)
    else:
        asyncio.run(body())


def test_blocking_fence_wait_outside_a_loop_does_not_warn(dev):
    import warnings

    s = dev.stream()
    s.launch(RUNNING_S)  # still running at the wait below, which blocks until its timeout
    with cudafd.fence(s) as f, warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f.wait(0.05) is False


def _cuda_driver_present() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_cuda_driver_present(), reason="a CUDA driver is installed here: the example finds it")
def test_c_example_without_a_driver_says_how_to_use_the_simulator(tmp_path):
    import os
    import shutil
    import subprocess

    cc = shutil.which(os.environ.get("CC", "cc"))
    make = shutil.which("make")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    libdir = os.path.join(os.path.dirname(os.path.abspath(cudafd.__file__)), "_lib")  # the cudafd under test
    if cc is None or make is None or not os.path.exists(os.path.join(libdir, "libcudafd.so")):
        # (the emulated aarch64 job: its libraries are cross-built elsewhere, and cc is the host's)
        pytest.skip("needs cc, make and the native core beside the cudafd under test")
    src = tmp_path / "c-epoll"
    shutil.copytree(os.path.join(root, "examples", "c-epoll"), src,
                    ignore=shutil.ignore_patterns("cudafd-epoll", "spin_ptx.h"))
    subprocess.run([make, "-s", "-C", str(src), f"LIBDIR={libdir}", f"INCDIR={root}/include",
                    f"PTX={root}/src/cudafd/cudafd_spin.ptx"], check=True, capture_output=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k != "CUDAFD_DRIVER"}
    r = subprocess.run([str(src / "cudafd-epoll")], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2, r
    sim = os.path.join(os.path.realpath(libdir), "libcudafd_sim.so")
    assert "cannot load the CUDA driver" in r.stderr, r.stderr
    assert f"CUDAFD_DRIVER={sim} " in r.stderr, r.stderr
    # the command it suggests runs
    r = subprocess.run([str(src / "cudafd-epoll")], capture_output=True, text=True, timeout=120,
                       env=dict(env, CUDAFD_DRIVER=sim))
    assert r.returncode == 0 and "all checks passed" in r.stdout, r.stdout + r.stderr
    for bad in (["--streams", "8x"], ["--streams", "1"], ["--watches", "0"], ["--watches", "99999999999"]):
        r = subprocess.run([str(src / "cudafd-epoll"), *bad], capture_output=True, text=True, timeout=60,
                           env=dict(env, CUDAFD_DRIVER=sim))
        assert r.returncode == 2 and "not a number from" in r.stderr and f"'{bad[1]}'" in r.stderr, (bad, r.stderr)


@pytest.mark.parametrize("stream", [0, 1, 2])
def test_default_stream_without_a_current_context_says_how_to_make_one(dev, mechanism, stream):
    """A thread with no current context waiting on the default stream is told to make one current."""
    caught: list[BaseException] = []

    def body():
        try:
            cudafd.fence(stream, mechanism=mechanism).close()
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            caught.append(e)

    t = threading.Thread(target=body)
    t.start()
    t.join(30)
    assert not t.is_alive()
    assert len(caught) == 1 and isinstance(caught[0], cudafd.CudaError), caught
    assert caught[0].name == "CUDA_ERROR_INVALID_CONTEXT"
    assert "default stream" in str(caught[0]) and "cuCtxSetCurrent" in str(caught[0])


@pytest.mark.parametrize("code", [214, 700, 709, 719, 400])
def test_a_fault_says_whether_its_context_is_lost(code):
    """The faults the core treats as sticky (waits.c) tell the user the context
    is unusable; a destroyed context and a bad handle get their own advice."""
    message = str(cudafd.CudaError(code))
    assert ("context is now unusable" in message) == (code in (214, 700, 719)), message


@pytest.mark.parametrize("value", ["telepathy", "ev ent"])
def test_a_bad_mechanism_variable_is_named_in_the_error(monkeypatch, value):
    """A Notifier or fence made without a mechanism reads $CUDAFD_MECHANISM: the error names it."""
    monkeypatch.setenv("CUDAFD_MECHANISM", value)
    with pytest.raises(ValueError, match=r"\$CUDAFD_MECHANISM='.*' is not a cudafd mechanism: choose one of event"):
        cudafd.Notifier()
    with pytest.raises(ValueError, match=r"\$CUDAFD_MECHANISM"):
        cudafd.fence(0)


def test_a_blank_mechanism_variable_is_unset(monkeypatch):
    """As a blank $CUDAFD_MAX_LATENESS: the default, not a mechanism named ''."""
    monkeypatch.setenv("CUDAFD_MECHANISM", "  ")
    monkeypatch.setenv("CUDAFD_MAX_LATENESS", " ")
    with cudafd.Notifier() as n:
        assert n.mechanism == "event" and n.max_lateness == 0.0004


def _use_driver_given_bytes_then_empty() -> None:
    from cudafd._core import lib as _lib

    with pytest.raises(ValueError, match="not ''; None chooses the default"):
        cudafd.use_driver("")
    with pytest.raises(TypeError):
        cudafd.use_driver(5)
    cudafd.use_driver(_lib.sim_library_path().encode())  # a bytes path, as os.fsencode gives
    with cudafd.Notifier() as n:  # loads the core, which is handed the choice
        dev = cudafd.sim.Device()
        n.watch(dev.stream())
    assert _lib.committed_driver_path() == _lib.sim_library_path()
    dev.close()


def _use_driver_given_a_path_that_is_not_utf8(folder: str) -> None:
    import os

    from cudafd._core import lib as _lib

    link = os.fsencode(folder) + b"/sim-\xff.so"  # a file name no str encodes in UTF-8
    os.symlink(_lib.sim_library_path(), link)
    cudafd.use_driver(link)
    with cudafd.Notifier() as n:  # loads the core, which is handed the bytes as they are
        dev = cudafd.sim.Device()
        n.watch(dev.stream())
    assert os.fsencode(_lib.committed_driver_path()) == link
    assert os.fsencode(_lib.driver_path()) == link
    dev.close()


def test_use_driver_takes_a_path_that_is_not_utf8(tmp_path):
    """Linux file names are bytes: one that is not UTF-8 reaches the core's loader unchanged."""
    import os

    from cudafd._core import lib as _lib
    from support import in_child

    if not os.path.exists(_lib.sim_library_path()):
        pytest.skip("the simulator is not built here")
    in_child(f"test_bad_input._use_driver_given_a_path_that_is_not_utf8({str(tmp_path)!r})")


def test_use_driver_takes_a_bytes_path_and_refuses_an_empty_one():
    """Before the core loads (a fresh process): a bytes path is a path the core's loader
    is handed; '' is refused, not read as the default."""
    import os

    from cudafd._core import lib as _lib
    from support import in_child

    if not os.path.exists(_lib.sim_library_path()):
        pytest.skip("the simulator is not built here")
    in_child("test_bad_input._use_driver_given_bytes_then_empty()")
