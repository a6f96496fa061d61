"""Await CUDA streams from trio with cudafd: many tasks, one fd, the loop never blocked.

    python3 examples/trio_wait.py            # a GPU through PyTorch if usable, else the simulator
    python3 examples/trio_wait.py --sim      # the simulator that ships with cudafd (no GPU needed)
    python3 examples/trio_wait.py --sim --fault

What it shows:
- One task per stream (8 by default) launches kernels of 0.2 to 5 ms, one
  after another, and ``await cudafd.wait(stream)`` for each; a heartbeat
  task ticks every millisecond meanwhile (the loop is never blocked). Every
  wait ends after its work: the stream reports done when the wait returns.
  The time past the kernel's nominal length (launch, notification and
  wake-up) is printed; on a GPU it is approximate, as a ``_sleep`` kernel's
  length follows the clock it was calibrated at.
- ``trio.move_on_after`` around a wait detaches it: the 50 ms kernel is not
  cancelled, and a later wait still sees it finish.
- ``await fence``: a one-shot Fence, awaited by several tasks at once.
- ``--fault`` (simulator): a kernel that faults; its waiter gets
  ``cudafd.CudaError`` (``CUDA_ERROR_ILLEGAL_ADDRESS``), never a hang.

Exit status: 0 all checks passed, 1 a check failed.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import trio

import cudafd


class Simulated:
    """Streams of a simulated GPU (cudafd.sim): kernels of a given length, faults on request."""

    name = "the cudafd simulator"

    def __init__(self) -> None:
        self.device = cudafd.sim.Device()

    def streams(self, n: int) -> list:
        return [self.device.stream() for _ in range(n)]

    def launch(self, stream, seconds: float, fault: bool = False) -> None:
        stream.launch(seconds, fault="CUDA_ERROR_ILLEGAL_ADDRESS" if fault else None)

    def close(self) -> None:
        self.device.close()


class Torch:
    """torch.cuda streams; a kernel of a given length is torch.cuda._sleep (a spin on the clock)."""

    def __init__(self, torch) -> None:
        self.torch = torch
        self.name = f"{torch.cuda.get_device_name()} through PyTorch"
        torch.cuda._sleep(1000)  # load the kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(20_000_000)
        end.record()
        end.synchronize()
        self.cycles_per_second = 20_000_000 / (start.elapsed_time(end) / 1e3)

    def streams(self, n: int) -> list:
        return [self.torch.cuda.Stream() for _ in range(n)]

    def launch(self, stream, seconds: float, fault: bool = False) -> None:
        if fault:
            raise SystemExit("--fault needs the simulator (--sim): a real fault ends the process's CUDA context")
        with self.torch.cuda.stream(stream):
            self.torch.cuda._sleep(max(1, int(seconds * self.cycles_per_second)))

    def close(self) -> None:
        self.torch.cuda.synchronize()


def choose(sim: bool):
    if not sim:
        try:
            import torch

            if torch.cuda.is_available():
                return Torch(torch)
        except ImportError:
            pass
    return Simulated()


async def many_waits(gpu, streams, rounds: int) -> tuple[list[float], int]:
    """A task per stream launches kernels on it and awaits them; returns the time past
    each kernel's nominal length, and how many waits returned with their stream busy."""
    late: list[float] = []
    busy = 0
    rng = random.Random(1)

    async def task(stream) -> None:
        nonlocal busy
        for _ in range(rounds):
            seconds = rng.choice((0.0002, 0.001, 0.002, 0.005))
            t0 = time.perf_counter()
            gpu.launch(stream, seconds)
            await cudafd.wait(stream)  # the loop runs other tasks meanwhile
            late.append(time.perf_counter() - t0 - seconds)
            busy += not stream.query()  # nothing else was launched on it: it must be done

    async with trio.open_nursery() as nursery:
        for stream in streams:
            nursery.start_soon(task, stream)
    return late, busy


async def main(args: argparse.Namespace) -> int:
    gpu = choose(args.sim)
    print(f"cudafd {cudafd.__version__} under trio {trio.__version__}, on {gpu.name}")
    failures = 0

    def check(ok: bool, what: str) -> None:
        nonlocal failures
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
        failures += not ok

    try:
        streams = gpu.streams(args.streams)
        ticks = 0

        async def heartbeat() -> None:
            nonlocal ticks
            while True:
                await trio.sleep(0.001)
                ticks += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(heartbeat)
            t0 = time.perf_counter()
            late, busy = await many_waits(gpu, streams, args.rounds)
            elapsed = time.perf_counter() - t0
            nursery.cancel_scope.cancel()
        late.sort()
        print(
            f"{len(late)} waits by {len(streams)} tasks on as many streams in {elapsed * 1e3:.0f} ms; "
            f"time past the kernel: min {late[0] * 1e6:.0f} µs, p50 {late[len(late) // 2] * 1e6:.0f} µs, "
            f"max {late[-1] * 1e6:.0f} µs; heartbeat ticks meanwhile: {ticks}"
        )
        check(busy == 0, "every wait ended after its work (its stream reported done)")
        check(ticks > 0, "the heartbeat kept ticking while tasks waited")

        # Cancellation detaches the wait; the GPU work goes on.
        s = streams[0]
        gpu.launch(s, 0.05)
        with trio.move_on_after(0.005) as scope:
            await cudafd.wait(s)
        running = not s.query()
        check(scope.cancelled_caught and running, "move_on_after(5 ms) cancelled the wait while its 50 ms kernel ran")
        await cudafd.wait(s)
        check(s.query(), "the kernel was not cancelled: a new wait saw it run to its end")

        # A Fence, awaited by several tasks at once.
        gpu.launch(s, 0.01)
        with cudafd.fence(s) as f:

            async def await_fence() -> None:
                await f

            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(await_fence)
            check(f.done(), "three tasks awaited one fence")

        if args.fault:
            bad = gpu.streams(1)[0]
            gpu.launch(bad, 0.002, fault=True)
            try:
                await cudafd.wait(bad)
                check(False, "a faulting kernel's wait raised CudaError")
            except cudafd.CudaError as e:
                print(f"  the faulting kernel's wait raised CudaError: {e.name}")
                check(e.name == "CUDA_ERROR_ILLEGAL_ADDRESS", "a faulting kernel's wait raised CudaError")
    finally:
        gpu.close()
    # Detached waits (the cancelled one, those of the faulted stream) are
    # retired by cudafd's own thread once their work is over: give it a moment.
    give_up = time.monotonic() + 2.0
    while cudafd.stats()["pending"] and time.monotonic() < give_up:
        time.sleep(0.01)
    check(cudafd.stats()["pending"] == 0, "nothing left pending")
    return 1 if failures else 0


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sim", action="store_true", help="use the simulator even where a GPU is usable")
    p.add_argument("--streams", type=int, default=8, help="streams, with a task each (default 8)")
    p.add_argument("--rounds", type=int, default=10, help="kernels each task launches and awaits (default 10)")
    p.add_argument("--fault", action="store_true", help="also show a faulting kernel's wait (simulator)")
    args = p.parse_args(argv)
    for name in ("streams", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    return args


if __name__ == "__main__":
    sys.exit(trio.run(main, parse(sys.argv[1:])))
