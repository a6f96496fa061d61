"""Which ways of waiting are beaten on both counts: lateness (p50) and CPU (cores).

A point is ``(cores, p50)``. ``a`` dominates ``b`` when it is no worse on
either count and better on one; ``a`` beats ``b`` outright when it is better
on both (the Pareto target: no baseline both earlier and cheaper than the
default).
"""

from __future__ import annotations

__all__ = ["beaten_by", "dominated", "front"]

Point = tuple[float, float]  # (cores, p50 µs)


def _dominates(a: Point, b: Point) -> bool:
    return a[0] <= b[0] and a[1] <= b[1] and (a[0] < b[0] or a[1] < b[1])


def dominated(points: dict[str, Point]) -> set[str]:
    """The keys whose point another point dominates."""
    return {k for k, p in points.items() if any(_dominates(q, p) for j, q in points.items() if j != k)}


def front(points: dict[str, Point]) -> list[str]:
    """The keys no other point dominates, cheapest first (ties in their order in ``points``)."""
    out = dominated(points)
    order = {k: i for i, k in enumerate(points)}
    return sorted((k for k in points if k not in out), key=lambda k: (points[k][0], points[k][1], order[k]))


def beaten_by(points: dict[str, Point], key: str, among: list[str]) -> list[str]:
    """The keys of ``among`` both cheaper and earlier than ``key`` (strictly on both counts)."""
    if key not in points:
        return []
    c, p = points[key]
    return [k for k in among if k != key and k in points and points[k][0] < c and points[k][1] < p]
