"""Command-line options of ``python -m cudafd bench`` and the plan of runs they give.

The figures below budget a full run of the sections other than lateness at
~2 minutes on a 16-core GPU host (their limit is 4; every child also has a
hard limit, and the whole suite a global one) and ``--quick`` at ~15 s on a
2-core machine with the simulator. The lateness section has a budget of its
own on top: ~75 s per loop on the H200, under 4 minutes for asyncio and
uvloop (``python -m cudafd bench lateness``); quick, ~10 s per loop on the
simulator.
"""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any, NoReturn

from .._core.notifier import check_environment
from . import SECTIONS

__all__ = ["FULL", "MECHANISMS_SCALE", "QUICK", "error", "parse", "plan"]

MECHANISMS_SCALE = ("event", "hostfunc", "spin")

LATENESS_ONE_STREAM = [  # [name, seconds (None: random), samples per method]
    ["50us", 50e-6, 400],
    ["200us", 200e-6, 400],
    ["1ms", 1e-3, 300],
    ["2ms", 2e-3, 150],
    ["5ms", 5e-3, 120],
    ["10ms", 10e-3, 60],
    ["random", None, 300],
]

FULL: dict[str, Any] = {
    "budget_s": 220,  # the whole suite (the limit is 240 s)
    "latency": {"rounds": 4000, "block": 100, "warmup": 50, "soft_s": 30, "hard_s": 45},
    "numba_probe": {"rounds": 200, "await_timeout_s": 2.0, "hard_s": 25},
    "cpu": {"kernel_s": 2e-3, "seconds": 0.6, "settle_s": 0.2, "rounds": 3, "soft_s": 34, "hard_s": 50},
    "bubble": {
        "kernels": 2000,
        "kernel_s": 5e-6,
        "batch": 200,
        "repeats": 5,
        "gate_s": 0.02,
        "gate_min_s": 0.002,
        "soft_s": 25,
        "hard_s": 40,
    },
    "throughput": {
        # many short rounds: on the H200 host single rounds of one method spread by up to 1.7x; the verdict
        # is the median of ratios within a round (targets._throughput)
        "streams": 64, "kernel_s": 100e-6, "seconds": 0.3, "settle_s": 0.15, "rounds": 12, "soft_s": 50, "hard_s": 65,
    },
    "scale": {"waits": 10000, "streams": 1000, "soft_s": 15, "hard_s": 40},
    "c": {"rounds": 3000, "block": 100, "warmup": 50, "kernels": 2000, "batch": 200, "repeats": 5, "hard_s": 60},
    # per loop ~75 s on the H200 (one stream ~30 s, N streams ~25 s, history ~11 s, set-up): the section
    # stays under 4 minutes with two loops
    "lateness": {
        "one_stream": LATENESS_ONE_STREAM,
        "random_s": [50e-6, 3000e-6],
        "rounds": 6,
        "streams": [4, 16, 64],
        "window_s": 0.4,
        "multi_rounds": 2,
        "timed_every": 8,
        "history": {"stretch_s": 10.0, "kernel_s": 10e-3, "after_s": 100e-6, "samples": 300, "blocks": 6,
                    "methods": ["cudafd_default"]},
        "warmup": 5,
        "torch": True,
        "soft_s": 85,
        "hard_s": 125,
    },
}

QUICK: dict[str, Any] = {
    "budget_s": 90,
    "latency": {"rounds": 300, "block": 50, "warmup": 10, "soft_s": 4, "hard_s": 15},
    "numba_probe": {"rounds": 20, "await_timeout_s": 2.0, "hard_s": 15},
    "cpu": {"kernel_s": 2e-3, "seconds": 0.15, "settle_s": 0.05, "rounds": 1, "soft_s": 4, "hard_s": 15},
    "bubble": {
        "kernels": 400,
        "kernel_s": 5e-6,
        "batch": 200,
        "repeats": 2,
        "gate_s": 0.02,
        "gate_min_s": 0.002,
        "soft_s": 4,
        "hard_s": 15,
    },
    "throughput": {
        "streams": 64, "kernel_s": 100e-6, "seconds": 0.25, "settle_s": 0.1, "rounds": 1, "soft_s": 5, "hard_s": 15,
    },
    "scale": {"waits": 2000, "streams": 200, "soft_s": 5, "hard_s": 15},
    "c": {"rounds": 300, "block": 50, "warmup": 10, "kernels": 400, "batch": 200, "repeats": 2, "hard_s": 20},
    "lateness": {
        "one_stream": [[name, s, max(6, n // 30)] for name, s, n in LATENESS_ONE_STREAM],
        "random_s": [50e-6, 3000e-6],
        "rounds": 2,
        "streams": [4, 16, 64],
        "window_s": 0.06,
        "multi_rounds": 1,
        "timed_every": 8,
        "history": {"stretch_s": 0.3, "kernel_s": 10e-3, "after_s": 100e-6, "samples": 20, "blocks": 2,
                    "methods": ["cudafd_default"]},
        "warmup": 2,
        "torch": True,
        "soft_s": 20,
        # Other processes' kernels share the GPU by time slices: beside the
        # real-driver suite's workers a quick run can take over 60 s (alone, 20 s).
        "hard_s": 120,
    },
}


def _csv(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"{what}: choose from {', '.join(allowed)} (got {text!r})")
    return items


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m cudafd bench",
        description="Lateness (kernels of unknown length), await latency, idle CPU, stream bubble, "
        "throughput, scale and the C API of cudafd against the usual ways of awaiting a CUDA stream; "
        "tables here, JSON and PNGs in --out.",
    )
    p.add_argument("--quick", action="store_true", help="a short run (~15 s): a smoke test, not a measurement")
    p.add_argument(
        "--out",
        default=None,
        help="folder for bench.json, bench.txt, bench.png, lateness.png (default ./cudafd-bench-<UTC time>)",
    )
    default_loops = "asyncio,uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    p.add_argument(
        "--loops",
        default=default_loops,
        type=lambda s: _csv(s, ("asyncio", "uvloop"), "--loops"),
        help=f"event loops to measure under (default {default_loops})",
    )
    p.add_argument(
        "--only",
        "--sections",
        dest="only",
        default=",".join(SECTIONS),
        type=lambda s: _csv(s, SECTIONS, "--only"),
        help=f"sections to run (default all: {','.join(SECTIONS)})",
    )
    p.add_argument(
        "which",
        nargs="?",
        default=None,
        metavar="SECTIONS",
        type=lambda s: _csv(s, SECTIONS, "sections"),
        help="the same as --only: python -m cudafd bench lateness",
    )
    p.add_argument("--sim", action="store_true", help="run on the simulator even if a GPU is usable")
    p.add_argument("--streams", type=int, default=None, help="throughput: streams (default 64)")
    p.add_argument(
        "--kernel-us",
        type=float,
        default=None,
        help="throughput: kernel length, us (default 100; with kernels of a millisecond or more on more streams "
        "than hardware queues, it shows what holds a queue)",
    )
    p.add_argument("--rounds", type=int, default=None, help="latency: rounds per method (default 4000; quick 300)")
    return p


def error(message: str) -> NoReturn:
    """Exit with the usage and ``message``, as for a bad option (status 2)."""
    _parser().error(message)


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse the bench options (a leading "--" is dropped: ``python -m cudafd bench -- --quick``)."""
    if argv[:1] == ["--"]:
        argv = argv[1:]
    args = _parser().parse_args(argv)
    if args.which:
        args.only = args.which
    if args.streams is not None and args.streams < 1 or args.rounds is not None and args.rounds < 1:
        _parser().error("--streams and --rounds must be positive")
    if args.kernel_us is not None and not 0 < args.kernel_us <= 1e6:
        _parser().error("--kernel-us must be in (0, 1e6]")
    try:
        check_environment()  # read by every cudafd method's Notifier, in every child
    except ValueError as exc:
        _parser().error(str(exc))
    return args


def plan(args: argparse.Namespace) -> dict[str, Any]:
    """The parameters of every section for these options (a deep copy of FULL or QUICK, overridden)."""
    import copy

    out: dict[str, Any] = copy.deepcopy(QUICK if args.quick else FULL)
    if args.streams:
        out["throughput"]["streams"] = args.streams
    if args.rounds:
        out["latency"]["rounds"] = args.rounds
    if args.kernel_us:
        out["throughput"]["kernel_s"] = args.kernel_us * 1e-6
    if "lateness" in args.only:  # its own budget on top: one child per loop
        out["budget_s"] += len(args.loops) * out["lateness"]["hard_s"] + 30
    return out
