"""Kernels launched through PyTorch: ``torch.cuda._sleep(cycles)``, calibrated to seconds.

``torch.cuda._sleep`` spins one thread for a number of GPU clock cycles on
the current stream. :func:`calibrate` times it with CUDA timing events (a
warm-up, then the median of a few trials), so a length in seconds maps to
cycles. Lateness does not depend on the calibration: every kernel's end is
read from its own timing event; only the workload's lengths do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["available", "calibrate", "launcher"]

CAL_CYCLES = 2_000_000  # ~1 ms at H200 clocks
CAL_TRIALS = 7


def available() -> tuple[Any, str | None]:
    """``(torch, None)`` when torch imports and has a usable CUDA device, else ``(None, why not)``."""
    try:
        import torch
    except Exception as exc:
        return None, f"torch is not importable ({type(exc).__name__}: {exc})"
    try:
        if not torch.cuda.is_available():
            return None, "torch has no usable CUDA device"
        if not hasattr(torch.cuda, "_sleep"):
            return None, "this torch has no torch.cuda._sleep"
    except Exception as exc:
        return None, f"torch.cuda failed ({type(exc).__name__}: {exc})"
    return torch, None


def calibrate(torch: Any, stream: Any) -> dict:
    """GPU cycles per second of ``torch.cuda._sleep`` on ``stream``: ``{"cycles_per_s", "trials_ms"}``."""
    trials = []
    for i in range(CAL_TRIALS + 1):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            a.record(stream)
            torch.cuda._sleep(CAL_CYCLES)
            b.record(stream)
        b.synchronize()
        if i:  # the first one loads the kernel
            trials.append(a.elapsed_time(b))
    ms = sorted(trials)[len(trials) // 2]
    if ms <= 0:
        raise RuntimeError(f"torch.cuda._sleep({CAL_CYCLES}) took {ms} ms: cannot calibrate")
    return {"cycles_per_s": CAL_CYCLES / (ms / 1e3), "trials_ms": [round(x, 4) for x in trials]}


def launcher(torch: Any, stream: Any, cycles_per_s: float) -> Callable[[float], None]:
    """``launch(seconds)``: ``torch.cuda._sleep`` of that length on ``stream`` (made the current stream)."""
    set_stream, sleep = torch.cuda.set_stream, torch.cuda._sleep

    def launch(seconds: float) -> None:
        set_stream(stream)
        sleep(max(1, int(seconds * cycles_per_s)))

    return launch
