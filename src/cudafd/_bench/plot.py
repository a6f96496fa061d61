"""bench.png: latency distributions per method (a panel per loop), then CPU and throughput per method.

cudafd's mechanisms are drawn in blues (thick lines, blue bars), the
baselines in warm colours or greys, the bounds (limits no way of waiting
passes) hatched. Each target of docs/performance.md is a green dashed line:
on a latency panel the p50 bound (a multiple of the floor's p50), on the CPU
panel the fraction of the executor's cores allowed, on the throughput panel
sleep(0) polling's rate to reach (the bars' targets from the first loop). The bars are horizontal, a bar per loop
(darker for the first loop), so that the method names read left to right;
every legend sits outside the data.

Needs matplotlib (Agg backend, no display); without it, ``write`` returns
the reason and the suite notes that the plot was skipped.
"""

from __future__ import annotations

from . import targets
from .methods import BOUNDS, LABELS
from .numbers import CDF_POINTS

__all__ = ["write"]

TARGET = "#2ca02c"
OURS = {"cudafd_event": "#08306b", "cudafd_hostfunc": "#6a51a3", "cudafd_spin": "#17becf", "cudafd_poll": "#2171b5"}
THEIRS = {
    "floor": "#000000",
    "executor_blocking": "#ff7f0e",
    "executor_spinning": "#fdae6b",
    "sleep0": "#d62728",
    "sleep1ms": "#ff9896",
    "numba": "#8c564b",
}
SHADES = ({"ours": "#2171b5", "theirs": "#7f7f7f"}, {"ours": "#9ecae1", "theirs": "#c7c7c7"})


def _colour(key: str) -> str:
    return OURS.get(key) or THEIRS.get(key) or "#7f7f7f"


def _keys(per_loop: dict) -> list[str]:
    keys: list[str] = []
    for res in per_loop.values():
        keys += [k for k in res.get("methods", {}) if k not in keys]
    return keys


def _cdf(ax, loop: str, res: dict) -> None:
    qs = [i / (CDF_POINTS - 1) * 100 for i in range(CDF_POINTS)]
    methods = res.get("methods", {})
    for k, m in methods.items():
        if not m.get("cdf"):
            continue
        ours = k.startswith("cudafd")
        ax.plot(m["cdf"], qs, label=f"{LABELS.get(k, k)} (p50 {m['p50']:.1f})", color=_colour(k),
                lw=2.6 if ours else 1.2, ls=":" if k == "floor" else "-", zorder=3 if ours else 2)
    floor = (methods.get("floor") or {}).get("p50")
    limit = targets.LATENCY_LIMIT.get(loop)
    if floor and limit:
        ax.axvline(floor * limit, ls="--", lw=1.3, color=TARGET, zorder=1)
        ax.annotate(f"target p50 <= {limit}x floor", (floor * limit, 2), xytext=(4, 0), textcoords="offset points",
                    fontsize=7, color=TARGET)
    ax.axhline(50, lw=0.6, color="grey", alpha=0.5, zorder=0)
    ax.set_xscale("log")
    ax.set_xlabel("await latency, µs (log)", fontsize=8)
    ax.set_ylabel("percentile", fontsize=8)
    ax.tick_params(which="both", labelsize=7)
    ax.set_title(f"Tiny kernel + await, {loop}: latency distribution", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=2, frameon=False)


def _bars(ax, per_loop: dict, field: str, title: str, xlabel: str, target: tuple[float, str] | None) -> None:
    keys = _keys(per_loop)
    loops = list(per_loop)
    height = 0.8 / max(1, len(loops))
    for i, res in enumerate(per_loop.values()):
        shade = SHADES[min(i, len(SHADES) - 1)]
        for j, k in enumerate(keys):
            value = (res.get("methods", {}).get(k) or {}).get(field)
            if value is None:
                continue
            ours = k.startswith("cudafd")
            ax.barh(j + i * height, value, height, color=shade["ours" if ours else "theirs"],
                    hatch="//" if k in BOUNDS else None, edgecolor="white" if k not in BOUNDS else "black",
                    linewidth=0.4)
    ax.set_yticks([j + height * (len(loops) - 1) / 2 for j in range(len(keys))])
    ax.set_yticklabels([LABELS.get(k, k) for k in keys], fontsize=7)
    for tick, k in zip(ax.get_yticklabels(), keys):
        if k.startswith("cudafd"):
            tick.set_fontweight("bold")
            tick.set_color(SHADES[0]["ours"])
    ax.invert_yaxis()
    if target is not None:
        ax.axvline(target[0], ls="--", lw=1.3, color=TARGET, zorder=3)
        ax.annotate(target[1], (target[0], 1.0), xycoords=("data", "axes fraction"), xytext=(3, -10),
                    textcoords="offset points", fontsize=7, color=TARGET)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(True, axis="x", alpha=0.3)
    _bar_legend(ax, loops)


def _bar_legend(ax, loops: list[str]) -> None:
    from matplotlib.patches import Patch

    handles = []
    for i, loop in enumerate(loops):
        shade = SHADES[min(i, len(SHADES) - 1)]
        handles += [Patch(color=shade["ours"], label=f"cudafd, {loop}"), Patch(color=shade["theirs"], label=f"baseline, {loop}")]
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="bound (no way of waiting passes it)"))
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, frameon=False)


def _first(per_loop: dict, key: str, field: str) -> float | None:
    for res in per_loop.values():
        value = (res.get("methods", {}).get(key) or {}).get(field)
        if value is not None:
            return value
    return None


def write(doc: dict, path: str) -> str | None:
    """Draw the figures of ``doc`` (the JSON document) into ``path``; None, or why it was skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        return f"matplotlib is not importable ({type(exc).__name__}: {exc})"
    s = doc["sections"]
    latency = {loop: r for loop, r in (s.get("latency") or {}).items() if r.get("methods")}
    bars = [name for name in ("cpu", "throughput") if s.get(name)]
    if not latency and not bars:
        return "nothing to plot (no latency, CPU or throughput figures)"
    cols = max(len(latency), len(bars), 1)
    rows = bool(latency) + bool(bars)
    fig = plt.figure(figsize=(7.5 * cols, 6.2 * rows + 0.6))
    grid = fig.add_gridspec(rows, cols)
    for i, (loop, res) in enumerate(latency.items()):
        _cdf(fig.add_subplot(grid[0, i]), loop, res)
    row = int(bool(latency))
    span = cols // max(1, len(bars))
    for i, name in enumerate(bars):
        ax = fig.add_subplot(grid[row, i * span:(i + 1) * span])
        if name == "cpu":
            executor = _first(s["cpu"], "executor_blocking", "cores")
            target = None if executor is None else (targets.CPU_LIMIT * executor, f"target <= {targets.CPU_LIMIT}x the executor's")
            _bars(ax, s["cpu"], "cores", "CPU while awaiting 2 ms kernels back to back", "process CPU, cores", target)
        else:
            t = next(iter(s["throughput"].values()))
            base = _first(s["throughput"], targets.THROUGHPUT_BASE, "awaits_per_s")
            target = None if base is None else (targets.THROUGHPUT_RATIO * base, "target >= sleep(0) polling's")
            _bars(ax, s["throughput"], "awaits_per_s",
                  f"Throughput, {t.get('streams')} streams x {t.get('kernel_us', 0):.0f} µs kernels", "awaits/s", target)
    title = f"cudafd bench — {doc['environment'].get('device')} — {doc['date_utc']}"
    if doc["environment"].get("simulator"):
        title += "\nSIMULATOR: figures are not meaningful"
    fig.suptitle(title, fontsize=11, color="red" if doc["environment"].get("simulator") else "black")
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None
