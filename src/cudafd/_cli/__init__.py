"""Command line: ``python -m cudafd doctor | demo | bench | include | lib``."""

from __future__ import annotations

import argparse
import os
import signal
import sys

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m cudafd", description="cudafd: a pollable fd for CUDA stream progress")
    sub = p.add_subparsers(dest="command", metavar="{doctor,demo,bench,include,lib}")
    d = sub.add_parser("doctor", help="what works on this machine, and a quick self-test")
    d.add_argument("--sim", action="store_true", help="test on the simulator even if a GPU is usable")
    m = sub.add_parser("demo", help="many concurrent asyncio waits on spin kernels, with latency figures")
    m.add_argument("--waits", type=int, default=40000, help="total waits (default 40000)")
    m.add_argument("--streams", type=int, default=32, help="streams, one coroutine each (default 32)")
    m.add_argument("--sim", action="store_true", help="use the simulator even if a GPU is usable")
    m.add_argument("--mechanism", default=None, choices=["event", "hostfunc", "spin", "poll", "syncfd"],
                   help="event (default), hostfunc, spin, poll or syncfd (Jetson)")
    b = sub.add_parser("bench", help="lateness, latency, CPU, bubble, throughput, scale and the C API "
                       "against the usual baselines")
    b.add_argument("rest", nargs=argparse.REMAINDER)
    sub.add_parser("include", help="print the folder of the C header cudafd.h (for -I)")
    sub.add_parser("lib", help="print the folder of libcudafd.so and libcudafd_sim.so (for -L and rpath)")
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (``... | head``): nothing more can be shown. Point stdout at
        # /dev/null so that the interpreter's final flush does not fail again, and exit with
        # the status of a program ended by SIGPIPE.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # its own parser takes every option after "bench"
        from . import bench

        return bench.run(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "doctor":
        from . import doctor

        return doctor.run(force_sim=args.sim)
    if args.command == "demo":
        from . import demo

        return demo.run(waits=args.waits, streams=args.streams, force_sim=args.sim, mechanism=args.mechanism)
    if args.command in ("include", "lib"):
        from . import paths

        return paths.run(args.command)
    _parser().print_help(sys.stderr)
    return 2
