"""Plain-text tables for the report."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["table"]


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], left: int = 1) -> str:
    """A plain-text table: the first ``left`` columns left-aligned (text), the others right-aligned (numbers)."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        parts = [r[i].ljust(widths[i]) if i < left else r[i].rjust(widths[i]) for i in range(len(r))]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
