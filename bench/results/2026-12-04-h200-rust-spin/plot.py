"""Draws rust_spin.png from al/ and ms/:  python plot.py FOLDER (needs matplotlib)."""
import re, glob, sys
import matplotlib; matplotlib.use("Agg")
import matplotlib.pyplot as plt
d = sys.argv[1]
fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
for v, c in (("old", "tab:red"), ("new", "tab:blue")):
    for i, f in enumerate(sorted(glob.glob(f"{d}/al/{v}-*.txt"))):
        L, P = [], []
        for line in open(f):
            m = re.match(r"(\d+) µs kernels", line)
            if m: cur = int(m.group(1))
            m = re.match(r"\s+spin\s+p50\s+([-\d.]+)", line)
            if m: L.append(cur); P.append(float(m.group(1)))
        a.plot(L, P, "o-", color=c, alpha=.7, label=(f"spin, crate {v}" if i == 0 else None))
    for i, f in enumerate(sorted(glob.glob(f"{d}/ms/current-{v}-*.txt"))):
        N, P = [], []
        for line in open(f):
            m = re.match(r"(\d+) streams", line)
            if m: cur = int(m.group(1))
            m = re.match(r"\s+spin\s+p50\s+([-\d.]+)", line)
            if m: N.append(cur); P.append(float(m.group(1)))
        b.plot(N, P, "o-", color=c, alpha=.7, label=(f"spin, crate {v}" if i == 0 else None))
a.set(xscale="log", xlabel="kernel µs (back to back, one task)", ylabel="p50 µs after a stream_done loop", title="await_latency, current-thread")
b.set(xscale="log", xlabel="streams (tasks), kernels 50-3000 µs", ylabel="p50 lateness µs", title="many_streams, current-thread")
for x in (a, b): x.legend(); x.grid(alpha=.3)
fig.tight_layout(); fig.savefig(f"{d}/rust_spin.png", dpi=90)
