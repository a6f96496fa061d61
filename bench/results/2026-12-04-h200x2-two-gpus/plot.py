"""two_gpus.png from the two_gpus.txt of first/, second/ and third/: p50 (bar to p99) per device and mode.

    python plot.py   (in this folder; needs matplotlib)
"""
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

runs = ["first", "second", "third"]
panels = {}  # (loop, one process or a process per GPU) -> {label: [(p50, p99) per run]}
for run in runs:
    head = None
    for line in open(f"{run}/two_gpus.txt"):
        if line.startswith("== "):
            args = line.split("two_gpus.py", 1)[1]
            mech = re.search(r"--mechanism (\w+)", args)
            head = (re.search(r"--loop (\w+)", args).group(1) + (f", {mech.group(1)}" if mech else ""),
                    "a process per GPU" if "--procs" in args else "one process")
            continue
        m = re.match(r"\s*(\w+(?: alone| at once)?)\s+(device.*?)\s+cores", line)
        if head and m:
            for dev, p50, p99 in re.findall(r"device (\d): (\d+)/(\d+)", m.group(2)):
                panels.setdefault(head, {}).setdefault(f"{m.group(1)}: GPU {dev}", {})[run] = (int(p50), int(p99))
keys = sorted(k for k in panels if ", " not in k[0])
fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 4.2), sharey=True)
for ax, key in zip(axes, keys):
    labels = list(panels[key])
    for j, run in enumerate(runs):
        xs = [i + (j - 1) * 0.25 for i in range(len(labels))]
        vals = [panels[key][lb].get(run) for lb in labels]
        ax.bar([x for x, v in zip(xs, vals) if v], [v[0] for v in vals if v], width=0.25, label=run,
               yerr=[[0] * sum(1 for v in vals if v), [v[1] - v[0] for v in vals if v]], capsize=2)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_title(f"{key[0]}, {key[1]}", fontsize=9)
axes[0].set_ylabel("lateness (µs): p50, bar to p99")
axes[0].legend(fontsize=8)
fig.suptitle("Two H200s, 32 streams per GPU, random 50-3000 µs kernels, default mechanism", fontsize=10)
fig.tight_layout()
fig.savefig("two_gpus.png", dpi=110)
