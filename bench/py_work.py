"""How much Python an await runs: opcodes and calls per wait, counted with
sys.settrace opcode events (deterministic, unlike timings; for trimming the
adapters' per-wait work). Meant for the simulator (--sim is the default).

    python bench/py_work.py lone [--loop asyncio] [--waits 100] [--kernel-ms 10] [--top 20]
    python bench/py_work.py busy [--loop asyncio] [--waits 50] [--top 20]

lone: one task launches a kernel and awaits it, back to back (a lone long
wait, timed by the loop; the kernel is long so that the traced, much slower
Python still finds it running), for lone_cost.py's variants: bound_loop,
minimal, cudafd. busy: 8 tasks on 8 streams each launch an empty kernel and
await it, while a ninth task awaits a long kernel, so that no wait is lone
and each takes the busy path (a yield, then the answer): bound_yield,
bound_query, cudafd. Prints, per
variant, opcodes and Python calls per wait and the functions that ran the
most opcodes; --by-line splits them by line. The counts are exact for the
path taken, but which path a wait takes depends on timing (a busy-loop wait
whose kernel is not over yet watches), so run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class Tracer:
    """Counts Python calls and opcodes (per function, or per function and line)."""

    def __init__(self, by_line: bool) -> None:
        self.calls = 0
        self.ops: Counter[str] = Counter()
        self.by_line = by_line

    def __call__(self, frame, event, arg):
        if event == "call":
            self.calls += 1
            frame.f_trace_opcodes = True
        elif event == "opcode":
            code = frame.f_code
            name = getattr(code, "co_qualname", code.co_name)
            self.ops[f"{name}@{frame.f_lineno}" if self.by_line else name] += 1
        return self

    def report(self, label: str, waits: int, top: int) -> None:
        total = sum(self.ops.values())
        print(f"{label}: {total / waits:.0f} opcodes, {self.calls / waits:.1f} Python calls per wait")
        for name, n in self.ops.most_common(top):
            print(f"  {n / waits:8.1f} {name}")


def traced(coro_fn, by_line: bool):
    """Run coro_fn() with the tracer on; the tracer."""
    tracer = Tracer(by_line)

    async def run():
        sys.settrace(tracer)
        try:
            await coro_fn()
        finally:
            sys.settrace(None)

    return run, tracer


def lone(a, loop: asyncio.AbstractEventLoop) -> None:
    import lone_cost

    from cudafd._bench.gpu import Gpu
    from cudafd._bench.methods import Kit

    gpu = Gpu()
    kit = Kit(gpu)
    stream = gpu.streams(1)[0]
    fns = lone_cost.variants(gpu, kit, stream, {})
    kernel = a.kernel_ms / 1e3
    try:
        for name in ("bound_loop", "minimal", "cudafd"):
            fn = fns[name]

            async def warm(fn=fn):
                for _ in range(30):
                    await fn(kernel)

            async def waits(fn=fn):
                for _ in range(a.waits):
                    await fn(kernel)

            loop.run_until_complete(warm())
            run, tracer = traced(waits, a.by_line)
            loop.run_until_complete(run())
            tracer.report(name, a.waits, a.top)
    finally:
        kit.close()
        gpu.close()


def busy(a, loop: asyncio.AbstractEventLoop) -> None:
    import cudafd
    from cudafd._bench.gpu import Gpu

    gpu = Gpu()
    streams = gpu.streams(9)
    launchers = [gpu.launcher(s) for s in streams]
    query = gpu.drv.cuStreamQuery  # type: ignore[attr-defined]

    def task(variant: str, i: int, n: int):
        s, launch = streams[i], launchers[i]

        async def one() -> None:
            for _ in range(n):
                launch(0.0)
                if variant == "cudafd":
                    await cudafd.wait(s)
                else:
                    await asyncio.sleep(0)
                    if variant == "bound_query":
                        query(s)

        return one()

    try:
        for variant in ("bound_yield", "bound_query", "cudafd"):

            async def waits(variant=variant, n=a.waits):
                launchers[8](3.0)  # the parked wait (it outlasts the traced rounds): no wait of the 8 is lone
                parked = asyncio.ensure_future(cudafd.wait(streams[8]))
                await asyncio.sleep(0.01)
                await asyncio.gather(*(task(variant, i, n) for i in range(8)))
                parked.cancel()
                await asyncio.gather(parked, return_exceptions=True)

            loop.run_until_complete(waits(n=30))

            run, tracer = traced(waits, a.by_line)
            loop.run_until_complete(run())
            tracer.report(variant, 8 * a.waits, a.top)
    finally:
        gpu.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("lone", "busy"))
    ap.add_argument("--loop", default="asyncio", choices=("asyncio", "uvloop"))
    ap.add_argument("--waits", type=int, default=0, help="per task (default: lone 100, busy 50)")
    ap.add_argument("--kernel-ms", type=float, default=10.0, help="lone: the kernel's length")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--by-line", action="store_true")
    ap.add_argument("--gpu", action="store_true", help="on a GPU if there is one (default: the simulator)")
    a = ap.parse_args()
    a.waits = a.waits or (100 if a.mode == "lone" else 50)
    if not a.gpu:
        os.environ["CUDAFD_SIMULATOR"] = "1"
    from cudafd._bench.child import new_loop

    loop = new_loop(a.loop)
    try:
        (lone if a.mode == "lone" else busy)(a, loop)
    finally:
        loop.close()


if __name__ == "__main__":
    main()
