"""Draws rust_spin.png from al/ and ms/:  python plot.py FOLDER (needs matplotlib)."""
import glob
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def spin_p50(path, heading):
    """(x, spin's p50) per section of one output file; x from the heading's first number."""
    xs, ps, cur = [], [], None
    for line in open(path):
        m = re.match(heading, line)
        if m:
            cur = int(m.group(1))
        m = re.match(r"\s+spin\s+p50\s+([-\d.]+)", line)
        if m:
            xs.append(cur)
            ps.append(float(m.group(1)))
    return xs, ps


d = sys.argv[1]
fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
for v, c in (("old", "tab:red"), ("new", "tab:blue")):
    for ax, pattern, heading in ((a, f"{d}/al/{v}-*.txt", r"(\d+) µs kernels"),
                                 (b, f"{d}/ms/current-{v}-*.txt", r"(\d+) streams")):
        for i, f in enumerate(sorted(glob.glob(pattern))):
            ax.plot(*spin_p50(f, heading), "o-", color=c, alpha=.7, label=(f"spin, crate {v}" if i == 0 else None))
a.set(xscale="log", xlabel="kernel µs (back to back, one task)", ylabel="p50 µs after a stream_done loop",
      title="await_latency, current-thread")
b.set(xscale="log", xlabel="streams (tasks), kernels 50-3000 µs", ylabel="p50 lateness µs",
      title="many_streams, current-thread")
for x in (a, b):
    x.legend()
    x.grid(alpha=.3)
fig.tight_layout()
fig.savefig(f"{d}/rust_spin.png", dpi=90)
