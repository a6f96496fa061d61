"""Could a thread that asks the driver for the loop lift the throughput
figure? 64 streams each looping (100 µs kernel, await), with the driver
query moved off the loop's thread (bench/c/board_proto.c, built here), beside
the bounds, taking turns in one process (prints a table).

    python bench/board_probe.py [--seconds 1] [--rounds 3] [--loop asyncio] [--naps 0,5000,20000]

Variants: ``sleep0`` (the polling baseline), ``yield`` (a launch and a bare
``yield``: learns nothing, the ceiling), ``query`` (a launch, a yield, one
cuStreamQuery on the loop's thread: cudafd's busy path without its Python),
``cudafd`` (``await cudafd.wait(stream)``) and ``board_<nap ns>``: a launch,
a store to the stream's ``want`` word, a yield, a read of its ``done`` word
(the query made by the board's thread, which pauses nap ns between scans);
if that says "not yet", one query on the loop's thread, then cudafd.wait.
Per variant: awaits/s, cores, the loop's and the board thread's CPU per
await, and how many awaits the board had not answered after the yield.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from thread_cost import snapshot  # noqa: E402

import cudafd  # noqa: E402
from cudafd import _lib  # noqa: E402
from cudafd._aio_line import yield_once  # noqa: E402
from cudafd._bench.gpu import EV_SPIN, NOT_READY, Gpu  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def build_board() -> ctypes.CDLL:
    so = os.path.join(tempfile.mkdtemp(), "board_proto.so")
    src = os.path.join(HERE, "c", "board_proto.c")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", so, src, "-ldl", "-pthread"], check=True)
    b = ctypes.CDLL(so)
    b.board_new.restype = ctypes.c_void_p
    b.board_new.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_void_p, ctypes.c_char_p]
    for f in ("board_want", "board_done"):
        getattr(b, f).restype = ctypes.c_void_p
        getattr(b, f).argtypes = [ctypes.c_void_p]
    for f in ("board_queries", "board_scans"):
        getattr(b, f).restype = ctypes.c_ulonglong
        getattr(b, f).argtypes = [ctypes.c_void_p]
    b.board_free.argtypes = [ctypes.c_void_p]
    return b


def words(addr: int, n: int) -> memoryview:
    return memoryview((ctypes.c_uint32 * n).from_address(addr)).cast("B").cast("I")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--naps", default="0,5000,20000")
    ap.add_argument("--loop", default="asyncio", choices=("asyncio", "uvloop"))
    a = ap.parse_args()
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
    gpu = Gpu()
    streams = gpu.streams(a.streams)
    launchers = [gpu.launcher(s) for s in streams]
    events = [gpu.event(EV_SPIN) for _ in streams]
    lib = _lib.load()
    lib_done = lib.cudafd_stream_done
    bl = build_board()
    kernel = 100e-6
    print(f"{gpu.description}; {a.streams} streams x 100 us, {a.loop}")
    misses = [0]

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
                await yield_once()

            return one, None
        if name == "query":

            async def one(i: int) -> None:
                launchers[i](kernel)
                await yield_once()
                if lib_done(streams[i]) != 1:
                    await cudafd.wait(streams[i])

            return one, None
        if name == "cudafd":

            async def one(i: int) -> None:
                launchers[i](kernel)
                await cudafd.wait(streams[i])

            return one, None
        nap = int(name.split("_")[1])
        board = bl.board_new(a.streams, nap, (ctypes.c_void_p * a.streams)(*streams), gpu.drv.path.encode())
        if not board:
            raise SystemExit(f"board_proto: cannot load {gpu.drv.path}")
        want, done = words(bl.board_want(board), a.streams), words(bl.board_done(board), a.streams)

        async def one(i: int) -> None:
            launchers[i](kernel)
            w = want[i] = (want[i] + 1) & 0xFFFFFFFF
            await yield_once()
            if done[i] != w:
                misses[0] += 1
                if lib_done(streams[i]) != 1:
                    await cudafd.wait(streams[i])

        return one, board

    main_thread = open("/proc/self/comm").read().strip()
    names = ["sleep0", "yield", "query", "cudafd"] + [f"board_{n}" for n in a.naps.split(",") if n]
    got: dict[str, list[tuple[float, ...]]] = {n: [] for n in names}

    async def run(one) -> tuple[float, dict, dict, float, int]:
        count = [0]
        stop = [False]

        async def worker(i: int) -> None:
            while not stop[0]:
                await one(i)
                count[0] += 1

        tasks = [asyncio.ensure_future(worker(i)) for i in range(a.streams)]
        await asyncio.sleep(0.3)
        n0, m0, before, t0 = count[0], misses[0], snapshot(), time.perf_counter()
        await asyncio.sleep(a.seconds)
        n1, m1, after, wall = count[0], misses[0], snapshot(), time.perf_counter() - t0
        stop[0] = True
        await asyncio.gather(*tasks)
        return (n1 - n0) / wall, before, after, wall, m1 - m0

    for _ in range(a.rounds):
        for name in names:
            one, board = variant(name)
            if a.loop == "uvloop":
                import uvloop

                rate, before, after, wall, missed = uvloop.run(run(one))
            else:
                rate, before, after, wall, missed = asyncio.run(run(one))
            if board is not None:
                bl.board_free(board)
            n = rate * wall
            cpu = {k: (after[k][0] - before.get(k, [0])[0]) / 1e9 for k in after if k != "core"}
            cores = sum(cpu.values()) / wall
            loop_us = cpu.get(main_thread, 0.0) / n * 1e6
            board_us = cpu.get("cudafd-board", 0.0) / n * 1e6
            got[name].append((rate, cores, loop_us, board_us, missed / n))
    base = statistics.median(r[0] for r in got["sleep0"])
    print(f"{'variant':12s} {'awaits/s':>10s} {'x sleep0':>8s} {'cores':>6s} {'loop us/await':>14s} "
          f"{'board us/await':>15s} {'unanswered':>10s}")
    for name, rows in got.items():
        med = [statistics.median(r[i] for r in rows) for i in range(5)]
        print(f"{name:12s} {med[0]:10,.0f} {med[0] / base:8.2f} {med[1]:6.2f} {med[2]:14.1f} {med[3]:15.1f} {med[4]:10.1%}")
    print("per round (awaits/s): " + "; ".join(f"{k} " + ",".join(f"{r[0]:.0f}" for r in v) for k, v in got.items()))
    gpu.close()


if __name__ == "__main__":
    main()
