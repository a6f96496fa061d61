"""Streams and events of the GPU frameworks, on a real GPU (marked gpu:
skipped on the simulator). Each framework is optional: missing ones skip."""
from __future__ import annotations

import asyncio

import pytest

import cudafd
from fault_scenario import BYSTANDER_S, SURFACE_BOUND_S

pytestmark = pytest.mark.gpu


def run_async(coro_fn):
    return asyncio.run(coro_fn())


def test_torch_stream_and_event():
    torch = pytest.importorskip("torch")
    s = torch.cuda.Stream()
    a = torch.randn(4096, 4096, device="cuda")

    async def main():
        with torch.cuda.stream(s):
            b = a @ a
            ev = torch.cuda.Event()
            ev.record(s)
            c = b @ b
        await cudafd.wait(ev)
        assert ev.query()
        await cudafd.wait(s)
        assert s.query()
        return c

    c = run_async(main)
    assert torch.isfinite(c).all()


def test_torch_fault_raises_cuda_error():
    """An out-of-bounds index in a torch kernel faults the context: the coroutine
    awaiting its stream gets CudaError, and so does the one awaiting a bystander
    stream whose kernel runs BYSTANDER_S, promptly (SURFACE_BOUND_S, a small part
    of that: fault_scenario.py). Run in a subprocess: the fault ends CUDA for the
    whole process."""
    pytest.importorskip("torch")
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        f"""
        import asyncio, time, torch, cudafd
        from cudafd._core import kernels
        async def main():
            s, bystander = torch.cuda.Stream(), torch.cuda.Stream()
            x = torch.zeros(16, device="cuda")
            idx = torch.tensor([1 << 40], device="cuda")
            kernels.launch_spin(bystander.cuda_stream, 0)  # the spin kernel's module loaded now
            with torch.cuda.stream(s):
                # the first allocations on s wait for the device (torch 2.11, an H100): made
                # and freed here, their blocks serve the index below, whose enqueue then does not
                x[torch.tensor([0], device="cuda")]
            torch.cuda.synchronize()
            with torch.cuda.stream(s):
                torch.cuda._sleep(200_000_000)  # ~0.1 s: the bystander's kernel starts before the fault
                y = x[idx]                     # device-side assert / illegal address
            kernels.launch_spin(bystander.cuda_stream, {BYSTANDER_S})
            t0 = time.monotonic()
            names = []
            for target in (bystander, s):
                try:
                    await cudafd.wait(target)
                    names.append("ok")
                except cudafd.CudaError as e:
                    names.append(e.name)
            print("waited", round(time.monotonic() - t0, 3), *names)
        asyncio.run(main())
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("waited")]
    assert line, r.stdout + r.stderr
    _, took, *names = line[0].split()
    assert len(names) == 2 and all(n.startswith("CUDA_ERROR_") for n in names), names
    assert float(took) < SURFACE_BOUND_S, f"the fault took {took} s to reach both waits"


def test_cupy_stream_and_event():
    cp = pytest.importorskip("cupy")
    s = cp.cuda.Stream(non_blocking=True)

    async def main():
        with s:
            a = cp.random.rand(2048, 2048)
            b = a @ a
            ev = s.record()
        await cudafd.wait(ev)
        assert ev.done
        await cudafd.wait(s)
        assert s.done
        return b

    assert bool(cp.isfinite(run_async(main)).all())


def test_numba_stream():
    cuda = pytest.importorskip("numba.cuda")
    import numpy as np

    s = cuda.stream()
    host = np.arange(1 << 20, dtype=np.float32)

    async def main():
        d = cuda.to_device(host, stream=s)
        await cudafd.wait(s)
        return d.copy_to_host()

    assert (run_async(main) == host).all()


def test_cuda_core_stream_and_event():
    try:  # cuda.core moved its API out of .experimental in newer releases
        import cuda.core as core
    except ImportError:
        core = None
    if getattr(core, "Device", None) is None:
        core = pytest.importorskip("cuda.core.experimental")
    dev = core.Device()
    dev.set_current()
    s = dev.create_stream()

    async def main():
        ev = s.record()
        await cudafd.wait(ev)
        await cudafd.wait(s)

    run_async(main)
    s.close()


def test_cuda_bindings_handles():
    drv = pytest.importorskip("cuda.bindings.driver")
    torch = pytest.importorskip("torch")
    s = torch.cuda.Stream()
    handle = drv.CUstream(s.cuda_stream)

    async def main():
        await cudafd.wait(handle)
        await cudafd.wait(int(s.cuda_stream))

    run_async(main)


def test_torch_tensor_means_current_stream():
    torch = pytest.importorskip("torch")
    s = torch.cuda.Stream()
    a = torch.randn(4096, 4096, device="cuda")

    async def main():
        with torch.cuda.stream(s):
            y = a @ a @ a
            await cudafd.wait(y)  # the current stream here is s
            assert s.query()
        return y

    assert torch.isfinite(run_async(main)).all()


def test_cupy_array_means_current_stream():
    cp = pytest.importorskip("cupy")
    s = cp.cuda.Stream(non_blocking=True)

    async def main():
        with s:
            a = cp.random.rand(2048, 2048)
            b = a @ a
            await cudafd.wait(b)
            assert s.done

    run_async(main)


def test_jax_ready():
    """JAX has no stream to wait on: jax_ready polls is_ready() (subprocess:
    JAX and torch in one process contend for GPU memory)."""
    pytest.importorskip("jax")
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import asyncio, jax, jax.numpy as jnp, cudafd
        async def main():
            x = jnp.ones((4096, 4096))
            y = x @ x @ x
            assert await cudafd.jax_ready(y) is y
            assert y.is_ready()
            print("ready", float(y[0, 0]))
        asyncio.run(main())
        """
    )
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0 and "ready 16777216.0" in r.stdout, r.stdout + r.stderr[-3000:]
