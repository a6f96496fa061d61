"""The request handler the Ray Serve deployment wraps, usable without Ray.

``Inference(mode, backend, kernel_s)`` answers ``await replica(x)`` with
``2 * x * N``, computed on the GPU (PyTorch) or, on the simulator, checked
against the simulated stream's state. Each request takes a stream from a
pool made once per replica, enqueues its work there (a kernel of
``kernel_s`` seconds, then the answer), and waits for the stream in one of
two ways:

* ``cudafd``: ``await notifier.wait(stream)``: the replica's event loop goes
  on serving other requests; no thread is involved.
* ``executor``: ``await loop.run_in_executor(pool, stream.synchronize)``: a
  thread blocks in the driver per request. The pool has a thread per stream,
  so that both modes admit the same number of requests in flight (a Ray
  Serve replica's default executor has ``min(32, num_cpus + 4)`` threads).

The answer is read from host memory written by the stream itself (PyTorch:
a pinned buffer filled by an asynchronous copy), so a wait that returned
early would give a wrong answer, which the load generator counts.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import time
from typing import Any

import cudafd

N = 1024  # elements per request's tensor
MODES = ("cudafd", "executor")
# Live counts of the native core that must be back to zero once the handler is
# closed. "streams" and "contexts" are left out: a context's side streams are
# kept for later Notifiers until the process exits (cudafd.stats's docstring).
LIVE = ("pending", "notifiers", "events", "eventfds", "notifications", "threads")


def choose_backend(force_sim: bool = False) -> str:
    """"torch" when PyTorch sees a usable GPU (and the simulator is not forced), else "sim"."""
    if force_sim or os.environ.get("CUDAFD_SIMULATOR") == "1":
        return "sim"
    try:
        import torch
    except ImportError:
        return "sim"
    return "torch" if torch.cuda.is_available() else "sim"


class _TorchWork:
    """torch.cuda streams; the kernel is torch.cuda._sleep (a spin on the GPU clock)."""

    def __init__(self, streams: int) -> None:
        import torch

        self.torch = torch
        self.where = f"PyTorch on {torch.cuda.get_device_name()}"
        torch.cuda._sleep(1000)  # loads the kernel
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.cuda._sleep(20_000_000)
        torch.cuda.synchronize()
        self.cycles_per_s = 20_000_000 / (time.perf_counter() - t0)
        self.streams = [torch.cuda.Stream() for _ in range(streams)]
        # one pinned answer buffer and one input tensor per stream, made once
        self.host = {id(s): torch.zeros((), dtype=torch.float32).pin_memory() for s in self.streams}
        self.dev = {id(s): torch.empty(N, device="cuda", dtype=torch.float32) for s in self.streams}

    def launch(self, stream: Any, x: int, kernel_s: float) -> None:
        torch = self.torch
        with torch.cuda.stream(stream):
            torch.cuda._sleep(max(1, int(kernel_s * self.cycles_per_s)))
            d = self.dev[id(stream)]
            d.fill_(float(x))
            self.host[id(stream)].copy_((d * 2).sum(), non_blocking=True)

    def answer(self, stream: Any, x: int) -> float:
        return float(self.host[id(stream)])

    def close(self) -> None:
        self.torch.cuda.synchronize()


class _SimWork:
    """cudafd's simulated driver; the answer is given only if the stream is idle."""

    def __init__(self, streams: int) -> None:
        cudafd.use_simulator()
        self.where = "the cudafd simulator (no GPU)"
        self.device = cudafd.sim.Device()
        self.streams = [self.device.stream(non_blocking=True) for _ in range(streams)]

    def launch(self, stream: Any, x: int, kernel_s: float) -> None:
        stream.launch(kernel_s)

    def answer(self, stream: Any, x: int) -> float | None:
        return 2.0 * x * N if stream.query() else None

    def close(self) -> None:
        self.device.synchronize()
        self.device.close()


class Inference:
    """One replica's handler: ``await handler(x)`` is ``2 * x * N`` computed on the GPU."""

    def __init__(self, mode: str, backend: str = "sim", kernel_s: float = 0.001, streams: int = 16) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if backend not in ("torch", "sim"):
            raise ValueError(f"backend must be 'torch' or 'sim', not {backend!r}")
        self.mode = mode
        self.kernel_s = float(kernel_s)
        self.work = _TorchWork(streams) if backend == "torch" else _SimWork(streams)
        self.where = self.work.where
        self._free: asyncio.Queue[Any] | None = None
        self._notifier: cudafd.Notifier | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        if mode == "executor":
            self._pool = concurrent.futures.ThreadPoolExecutor(len(self.work.streams), thread_name_prefix="synchronize")

    def _bind(self) -> None:
        """Made on the loop that runs the requests (Ray Serve runs the
        constructor and the requests on different threads): the stream queue,
        and the one Notifier of this loop."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        if self._loop is not None:
            raise RuntimeError("an Inference handler serves one event loop")
        self._loop = loop
        self._free = asyncio.Queue()
        for s in self.work.streams:
            self._free.put_nowait(s)
        if self.mode == "cudafd":
            self._notifier = cudafd.Notifier()

    async def __call__(self, x: int) -> float | None:
        self._bind()
        assert self._free is not None
        stream = await self._free.get()
        try:
            self.work.launch(stream, x, self.kernel_s)
            if self._notifier is not None:
                await self._notifier.wait(stream)
            else:
                await asyncio.get_running_loop().run_in_executor(self._pool, stream.synchronize)
            return self.work.answer(stream, x)
        finally:
            self._free.put_nowait(stream)

    def info(self) -> dict[str, Any]:
        """Where it runs, and the CPU this process has used so far (seconds)."""
        return {"where": self.where, "mode": self.mode, "pid": os.getpid(), "cpu_s": time.process_time()}

    async def close(self) -> dict[str, int]:
        """Close the Notifier and the work; the live counts of cudafd after (all zero when nothing leaked)."""
        if self._notifier is not None:
            self._notifier.close()
            self._notifier = None
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self.work.close()
        deadline = time.monotonic() + 10.0
        while True:  # the core's waiter threads may linger briefly after the last wait
            stats = cudafd.stats()
            counts = {k: stats.get(k, 0) for k in LIVE}
            if not any(counts.values()) or time.monotonic() > deadline:
                return counts
            await asyncio.sleep(0.02)


def expected(x: int) -> float:
    return 2.0 * x * N
