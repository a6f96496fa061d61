"""Wait for many CUDA streams from a plain ``selectors`` loop: one Notifier, one fd.

    python3 examples/selectors_wait.py                 # a GPU through PyTorch if usable, else the simulator
    python3 examples/selectors_wait.py --sim           # the simulator that ships with cudafd (no GPU needed)
    python3 examples/selectors_wait.py --sim poll --streams 256

The pattern for a program with a loop of its own (no asyncio, no trio):

    n = cudafd.Notifier()
    sel.register(n.fileno(), selectors.EVENT_READ)
    token = n.watch(stream)                # after enqueueing work on the stream
    ... sel.select(timeout) ...            # the fd turns readable when the GPU passes a watched point
    for token, error in n.drain():         # every finished wait, in one batch; error: None or CudaError

Each of STREAMS streams runs a pipeline of WATCHES kernels: the loop launches
the next kernel on a stream when the previous one's token comes back from
drain(). The fd is level-triggered: readable exactly while completions are
queued, so draining on every wake never misses one. With the "poll"
mechanism nothing writes the fd: the loop calls n.poll() itself, with a short
select() timeout. Checks: every token comes back exactly once, with no
error, per stream in watch order, never before the kernel ran (an event
recorded right after it has completed by the drain); nothing is left
pending. (PyTorch's Stream() hands out streams from a pool of 32 per
priority, so with more than 32 two "streams" may be one CUDA stream: the
checks hold all the same.) Prints the time from each kernel's nominal end
(its launch time plus its length) to its drain. Streams share the driver's
hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 unless set, 32 at most), and
the kernels of streams that share one run in turn, ending later than their
nominal end: with 64 streams the figure is mostly that wait, not cudafd's.
Run with CUDA_DEVICE_MAX_CONNECTIONS=32 and --streams 32 to give each stream
a queue of its own.

Exit status: 0 all checks passed, 1 a check failed, 2 bad arguments or a
mechanism unusable here.
"""

from __future__ import annotations

import argparse
import random
import selectors
import sys
import time

import cudafd


class Simulated:
    """Streams of a simulated GPU (cudafd.sim): kernels of a given length."""

    name = "the cudafd simulator"

    def __init__(self) -> None:
        self.device = cudafd.sim.Device()

    def streams(self, n: int) -> list:
        return [self.device.stream() for _ in range(n)]

    def launch(self, stream, seconds: float):
        """Enqueue the kernel; returns an event recorded right after it (query(): has it run?)."""
        stream.launch(seconds)
        return stream.record()

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

    def launch(self, stream, seconds: float):
        with self.torch.cuda.stream(stream):
            self.torch.cuda._sleep(max(1, int(seconds * self.cycles_per_second)))
            after = self.torch.cuda.Event()
            after.record()
        return after

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


def run(args: argparse.Namespace) -> int:
    gpu = choose(args.sim)
    rng = random.Random(2)
    failures = []
    late: list[float] = []
    try:
        streams = gpu.streams(args.streams)
        try:
            notifier = cudafd.Notifier(args.mechanism)
        except (ValueError, cudafd.CudafdError) as e:  # a bad $CUDAFD_MECHANISM; a mechanism unusable here
            print(f"selectors_wait.py: error: {e}", file=sys.stderr)
            return 2
        with notifier as n, selectors.DefaultSelector() as sel:
            print(f"cudafd {cudafd.__version__}, {n.mechanism} mechanism, on {gpu.name}")
            sel.register(n.fileno(), selectors.EVENT_READ)
            pending: dict = {}  # token -> (stream, kernel, nominal end, event recorded after the kernel)
            launched = [0] * len(streams)
            seen = [[] for _ in streams]

            def launch(i: int) -> None:
                seconds = rng.choice((0.0, 0.0001, 0.0005, 0.002))
                t0 = time.perf_counter()
                after = gpu.launch(streams[i], seconds)
                pending[n.watch(streams[i])] = (i, launched[i], t0 + seconds, after)
                launched[i] += 1

            for i in range(len(streams)):
                launch(i)
            wakes = 0
            deadline = time.monotonic() + 60
            while pending and time.monotonic() < deadline:
                if n.needs_polling:
                    n.poll()  # nothing writes the fd of a "poll" Notifier: look for progress ourselves
                ready = sel.select(timeout=0.001 if n.needs_polling else 1.0)
                wakes += bool(ready)
                batch = n.drain()
                now = time.perf_counter()  # after the drain: it may take completions newer than select()
                for token, error in batch:
                    i, k, end, after = pending.pop(token)
                    if error is not None:
                        failures.append(f"stream {i} kernel {k}: {error}")
                    elif not after.query():
                        failures.append(f"stream {i} kernel {k}: reported done before the kernel ran")
                    late.append(now - end)
                    seen[i].append(k)
                    if launched[i] < args.watches:  # the stream's next step
                        launch(i)
            if pending:
                failures.append(f"{len(pending)} watches never came back")
            for i, ks in enumerate(seen):
                if ks != list(range(args.watches)):
                    failures.append(f"stream {i}: completions {ks}, expected 0..{args.watches - 1} in order")
            if n.pending:
                failures.append(f"the Notifier still has {n.pending} pending")
    finally:
        gpu.close()
    late.sort()
    if late:
        print(
            f"{len(late)} watches on {args.streams} streams, {wakes} wakes of the loop; from each kernel's "
            f"nominal end to its drain: p50 {late[len(late) // 2] * 1e6:.0f} µs, max {late[-1] * 1e6:.0f} µs"
        )
    for f in failures[:10]:
        print("FAIL", f)
    print("all checks passed" if not failures else f"{len(failures)} checks failed")
    return 1 if failures else 0


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mechanism", nargs="?", default=None, choices=cudafd.MECHANISMS,
                   help="how cudafd learns of progress (default: event, or $CUDAFD_MECHANISM)")
    p.add_argument("--sim", action="store_true", help="use the simulator even where a GPU is usable")
    p.add_argument("--streams", type=int, default=64, help="streams (default 64)")
    p.add_argument("--watches", type=int, default=8, help="kernels, each watched, per stream (default 8)")
    args = p.parse_args(argv)
    for name in ("streams", "watches"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    return args


if __name__ == "__main__":
    sys.exit(run(parse(sys.argv[1:])))
