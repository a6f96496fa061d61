"""Draws spin_passes.png from spin_passes.txt:  python plot.py FOLDER (needs matplotlib)."""
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

d = sys.argv[1]
runs, cur = [], None
for line in open(f"{d}/spin_passes.txt"):
    m = re.match(r"(asyncio|uvloop): one stream", line)
    if m:
        cur = {"loop": m.group(1)}
        runs.append(cur)
    m = re.match(r"\s+(\d+)ms\s+(sleep0|spin)\s+([-\d.]+)\s+[-\d.]+\s+([-\d.]+)\s+\d+\s+([\d.]+)\s+([\d.]+)", line)
    if m:
        ms, way, p50, kern, pas, ask = m.groups()
        cur.setdefault(way, []).append((int(ms), float(p50), float(kern), float(pas), float(ask)))
fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
colors = {"sleep0": "tab:green", "spin": "tab:blue"}
for run in runs:
    style = "o-" if run["loop"] == "asyncio" else "s--"
    for way, rows in run.items():
        if way == "loop":
            continue
        ms = [r[0] for r in rows]
        a.plot(ms, [r[1] for r in rows], style, color=colors[way], alpha=.6, label=f"{way}, {run['loop']}")
        a.plot(ms, [r[2] for r in rows], ":", color=colors[way], alpha=.4)
        b.plot(ms, [r[3] for r in rows], style, color=colors[way], alpha=.6, label=f"{way}, {run['loop']}")
a.set(xlabel="kernel ms", ylabel="µs, minus the floor's p50",
      title="launch-to-resume p50 (solid) and the kernel's GPU length (dotted)")
b.set(xlabel="kernel ms", ylabel="µs between asks, p50", title="the loop's pass while waiting", ylim=(0, None))
for x in (a, b):
    handles, labels = x.get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    x.legend(seen.values(), seen.keys(), fontsize=8)
    x.grid(alpha=.3)
fig.tight_layout()
fig.savefig(f"{d}/spin_passes.png", dpi=90)
