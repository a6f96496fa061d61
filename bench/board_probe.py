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

import ctypes
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from busy_rounds import KERNEL, measure, per_await, print_table, run_on, start  # noqa: E402

import cudafd  # noqa: E402
from cudafd import _lib  # noqa: E402
from cudafd._board import _words as words  # noqa: E402  (uint32 words at an address)
from cudafd._aio_line import yield_once  # noqa: E402

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


def main() -> None:
    a, busy = start(3, "--naps", "0,5000,20000", "")
    gpu, streams, launchers = busy.gpu, busy.streams, busy.launchers
    lib_done = _lib.load().cudafd_stream_done
    bl = build_board()
    kernel = KERNEL
    misses = [0]

    def variant(name: str):
        if name == "sleep0":
            return busy.sleep0(), None
        if name == "yield":
            return busy.bare(yield_once), None
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

    names = ["sleep0", "yield", "query", "cudafd"] + [f"board_{n}" for n in a.naps.split(",") if n]
    got: dict[str, list[tuple[float, ...]]] = {n: [] for n in names}

    for _ in range(a.rounds):
        for name in names:
            one, board = variant(name)
            rate, before, after, wall, missed = run_on(a.loop, measure(one, a.streams, a.seconds, lambda: misses[0]))
            if board is not None:
                bl.board_free(board)
            got[name].append((rate, *per_await(before, after, rate, wall, ("cudafd-board",)), 100 * missed / (rate * wall)))
    print_table(got, [("cores", ".2f"), ("loop us/await", ".1f"), ("board us/await", ".1f"),
                      ("unanswered %", ".1f")])
    gpu.close()


if __name__ == "__main__":
    main()
