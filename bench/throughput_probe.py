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

import asyncio
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from busy_rounds import KERNEL, measure, per_await, print_table, run_on, start  # noqa: E402

import cudafd  # noqa: E402
from cudafd import _aio, _lib  # noqa: E402


def main() -> None:
    lib = _lib.load()
    default = ctypes.c_int64()
    lib.cudafd_get_option(_lib.OPT_SPIN_NS, ctypes.byref(default))
    a, busy = start(2, "--spins", "20,0", f", default spin {default.value / 1e3:.0f} us")
    gpu, streams, launchers = busy.gpu, busy.streams, busy.launchers
    kernel = KERNEL

    def variant(name: str):
        if name == "sleep0":
            return busy.sleep0(), None
        if name == "yield":
            return busy.bare(lambda: asyncio.sleep(0)), None
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

    names = ["sleep0", "yield", "cudafd", "cudafd_noboard", "yield_first"]
    names += [f"spin_{s}" for s in a.spins.split(",") if s]
    got: dict[str, list[tuple[float, ...]]] = {n: [] for n in names}

    async def run(one, board: bool) -> tuple[float, dict, dict, float, int]:
        dispatcher = _aio.default_dispatcher(asyncio.get_running_loop())
        if not board:  # the busy path makes its own query after the yield
            dispatcher._board = None

        def queries() -> int:  # the answer board's, once the busy path made it
            return dispatcher._board.stats()["queries"] if dispatcher._board else 0

        return await measure(one, a.streams, a.seconds, queries)

    for _ in range(a.rounds):
        for name in names:
            one, spin = variant(name)
            if spin is not None:
                lib.cudafd_set_option(_lib.OPT_SPIN_NS, spin)
            rate, before, after, wall, queries = run_on(a.loop, run(one, name != "cudafd_noboard"))
            lib.cudafd_set_option(_lib.OPT_SPIN_NS, default.value)
            got[name].append((rate, *per_await(before, after, rate, wall, ("cudafd-poller", "cudafd-board")),
                              queries / (rate * wall)))
    print_table(got, [("cores", ".2f"), ("loop us/await", ".1f"), ("poller us/await", ".1f"),
                      ("board us/await", ".1f"), ("board q/await", ".2f")])
    gpu.close()


if __name__ == "__main__":
    main()
