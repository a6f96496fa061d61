"""lateness.png: one Pareto panel per lateness workload, CPU cores against p50 lateness, every method a point.

Each method has a colour (cudafd's are large, edged in black, labelled in
bold); each loop a marker. A line (dashed for asyncio, dash-dotted for
uvloop) joins a loop's Pareto front (the points no other point of that loop
beats on both counts, :mod:`.pareto`);
on one-stream panels the dotted line is the spin floor's p50. Lower left is
better. Needs matplotlib (Agg); ``write`` returns why not, or None.
"""

from __future__ import annotations

import math

from .pareto import front
from .targets_lateness import points
from .waiters import FLOOR, LABELS

__all__ = ["write"]

MARKERS = {"asyncio": "o", "uvloop": "^"}
FRONTS = {"asyncio": "--", "uvloop": "-."}


def _title(name: str, w: dict) -> str:
    n = w.get("streams", 1)
    return f"one stream, {w.get('kernel')} kernels" if n == 1 else f"{n} streams, {w.get('kernel')}"


def _panel(ax, name: str, per_loop: dict, colours: dict) -> None:
    first = True
    for loop, res in per_loop.items():
        w = res.get("workloads", {}).get(name)
        if not w:
            continue
        pts = {k: (c, max(p, 0.1)) for k, (c, p) in points(res, name).items()}
        marker = MARKERS.get(loop, "s")
        for k, (c, p) in pts.items():
            ours = k.startswith("cudafd")
            ax.scatter([c], [p], s=(120 if k == "cudafd_default" else 70) if ours else 30, marker=marker,
                       color=colours[k], edgecolors="black" if ours else "none",
                       linewidths=2.0 if k == "cudafd_default" else 0.8, zorder=3 if ours else 2)
            if first:
                ax.annotate(LABELS[k], (c, p), textcoords="offset points", xytext=(4, 3), fontsize=6,
                            fontweight="bold" if ours else "normal")
        line = front(pts)
        if len(line) > 1:
            ax.plot([pts[k][0] for k in line], [pts[k][1] for k in line], ls=FRONTS.get(loop, "--"), lw=0.8,
                    color="grey", zorder=1)
        floor = (w.get("methods", {}).get(FLOOR) or {}).get("p50")
        if floor and first:
            ax.axhline(max(floor, 0.1), ls=":", lw=0.8, color="grey")
        first = False
    ax.set_yscale("log")
    ax.set_xlabel("process CPU, cores", fontsize=7)
    ax.set_ylabel("p50 lateness, µs (log)", fontsize=7)
    ax.tick_params(labelsize=7)
    ax.grid(True, which="both", alpha=0.25)
    w = next((r["workloads"][name] for r in per_loop.values() if name in r.get("workloads", {})), {})
    ax.set_title(_title(name, w), fontsize=8)


def write(doc: dict, path: str) -> str | None:
    """Draw the lateness section of ``doc`` (the JSON document) into ``path``; None, or why it was skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except Exception as exc:
        return f"matplotlib is not importable ({type(exc).__name__}: {exc})"
    per_loop = {loop: r for loop, r in (doc["sections"].get("lateness") or {}).items() if r.get("workloads")}
    names: list[str] = []
    keys: list[str] = []
    for r in per_loop.values():
        names += [n for n in r["workloads"] if n != "history" and n not in names]
        for n in r["workloads"]:
            keys += [k for k in r["workloads"][n].get("methods", {}) if k != FLOOR and k not in keys]
    if not names:
        return "no lateness figures"
    cmap = plt.get_cmap("tab20")
    colours = {k: cmap(i % 20) for i, k in enumerate(keys)}
    cols = 3
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(15, 4.0 * rows + 0.8), squeeze=False)
    flat = [a for row in axes for a in row]
    for ax, name in zip(flat, names):
        _panel(ax, name, per_loop, colours)
    for ax in flat[len(names):]:
        ax.axis("off")
    handles = [Line2D([], [], ls="", marker="o", color=colours[k], markeredgecolor="black" if k.startswith("cudafd")
                      else colours[k], label=LABELS[k]) for k in keys]
    handles += [Line2D([], [], ls=FRONTS.get(loop, "--"), marker=MARKERS.get(loop, "s"), color="grey",
                       label=f"{loop} (its front)") for loop in per_loop]
    fig.legend(handles=handles, loc="lower center", ncol=min(8, len(handles)), fontsize=7, frameon=False)
    env = doc["environment"]
    title = (f"cudafd lateness (resume minus kernel end) against CPU, per workload; lower left is better; "
             f"{env.get('device')}; {doc['date_utc']}")
    if env.get("simulator"):
        title += "\nSIMULATOR: figures are not meaningful (kernel ends estimated)"
    fig.suptitle(title, fontsize=10, color="red" if env.get("simulator") else "black")
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None
