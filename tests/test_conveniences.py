"""Awaiting "the work that produced this array" (torch tensors, CuPy arrays)
and JAX arrays. On CI the frameworks are stood in for by small modules of the
same names, wired to simulator streams; test_frameworks.py runs the real ones
on a GPU."""
from __future__ import annotations

import sys
import types

import pytest

import cudafd
from support import REAL, run

pytestmark = pytest.mark.skipif(REAL, reason="stand-in frameworks over the simulator")


@pytest.fixture
def fake_frameworks(dev, monkeypatch):
    """`torch` and `cupy` modules whose current stream is a simulator stream."""
    current = dev.stream()
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(current_stream=lambda device: types.SimpleNamespace(cuda_stream=current.handle))
    Tensor = type("Tensor", (), {"__module__": "torch", "is_cuda": True, "device": "cuda:0"})
    CpuTensor = type("Tensor", (), {"__module__": "torch", "is_cuda": False, "device": "cpu"})
    cupy = types.ModuleType("cupy")

    class Device:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    cupy.cuda = types.SimpleNamespace(get_current_stream=lambda: types.SimpleNamespace(ptr=current.handle))
    ndarray = type("ndarray", (), {"__module__": "cupy._core.core", "device": Device()})
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return types.SimpleNamespace(stream=current, Tensor=Tensor, CpuTensor=CpuTensor, ndarray=ndarray)


@pytest.mark.parametrize("kind", ["Tensor", "ndarray"])
def test_array_means_its_devices_current_stream(fake_frameworks, kind, loop_flavor):
    fw = fake_frameworks
    x = getattr(fw, kind)()

    async def body(api):
        fw.stream.launch(0.02)
        await cudafd.wait(x)
        assert fw.stream.idle(), "wait(array) returned before the current stream's work finished"

    run(loop_flavor, "event", body)
    with cudafd.fence(x) as f:
        assert f.wait(timeout=5)


def test_cpu_tensor_is_refused(fake_frameworks):
    with pytest.raises(TypeError, match="CPU tensor"):
        cudafd.fence(fake_frameworks.CpuTensor())


class FakeJaxArray:
    """Ready after `polls` calls of is_ready(), like an array whose computation runs."""

    def __init__(self, polls):
        self.polls = polls

    def is_ready(self):
        self.polls -= 1
        return self.polls <= 0


def test_jax_ready_polls_until_ready(loop_flavor):
    arrays = [FakeJaxArray(5), FakeJaxArray(1)]

    async def body(api):
        assert await cudafd.jax_ready(arrays[0]) is arrays[0]
        await cudafd.jax_ready(arrays[1])

    run(loop_flavor, "event", body)
    assert all(a.polls <= 0 for a in arrays)


def test_jax_ready_refuses_other_objects(loop_flavor):
    async def body(api):
        with pytest.raises(TypeError):
            await cudafd.jax_ready(object())

    run(loop_flavor, "event", body)
