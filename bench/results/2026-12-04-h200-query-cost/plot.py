"""query_cost.png: ns per ask by kind and hardware queues (query_cost_queues.txt), and the poller's
CPU on N streams against its queries and wakes priced (poller_split_*.txt)."""
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = sys.path[0]
KINDS = ["cuEventQuery, running", "cuStreamQuery, running", "cuEventRecord, running", "word read, running"]


def costs():
    out, cur = {}, None
    for line in open(f"{HERE}/query_cost_queues.txt"):
        m = re.match(r"== CUDA_DEVICE_MAX_CONNECTIONS=(\d+) .*--streams (\d+) .*--contend (\d)", line)
        if m:
            cur = (int(m[1]), int(m[2])) if m[3] == "0" else None
            continue
        for k in KINDS:
            if cur and line.startswith(k + " ") and "(2)" not in line:
                out.setdefault(cur, {})[k] = float(line[len(k):].split()[0])
    return out


def splits(name):
    rows = []
    text = open(f"{HERE}/{name}").read()
    for m in re.finditer(r"(\w+), (\d+) streams.*?([\d]+) poller queries/s, (\d+) wakes/s.*?\n(?:.*\n)*?\s+\d+ cudafd-poller: ([\d.]+) cores", text):
        rows.append((m[1], int(m[2]), int(m[3]), int(m[4]), float(m[5])))
    return rows


def main():
    c = costs()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    keys = sorted(c)
    w = 0.2
    for i, k in enumerate(KINDS):
        a.bar([j + i * w for j in range(len(keys))], [c[key].get(k, 0) for key in keys], w, label=k.split(",")[0])
    a.set_xticks([j + 1.5 * w for j in range(len(keys))], [f"{q} queues\n{n} streams" for q, n in keys])
    a.set_ylabel("ns per ask (p50)")
    a.set_title("one ask on N streams, each running a kernel")
    a.legend(fontsize=8)
    labels, measured, queries, wakes = [], [], [], []
    for name, q in (("poller_split_8.txt", 8), ("poller_split_32.txt", 32)):
        for loop, n, qps, wps, cores in splits(name):
            per_query = c[(q, n)][KINDS[0]]
            labels.append(f"{loop} {n}x, {q} q")
            measured.append(cores)
            queries.append(qps * per_query * 1e-9)
            wakes.append(wps * 8e-6)
    x = range(len(labels))
    b.bar([i - 0.2 for i in x], measured, 0.4, label="the poller's CPU, measured")
    b.bar([i + 0.2 for i in x], queries, 0.4, label="its queries x one query's price")
    b.bar([i + 0.2 for i in x], wakes, 0.4, bottom=queries, label="its wakes x 8 us")
    b.set_xticks(list(x), labels, fontsize=7, rotation=60, ha="right")
    b.set_ylabel("cores")
    b.set_title("the poller on N streams of random 50-3000 us kernels")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{HERE}/query_cost.png", dpi=110)


if __name__ == "__main__":
    main()
