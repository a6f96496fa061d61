"""Bad input gets a clear exception, never a crash or a hang."""
from __future__ import annotations

import pytest

import cudafd
from support import REAL, run


@pytest.mark.parametrize("target", [None, "stream", 1.5, object(), [1, 2], True])
def test_not_a_stream_or_event(target, loop_flavor):
    async def body(api):
        with pytest.raises(TypeError):
            await api.wait(target)

    run(loop_flavor, "event", body)
    with pytest.raises(TypeError):
        cudafd.fence(target)


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
    with pytest.raises((cudafd.CudafdError, RuntimeError)):
        coro.send(None)
    coro.close()


@pytest.mark.parametrize("kernel_s", [0.001, 0.0], ids=["busy", "already-over"])
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
