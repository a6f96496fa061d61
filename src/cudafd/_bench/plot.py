"""The PNG: latency distributions per method (one panel per loop), CPU and throughput per method.

Needs matplotlib (Agg backend, no display); without it, ``write`` returns
the reason and the suite notes that the plot was skipped.
"""

from __future__ import annotations

from .methods import LABELS
from .numbers import CDF_POINTS

__all__ = ["write"]


def _bars(ax, per_loop: dict, field: str, title: str, ylabel: str) -> None:
    keys: list[str] = []
    for res in per_loop.values():
        keys += [k for k in res.get("methods", {}) if k not in keys]
    width = 0.8 / max(1, len(per_loop))
    for i, (loop, res) in enumerate(per_loop.items()):
        values = [res.get("methods", {}).get(k, {}).get(field, 0) or 0 for k in keys]
        ax.bar([x + i * width for x in range(len(keys))], values, width, label=loop)
    ax.set_xticks([x + width * (len(per_loop) - 1) / 2 for x in range(len(keys))])
    ax.set_xticklabels([LABELS.get(k, k) for k in keys], rotation=30, ha="right", fontsize=7)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)


def write(doc: dict, path: str) -> str | None:
    """Draw the figures of ``doc`` (the JSON document) into ``path``; None, or why it was skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        return f"matplotlib is not importable ({type(exc).__name__}: {exc})"
    s = doc["sections"]
    latency = s.get("latency") or {}
    panels = len(latency) + bool(s.get("cpu")) + bool(s.get("throughput"))
    if panels == 0:
        return "nothing to plot (no latency, CPU or throughput figures)"
    fig, axes = plt.subplots(panels, 1, figsize=(10, 4.2 * panels), squeeze=False)
    axes = [a[0] for a in axes]
    qs = [i / (CDF_POINTS - 1) * 100 for i in range(CDF_POINTS)]
    for ax, (loop, res) in zip(axes, latency.items()):
        for k, m in res.get("methods", {}).items():
            if m.get("cdf"):
                ax.plot(
                    m["cdf"],
                    qs,
                    label=f"{LABELS.get(k, k)} (p50 {m['p50']:.1f})",
                    lw=2.2 if k.startswith("cudafd") else 1.2,
                )
        ax.set_xscale("log")
        ax.set_xlabel("await latency, µs (log)")
        ax.set_ylabel("percentile")
        ax.set_title(f"Tiny kernel + await, {loop}: latency distribution per method", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    rest = axes[len(latency) :]
    if s.get("cpu"):
        _bars(rest.pop(0), s["cpu"], "cores", "CPU while awaiting 2 ms kernels", "cores")
    if s.get("throughput"):
        t = next(iter(s["throughput"].values()))
        _bars(
            rest.pop(0),
            s["throughput"],
            "awaits_per_s",
            f"Throughput, {t.get('streams')} streams x {t.get('kernel_us', 0):.0f} µs kernels",
            "awaits/s",
        )
    title = f"cudafd bench — {doc['environment'].get('device')} — {doc['date_utc']}"
    if doc["environment"].get("simulator"):
        title += "\nSIMULATOR: figures are not meaningful"
    fig.suptitle(title, fontsize=10, color="red" if doc["environment"].get("simulator") else "black")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
