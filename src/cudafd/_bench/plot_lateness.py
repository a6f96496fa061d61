"""lateness.png: one Pareto panel per lateness workload, CPU cores against p50 lateness, every method a point.

cudafd's ways are drawn in cool colours (blues, a purple, a green), edged in black, the default
largest and labelled; the baselines in warm colours, smaller. Each loop has a
marker (circle asyncio, triangle uvloop), and a grey line joins a loop's
Pareto front (the points no other point of that loop beats on both counts,
:mod:`.pareto`). Where the workload has a target (docs/performance.md), it
is drawn in green: a horizontal line for a p50 bound (one-stream bounds are
net of the spin floor, so the line is the floor's p50 plus the bound), a
vertical one for a CPU bound (an absolute one, or a fraction of the
executor's, from the first loop). The spin floor's p50 is the dotted line.
The legend fills the cells the panels leave free. Lower left is better.
Needs matplotlib (Agg); ``write`` returns why not, or None.
"""

from __future__ import annotations

import math

from . import targets_lateness as tl
from .pareto import front
from .targets_lateness import points
from .waiters import BASELINES, BOUNDS, FLOOR, HANDOFF, LABELS

__all__ = ["write", "target_lines"]

MARKERS = {"asyncio": "o", "uvloop": "^"}
FRONTS = {"asyncio": "--", "uvloop": "-."}
COLS = 4
TARGET = "#2ca02c"
OURS = {  # cool colours for cudafd's ways
    "cudafd_default": "#08306b",
    "cudafd_event": "#2171b5",
    "cudafd_hostfunc": "#6a51a3",
    "cudafd_spin": "#17becf",
    "cudafd_poll": "#31a354",
    "cudafd_ml1ms": "#9ecae1",
}
THEIRS = {  # warm colours for the baselines
    "sleep0": "#d62728",
    "sleep1ms": "#ff9896",
    "executor": "#ff7f0e",
    "thread20us": "#8c564b",
}
OTHER = "#7f7f7f"


def _colour(key: str) -> str:
    return OURS.get(key) or THEIRS.get(key) or OTHER


def _title(name: str, w: dict) -> str:
    n = w.get("streams", 1)
    return f"one stream, {w.get('kernel')} kernels" if n == 1 else f"{n} streams, {w.get('kernel')}"


def target_lines(name: str, res: dict) -> list[tuple[str, float, str]]:
    """The targets of workload ``name`` as lines: ("p50" or "cores", value, label), from one loop's results."""
    methods = (res.get("workloads", {}).get(name) or {}).get("methods", {})
    floor = (methods.get(FLOOR) or {}).get("p50")
    out: list[tuple[str, float, str]] = []
    if name in ("1x50us", "1x200us", "1x1ms", "1xrandom") and floor is not None:
        out.append(("p50", floor + tl.ONE_STREAM_P50_US, f"target p50 (floor + {tl.ONE_STREAM_P50_US:.0f} µs)"))
    elif name == "1x5ms" and floor is not None:
        out.append(("p50", floor + tl.LONG_P50_US, f"target p50 (floor + {tl.LONG_P50_US:.0f} µs)"))
    elif name == "4x_random":
        out.append(("p50", tl.FOUR_P50_US, f"target p50 ({tl.FOUR_P50_US:.0f} µs)"))
    elif name == "64x_random":
        out.append(("cores", tl.MANY_CORES, f"target ({tl.MANY_CORES} cores)"))
        s0 = (methods.get("sleep0") or {}).get("p50")
        if s0 is not None:
            out.append(("p50", s0, "target p50 (sleep(0)'s)"))
    if name in ("1x1ms", "1x2ms"):
        ex = (methods.get("executor") or {}).get("cores")
        if ex is not None:
            out.append(("cores", tl.CPU_VS_EXECUTOR * ex, f"target ({tl.CPU_VS_EXECUTOR}x executor's CPU)"))
    elif name == "1x10ms":
        out.append(("cores", tl.CPU_10MS, f"target ({tl.CPU_10MS} cores)"))
    return out


def _panel(ax, name: str, per_loop: dict) -> None:
    first = True
    for loop, res in per_loop.items():
        w = res.get("workloads", {}).get(name)
        if not w:
            continue
        pts = {k: (c, max(p, 0.1)) for k, (c, p) in points(res, name).items()}
        marker = MARKERS.get(loop, "s")
        for k, (c, p) in pts.items():
            ours = k.startswith("cudafd")
            default = k == "cudafd_default"
            ax.scatter([c], [p], s=170 if default else 60 if ours else 40, marker=marker, color=_colour(k),
                       edgecolors="black" if ours else "white", linewidths=2.0 if default else 0.7,
                       zorder=4 if default else 3 if ours else 2)
            if default and first:
                ax.annotate("cudafd", (c, p), textcoords="offset points", xytext=(9, 6), fontsize=8,
                            fontweight="bold", color=OURS[k], zorder=5)
        line = front(pts)
        if len(line) > 1:
            ax.plot([pts[k][0] for k in line], [pts[k][1] for k in line], ls=FRONTS.get(loop, "--"), lw=0.8,
                    color="grey", zorder=1)
        floor = (w.get("methods", {}).get(FLOOR) or {}).get("p50")
        if floor and first:
            ax.axhline(max(floor, 0.1), ls=":", lw=0.9, color="grey", zorder=1)
        bound = (w.get("methods", {}).get(HANDOFF) or {}).get("p50")
        if bound and first:  # the least a loop asleep until told can be late (waiters.BOUNDS)
            ax.axhline(max(bound, 0.1), ls="-.", lw=0.9, color="grey", zorder=1)
            ax.annotate(LABELS[HANDOFF], (0.0, max(bound, 0.1)), xycoords=("axes fraction", "data"),
                        xytext=(3, 3), textcoords="offset points", fontsize=6.5, color="grey")
        if first:
            for kind, value, label in target_lines(name, res):
                if kind == "p50":
                    ax.axhline(max(value, 0.1), ls="--", lw=1.2, color=TARGET, zorder=1)
                    ax.annotate(label, (1.0, max(value, 0.1)), xycoords=("axes fraction", "data"),
                                xytext=(-3, 3), textcoords="offset points", ha="right", fontsize=6.5, color=TARGET)
                else:
                    ax.axvline(value, ls="--", lw=1.2, color=TARGET, zorder=1)
                    ax.annotate(label, (value, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -10),
                                textcoords="offset points", fontsize=6.5, color=TARGET)
        first = False
    ax.set_yscale("log")
    ax.set_xlim(left=0)
    ax.set_xlabel("process CPU, cores", fontsize=7)
    ax.set_ylabel("p50 lateness, µs (log)", fontsize=7)
    ax.tick_params(which="both", labelsize=7)
    ax.grid(True, which="major", alpha=0.3)
    w = next((r["workloads"][name] for r in per_loop.values() if name in r.get("workloads", {})), {})
    ax.set_title(_title(name, w), fontsize=9)


def _legend(ax, keys: list[str], loops: list[str]) -> None:
    from matplotlib.lines import Line2D

    ax.axis("off")
    handles = []
    for k in keys:
        ours = k.startswith("cudafd")
        handles.append(Line2D([], [], ls="", marker="o", markersize=11 if k == "cudafd_default" else 7,
                              color=_colour(k), markeredgecolor="black" if ours else "white",
                              markeredgewidth=2.0 if k == "cudafd_default" else 0.7, label=LABELS[k]))
    handles += [Line2D([], [], ls=FRONTS.get(loop, "--"), marker=MARKERS.get(loop, "s"), color="grey",
                       label=f"{loop}: its marker, its Pareto front") for loop in loops]
    handles += [Line2D([], [], ls="--", color=TARGET, lw=1.2, label="target (docs/performance.md)"),
                Line2D([], [], ls=":", color="grey", label="spin floor p50 (one stream)")]
    ax.legend(handles=handles, loc="center", ncol=2, fontsize=8, frameon=False,
              title="lower left is better", title_fontsize=9)


def write(doc: dict, path: str) -> str | None:
    """Draw the lateness section of ``doc`` (the JSON document) into ``path``; None, or why it was skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        return f"matplotlib is not importable ({type(exc).__name__}: {exc})"
    per_loop = {loop: r for loop, r in (doc["sections"].get("lateness") or {}).items() if r.get("workloads")}
    names: list[str] = []
    keys: list[str] = []
    for r in per_loop.values():
        names += [n for n in r["workloads"] if n != "history" and n not in names]
        for n in r["workloads"]:
            keys += [k for k in r["workloads"][n].get("methods", {}) if k != FLOOR and k not in BOUNDS and k not in keys]
    if not names:
        return "no lateness figures"
    keys.sort(key=lambda k: (not k.startswith("cudafd"), k in BASELINES and BASELINES.index(k)))
    rows = math.ceil((len(names) + 2) / COLS)  # two free cells at least: the legend's
    fig = plt.figure(figsize=(4.1 * COLS, 3.5 * rows + 0.7))
    grid = fig.add_gridspec(rows, COLS)
    for i, name in enumerate(names):
        _panel(fig.add_subplot(grid[i // COLS, i % COLS]), name, per_loop)
    last = len(names)
    if last % COLS > COLS - 2:  # the last row has one free cell: the legend takes the whole next row
        last = (last // COLS + 1) * COLS
    for i in range(len(names), last):
        fig.add_subplot(grid[i // COLS, i % COLS]).axis("off")
    _legend(fig.add_subplot(grid[last // COLS, last % COLS:]), keys, list(per_loop))
    env = doc["environment"]
    title = (f"Lateness (resume minus kernel end, p50) against process CPU, per workload; "
             f"{env.get('device')}; {doc['date_utc']}")
    if env.get("simulator"):
        title += "\nSIMULATOR: figures are not meaningful (kernel ends estimated)"
    fig.suptitle(title, fontsize=11, color="red" if env.get("simulator") else "black")
    fig.tight_layout(rect=(0, 0, 1, 0.97 if not env.get("simulator") else 0.95))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None
