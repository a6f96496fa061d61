"""Where the throughput figure goes: 64 streams each looping (100 µs kernel,
await) under asyncio, with the poller's spin budget varied, thread by thread
(for tuning the throughput figure; prints a table).

    python bench/throughput_probe.py [--seconds 1] [--rounds 2] [--loop asyncio]

Variants, taking turns each round: ``sleep0`` (the polling baseline),
``yield`` (a launch and one bare yield: no wait at all), ``yield_first``
(a yield, then cudafd_stream_done, and cudafd.wait only if still running:
cudafd's busy path without the answer board),
``cudafd_noboard`` (cudafd without its answer board: the busy path queries
on the loop's thread), and cudafd's event
mechanism with CUDAFD_OPT_SPIN_NS at its default and at each --spins value
(µs; 0: every wait is paced from the start). Per variant: awaits/s, the
process's cores, the loop's, the poller's and the answer board's CPU per
await, and the board's driver queries per await.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from thread_cost import snapshot  # noqa: E402

import cudafd  # noqa: E402
from cudafd import _aio, _lib  # noqa: E402
from cudafd._bench.gpu import EV_SPIN, NOT_READY, Gpu  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--spins", default="20,0")
    ap.add_argument("--loop", default="asyncio", choices=("asyncio", "uvloop"))
    a = ap.parse_args()
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
    gpu = Gpu()
    streams = gpu.streams(a.streams)
    launchers = [gpu.launcher(s) for s in streams]
    events = [gpu.event(EV_SPIN) for _ in streams]
    lib = _lib.load()
    default = ctypes.c_int64()
    lib.cudafd_get_option(_lib.OPT_SPIN_NS, ctypes.byref(default))
    kernel = 100e-6
    print(f"{gpu.description}; {a.streams} streams x 100 us, {a.loop}, default spin {default.value / 1e3:.0f} us")

    def variant(name: str):
        if name == "sleep0":
            async def one(i: int) -> None:
                launchers[i](kernel)
                gpu.drv.cuEventRecord(events[i], streams[i])  # type: ignore[attr-defined]
                while gpu.drv.cuEventQuery(events[i]) == NOT_READY:  # type: ignore[attr-defined]
                    await asyncio.sleep(0)

            return one, None
        if name == "yield":

            async def one(i: int) -> None:
                launchers[i](kernel)
                await asyncio.sleep(0)

            return one, None
        if name == "yield_first":  # one yield, then the driver's word, then a wait if needed
            lib_done = lib.cudafd_stream_done

            async def one(i: int) -> None:
                launchers[i](kernel)
                await asyncio.sleep(0)
                if lib_done(streams[i]) != 1:
                    await cudafd.wait(streams[i])

            return one, default.value
        spin = default.value if name in ("cudafd", "cudafd_noboard") else int(name.split("_")[1]) * 1000

        async def one(i: int) -> None:
            launchers[i](kernel)
            await cudafd.wait(streams[i])

        return one, spin

    main_thread = open("/proc/self/comm").read().strip()
    names = ["sleep0", "yield", "cudafd", "cudafd_noboard", "yield_first"]
    names += [f"spin_{s}" for s in a.spins.split(",") if s]
    got: dict[str, list[tuple[float, float, float, float]]] = {n: [] for n in names}

    async def run(one, board: bool) -> tuple[float, dict, dict, float]:
        if not board:  # the busy path makes its own query after the yield
            _aio.default_dispatcher(asyncio.get_running_loop())._board = None
        count = [0]
        stop = [False]

        async def worker(i: int) -> None:
            while not stop[0]:
                await one(i)
                count[0] += 1

        def queries() -> int:  # the answer board's, if the default dispatcher has one
            board = _aio.default_dispatcher(asyncio.get_running_loop())._board
            return board.stats()["queries"] if board else 0

        tasks = [asyncio.ensure_future(worker(i)) for i in range(a.streams)]
        await asyncio.sleep(0.3)
        n0, q0, before, t0 = count[0], queries(), snapshot(), time.perf_counter()
        await asyncio.sleep(a.seconds)
        n1, q1, after, wall = count[0], queries(), snapshot(), time.perf_counter() - t0
        stop[0] = True
        await asyncio.gather(*tasks)
        before["board queries"] = [q0]
        after["board queries"] = [q1]
        return (n1 - n0) / wall, before, after, wall

    for _ in range(a.rounds):
        for name in names:
            one, spin = variant(name)
            if spin is not None:
                lib.cudafd_set_option(_lib.OPT_SPIN_NS, spin)
            if a.loop == "uvloop":
                import uvloop

                rate, before, after, wall = uvloop.run(run(one, name != "cudafd_noboard"))
            else:
                rate, before, after, wall = asyncio.run(run(one, name != "cudafd_noboard"))
            lib.cudafd_set_option(_lib.OPT_SPIN_NS, default.value)
            n = rate * wall
            board_q = (after.pop("board queries")[0] - before.pop("board queries")[0]) / n
            cpu = {k: (after[k][0] - before.get(k, [0])[0]) / 1e9 for k in after if k != "core"}
            cores = sum(cpu.values()) / wall
            loop_us = cpu.get(main_thread, 0.0) / n * 1e6
            poller_us = cpu.get("cudafd-poller", 0.0) / n * 1e6
            board_us = cpu.get("cudafd-board", 0.0) / n * 1e6
            got[name].append((rate, cores, loop_us, poller_us, board_us, board_q))
    base = statistics.median(r[0] for r in got["sleep0"])
    print(f"{'variant':12s} {'awaits/s':>10s} {'x sleep0':>8s} {'cores':>6s} {'loop us/await':>14s} "
          f"{'poller us/await':>16s} {'board us/await':>15s} {'board q/await':>13s}")
    for name, rows in got.items():
        med = [statistics.median(r[i] for r in rows) for i in range(6)]
        print(f"{name:12s} {med[0]:10,.0f} {med[0] / base:8.2f} {med[1]:6.2f} {med[2]:14.1f} {med[3]:16.1f} "
              f"{med[4]:15.1f} {med[5]:13.2f}")
    print("per round (awaits/s): " + "; ".join(f"{k} " + ",".join(f"{r[0]:.0f}" for r in v) for k, v in got.items()))
    gpu.close()


if __name__ == "__main__":
    main()
