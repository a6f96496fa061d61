"""wake_affinity.png from wake_floor.txt: p50 (and p99 as a bar) per way of waking, per sleep length.

    python plot.py   (in this folder; needs matplotlib)
"""
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

lines = open("wake_floor.txt").read().splitlines()
names = lines[1].split()[1:]
rows = [(float(m.group(1)), re.findall(r"([\d.]+)/([\d.]+)", m.group(2)))
        for m in (re.match(r"\s*(\d+)us\s+(.*)", ln) for ln in lines[2:]) if m]
fig, ax = plt.subplots(figsize=(8, 4.5))
for i, name in enumerate(names):
    xs = [s for s, _ in rows]
    p50 = [float(v[i][0]) for _, v in rows]
    p99 = [float(v[i][1]) for _, v in rows]
    ax.errorbar([x * (1 + 0.04 * (i - 2.5)) for x in xs], p50, yerr=[[0] * len(p50), [b - a for a, b in zip(p50, p99)]],
                marker="o", capsize=2, label=name)
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("slept (µs)")
ax.set_ylabel("woken late by (µs): p50, bar to p99")
ax.set_title("H200 host, no GPU: a thread in epoll_wait, by who wakes it")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig("wake_affinity.png", dpi=110)
