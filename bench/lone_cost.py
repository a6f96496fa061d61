"""Where the CPU of a lone long wait goes, inside a real event loop (for
tuning the idle-CPU figure; prints a table).

    python bench/lone_cost.py [--kernel-ms 2] [--seconds 1] [--rounds 3] [--loop asyncio,uvloop]

A task launches a kernel of --kernel-ms and awaits it, back to back, as the
bench's CPU section does. The variants take turns each round, in an order
rotated by one each round:
  bound_loop   the bench's bound: the loop's selector asleep on a timerfd
               for exactly the kernel's length
  cudafd       await Notifier("event").wait(stream), as the bench does
  cudafd_steps the same, each native step timed on the thread's CPU clock
               where it runs (launch, the "already over?" query, the timed
               watch, the check); "rest" is the Python and the loop around
               them (the timing itself adds ~1 µs per step)
  bound_steps  bound_loop, its steps timed the same way (launch, record,
               arm, clear, sync)
  no_ask       cudafd without the lone wait's "already over?" query
  minimal      the core's timed wait with the least Python around it: the
               backend's watch_stream_timed, a future, and a reader on the
               clock the core arms that calls the backend's check (what a
               leaner adapter could reach)
Per variant: process CPU per wait (µs, every thread), the loop thread's
CPU per wait, and cores, medians of the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from cudafd._bench.child import new_loop
from cudafd._bench.gpu import Gpu
from cudafd._bench.methods import Kit, make

VARIANTS = ("bound_loop", "bound_steps", "cudafd", "cudafd_steps", "no_ask", "minimal")
STEPPED = {"cudafd_steps": "cudafd", "bound_steps": "bound"}


def timed(fn, into: dict, key: str):
    clock = time.thread_time_ns

    def wrapper(*args):
        c0 = clock()
        try:
            return fn(*args)
        finally:
            into[key] = into.get(key, 0) + clock() - c0

    return wrapper


def reader(kit: Kit, fd: int, callback):
    """A function that registers ``callback`` for ``fd`` on the running loop
    the first time it is called, and returns that loop; the kit unregisters it."""
    loops: list = []

    def ensure() -> asyncio.AbstractEventLoop:
        if not loops:
            loops.append(asyncio.get_running_loop())
            loops[0].add_reader(fd, callback)
        return loops[0]

    kit.on_close(lambda: loops and loops.pop().remove_reader(fd))
    return ensure


def variants(gpu: Gpu, kit: Kit, stream: int, steps: dict) -> dict:
    import cudafd
    from cudafd._timerfd import OneShot

    out = {"bound_loop": make("bound_loop", kit, stream), "cudafd": make("cudafd_event", kit, stream)}
    launch = gpu.launcher(stream)

    n = cudafd.Notifier("event")
    kit.on_close(n.close)
    n._done_now = lambda t: False  # type: ignore[method-assign]

    async def no_ask(seconds: float) -> None:
        launch(seconds)
        await n.wait(stream)

    out["no_ask"] = no_ask

    m = cudafd.Notifier("event")
    kit.on_close(m.close)
    csteps = steps.setdefault("cudafd", {})
    for name in ("_done_now", "_watch_timed", "_check"):
        setattr(m, name, timed(getattr(m, name), csteps, name))
    launch_timed = timed(launch, csteps, "launch")

    async def with_steps(seconds: float) -> None:
        launch_timed(seconds)
        await m.wait(stream)

    out["cudafd_steps"] = with_steps


    drv = gpu.drv
    ev = gpu.event(0)
    timer = OneShot()
    kit.on_close(timer.close)
    bsteps = steps.setdefault("bound", {})
    b_launch = timed(launch, bsteps, "launch")
    b_record = timed(drv.cuEventRecord, bsteps, "record")
    b_sync = timed(drv.cuEventSynchronize, bsteps, "sync")
    b_arm = timed(timer.arm, bsteps, "arm")
    b_clear = timed(timer.clear, bsteps, "clear")
    waiting: list = []

    def fired() -> None:
        b_clear()
        if waiting and not waiting[0].done():
            waiting[0].set_result(None)

    bound_reader = reader(kit, timer.fileno(), fired)

    async def bound_steps(seconds: float) -> None:
        loop = bound_reader()
        b_launch(seconds)
        b_record(ev, stream)
        fut = loop.create_future()
        waiting[:] = [fut]
        b_arm(seconds)
        await fut
        b_sync(ev)

    out["bound_steps"] = bound_steps

    mn = cudafd.Notifier("event")
    kit.on_close(mn.close)
    backend = mn._backend
    clock = OneShot()
    kit.on_close(clock.close)
    backend.set_clock(clock.fileno())
    kit.on_close(lambda: backend.set_clock(-1))
    pending: dict = {}

    def on_clock() -> None:
        for token, fut in list(pending.items()):
            status, due = backend.check(token)
            if due == 0:
                del pending[token]
                fut.set_result(status)

    clock_reader = reader(kit, clock.fileno(), on_clock)

    async def minimal(seconds: float) -> None:
        loop = clock_reader()
        launch(seconds)
        token, due = backend.watch_stream_timed(stream)
        if due <= 0:  # no history yet, or handed back: the fd reports it
            while not any(k == token for k, _ in backend.drain(False)):
                await asyncio.sleep(0.0002)
            return
        fut = loop.create_future()
        pending[token] = fut
        await fut

    out["minimal"] = minimal
    return out


async def measure(fn, kernel: float, seconds: float, settle: float) -> tuple[float, float, int, float]:
    end = time.perf_counter() + settle
    while time.perf_counter() < end:
        await fn(kernel)
    c0, t0, w0, n = time.process_time(), time.thread_time(), time.perf_counter(), 0
    while time.perf_counter() < w0 + seconds:
        await fn(kernel)
        n += 1
    cpu, mine, wall = time.process_time() - c0, time.thread_time() - t0, time.perf_counter() - w0
    return cpu / n * 1e6, cpu / wall, n, mine / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel-ms", type=float, default=2.0)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--settle", type=float, default=0.3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--loop", default="asyncio,uvloop")
    ap.add_argument("--only", default="", help="comma-separated variants (for a profiler wrapped around this)")
    a = ap.parse_args()
    chosen = tuple(v for v in VARIANTS if not a.only or v in a.only.split(","))
    kernel = a.kernel_ms / 1e3
    for loop_name in a.loop.split(","):
        gpu = Gpu()
        kit = Kit(gpu)
        stream = gpu.streams(1)[0]
        steps: dict = {}
        fns = variants(gpu, kit, stream, steps)
        loop = new_loop(loop_name)
        got: dict[str, list[tuple[float, float, int, float]]] = {k: [] for k in chosen}
        step_waits = {k: 0 for k in STEPPED if k in chosen}
        step_sums: dict[str, dict[str, int]] = {k: {} for k in STEPPED}
        for r in range(a.rounds):
            order = chosen[r % len(chosen):] + chosen[: r % len(chosen)]
            for key in order:
                sub = steps.setdefault(STEPPED[key], {}) if key in STEPPED else None
                if sub is not None:
                    loop.run_until_complete(measure(fns[key], kernel, a.settle, 0))
                    sub.clear()
                res = loop.run_until_complete(measure(fns[key], kernel, a.seconds, a.settle if sub is None else 0))
                got[key].append(res)
                if sub is not None:
                    step_waits[key] += res[2]
                    for k, v in sub.items():
                        step_sums[key][k] = step_sums[key].get(k, 0) + v
        print(f"{gpu.description}; {loop_name}; kernel {a.kernel_ms} ms; {a.rounds} rounds of {a.seconds} s")
        print(f"{'variant':14s} {'cpu us/wait':>12s} {'loop us/wait':>13s} {'cores':>7s}   rounds (cores)")
        for key in chosen:
            rows = got[key]
            per = statistics.median(x[0] for x in rows)
            cores = statistics.median(x[1] for x in rows)
            mine = statistics.median(x[3] for x in rows)
            each = " ".join(f"{x[1]:.3f}" for x in rows)
            print(f"{key:14s} {per:12.1f} {mine:13.1f} {cores:7.3f}   {each}")
        for key in STEPPED:
            if not step_waits.get(key):
                continue
            total = statistics.median(x[3] for x in got[key])
            parts = {k: v / step_waits[key] / 1e3 for k, v in step_sums[key].items()}
            line = ", ".join(f"{k} {v:.1f}" for k, v in parts.items())
            print(f"{key}, the loop thread's CPU per wait (us): {line}; rest {total - sum(parts.values()):.1f}", flush=True)
        kit.close()
        loop.close()
        gpu.close()


if __name__ == "__main__":
    main()
