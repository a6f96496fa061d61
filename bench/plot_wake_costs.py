"""wake_costs.png from the outputs of c/nap_cost.c and event_seen.py.

    python bench/plot_wake_costs.py NAP_COST_TXT EVENT_SEEN_TXT OUT_PNG

Left: CPU per nap against the nap's length, one line per way of sleeping.
Right: when each thing asked first reads done, minus the timing event, p50
with p99 as a bar, per kernel length. Needs matplotlib.
"""

from __future__ import annotations

import re
import sys


def _rows(path: str, pattern: str) -> list[tuple[str, list[str]]]:
    """(first column, the numbers of the rest) of every line starting with ``NNNus``."""
    out = []
    for line in open(path, encoding="utf-8"):
        m = re.match(r"\s*(\d+)us\s+(.*)", line)
        if m:
            out.append((m.group(1), re.findall(pattern, m.group(2))))
    return out


def main() -> None:
    nap_txt, seen_txt, png = sys.argv[1:4]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ways = ["timerfd+poll", "nanosleep/1us", "nanosleep/50us", "ppoll/1us"]
    naps = _rows(nap_txt, r"([\d.]+) / [\d.]+")
    seen = _rows(seen_txt, r"([\d.]+)/([\d.]+)")
    asked = ["plain", "late", "stream", "spin"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    lengths = [int(n) for n, _ in naps]
    for i, way in enumerate(ways):
        a.plot(lengths, [float(v[i]) for _, v in naps], marker="o", label=way)
    a.set_xscale("log")
    a.set_xlabel("nap length (us)")
    a.set_ylabel("CPU per nap (us)")
    a.set_ylim(bottom=0)
    a.set_title("a thread's timed nap and wake")
    a.legend(fontsize=8)
    kernels = [n for n, _ in seen]
    width = 0.2
    for i, what in enumerate(asked):
        p50 = [float(v[i][0]) for _, v in seen]
        p99 = [float(v[i][1]) for _, v in seen]
        xs = [k + (i - 1.5) * width for k in range(len(kernels))]
        b.bar(xs, p50, width, label=what)
        b.errorbar(xs, p50, yerr=[[0] * len(p50), [h - m for h, m in zip(p99, p50)]], fmt="none", ecolor="k",
                   capsize=2, lw=0.8)
    b.set_xticks(range(len(kernels)), [f"{k} us" for k in kernels])
    b.set_xlabel("kernel length")
    b.set_ylabel("first seen done minus the timing event (us)")
    b.set_title("when the end is seen, by what is asked (p50, bar to p99)")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
