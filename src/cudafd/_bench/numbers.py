"""Percentiles and summaries of latency samples (no numpy)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["CDF_POINTS", "median", "paired", "quantile", "summary"]

CDF_POINTS = 101  # quantiles 0, 1, ..., 100 % kept in the JSON for the plot


def quantile(sorted_values: list[float], q: float) -> float:
    """The q-quantile (0..1) of sorted values, linearly interpolated; NaN when empty."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    pos = q * (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_values[lo] * (1 - frac) + sorted_values[hi] * frac


def summary(samples: list[float], digits: int = 2) -> dict[str, Any]:
    """n, mean, min, p50, p90, p99, p99.9, max and a 101-point CDF (quantiles 0..100 %) of ``samples``."""
    xs = sorted(samples)
    if not xs:
        return {"n": 0}

    def r(x: float) -> float:
        return round(x, digits)

    return {
        "n": len(xs),
        "mean": r(sum(xs) / len(xs)),
        "min": r(xs[0]),
        "p50": r(quantile(xs, 0.50)),
        "p90": r(quantile(xs, 0.90)),
        "p99": r(quantile(xs, 0.99)),
        "p999": r(quantile(xs, 0.999)),
        "max": r(xs[-1]),
        "cdf": [r(quantile(xs, i / (CDF_POINTS - 1))) for i in range(CDF_POINTS)],
    }


def median(values: list[float]) -> float:
    return quantile(sorted(values), 0.5)


def paired(a: list[float], b: list[float]) -> tuple[float, float, float, int] | None:
    """How ``a`` compares with ``b`` round by round: the median, lowest and
    highest of a[i] / b[i] over the rounds both have (the methods of a section
    take turns within each round, so a slow spell of a shared machine divides
    out), and how many rounds that is. None when they share no round with
    b[i] > 0."""
    ratios = sorted(x / y for x, y in zip(a, b) if y > 0)
    if not ratios:
        return None
    return quantile(ratios, 0.5), ratios[0], ratios[-1], len(ratios)
