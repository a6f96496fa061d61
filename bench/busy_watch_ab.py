"""What should a wait that starts in a busy loop do before it watches? Side by side.

    CUDA_DEVICE_MAX_CONNECTIONS=32 python bench/busy_watch_ab.py [--loop asyncio] [--rounds 4] [--out FILE]

A wait that starts while others are in progress in its loop (a busy loop)
and is alone on its stream yields once and asks the driver whether its work
is over; while the passes of the loop it yields through are longer than its
budget, it asks again after each, up to ``BUSY_ASKS`` times, and only then
watches (cudafd/_core/policy.py, step 2). Two ways of taking that step take
turns in the same rounds, each on a Notifier of its own, beside ``sleep(0)``
polling and the loop told at once:

* ``cudafd_event``: the policy as it is;
* ``cudafd_oneask``: one ask after the yield, then the watch, however long
  the pass was (a policy whose ``busy_asks`` is 1).

Two workloads: the lateness section's (one stream of 50 µs and of random
kernels, beside the spin floor; 4, 16 and 64 streams each looping over a
random 50-3000 µs kernel and an await, lateness from timing events on one
wait in 8 as in the bench, :mod:`cudafd._bench.lateness`), and the
throughput section's 64 streams of 100 µs kernels
(:mod:`cudafd._bench.throughput`), awaits per second against ``sleep(0)``'s
in the same round. Prints a table; ``--out`` keeps the JSON.
``$AB_PARAMS`` (JSON) overrides the lateness section's parameters, e.g.
``{"torch": false, "window_s": 0.1}`` for a short run on the simulator.

    python bench/busy_watch_ab.py --plot OUT.png A.json [B.json ...]

draws the JSON of one or more runs (one loop each): p50 lateness per
stream count, and awaits per second against ``sleep(0)``'s.
"""
from __future__ import annotations

import argparse
import json
import os

import cudafd
from cudafd._bench import lateness, methods, throughput, waiters
from cudafd._bench.child import Progress
from cudafd._bench.numbers import median
from cudafd._bench.options import FULL
from one_ask import one_ask

VARIANTS = ("cudafd_oneask",)


_make_way = waiters._make


def _make_way_ab(key, kernels, notifiers):
    if key not in VARIANTS:
        return _make_way(key, kernels, notifiers)
    n = one_ask(cudafd.Notifier("event"))
    notifiers.append(n)
    wait = cudafd.wait

    async def via(stream, mark):
        await wait(stream, notifier=n)

    return waiters.Way(via)


waiters._make = _make_way_ab
_own: dict = {}
_make_method = methods.make


def _make_method_ab(key, kit, stream):
    if key not in VARIANTS:
        return _make_method(key, kit, stream)
    n = _own.get(key)
    if n is None:
        n = _own[key] = one_ask(cudafd.Notifier("event"))
        kit.on_close(n.close)
    launch, wait = kit.gpu.launcher(stream), n.wait

    async def via(seconds):
        launch(seconds)
        await wait(stream)

    return via


throughput.make = _make_method_ab
for k in VARIANTS:
    waiters.LABELS[k] = methods.LABELS[k] = "cudafd event, busy: " + k[len("cudafd_"):]


def _lateness(loop: str, rounds: int) -> dict:
    p = {"loop": loop, "methods": ["cudafd_event", *VARIANTS, "sleep0", waiters.HANDOFF, waiters.FLOOR],
         "one_stream": [["50us", 50e-6, 200], ["random", None, 200]],
         "random_s": [50e-6, 3000e-6], "rounds": 1, "streams": [4, 16, 64], "window_s": 0.4,
         "multi_rounds": rounds, "timed_every": FULL["lateness"]["timed_every"], "history": None, "warmup": 5,
         "torch": True, "soft_s": 150, **json.loads(os.environ.get("AB_PARAMS", "{}"))}
    return lateness.run(p, Progress("busy_watch_ab", None, 600))


def _throughput(loop_name: str, rounds: int) -> dict:
    keys = ["cudafd_event", *VARIANTS, "sleep0"]
    p = {"streams": 64, "kernel_s": 100e-6, "seconds": 0.3, "settle_s": 0.15, "rounds": rounds, "soft_s": 200}
    try:
        state, runs = throughput.rounds_of(keys, p, loop_name, Progress("busy_watch_ab", None, 600))
    finally:
        _own.clear()
    base = [r["awaits_per_s"] for r in runs.get("sleep0", [])]
    out = {"launch": state.get("launch"), "errors": state["errors"], "methods": {}}
    for key in keys:
        rs = runs.get(key, [])
        ratios = [r["awaits_per_s"] / b for r, b in zip(rs, base) if b]
        if rs:
            out["methods"][key] = {"awaits_per_s": median([r["awaits_per_s"] for r in rs]),
                                   "cores": median([r["cores"] for r in rs]),
                                   "x_sleep0": median(ratios) if ratios else None,
                                   "x_range": [min(ratios), max(ratios)] if ratios else None, "rounds": rs}
    return out


def plot(png: str, paths: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [json.load(open(p)) for p in paths]
    fig, axes = plt.subplots(1, len(runs) + 1, figsize=(5 * (len(runs) + 1), 4))
    for ax, run in zip(axes, runs):
        wls = run["lateness"]["workloads"]
        names = list(wls)
        keys = list(wls[names[0]]["methods"])
        width = 0.8 / len(keys)
        for i, key in enumerate(keys):
            ys = [wls[n]["methods"].get(key, {}).get("p50", float("nan")) for n in names]
            ax.bar([j + i * width for j in range(len(names))], ys, width, label=key)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(names))], names)
        ax.set_ylabel("p50 lateness, us")
        ax.set_title(f"{run['loop']}: random 50-3000 us kernels")
        ax.legend(fontsize=7)
    ax = axes[-1]
    for j, run in enumerate(runs):
        ms = run["throughput"]["methods"]
        for i, (key, m) in enumerate(ms.items()):
            ax.bar(j + i * 0.2, m["x_sleep0"], 0.2, label=key if j == 0 else None, color=f"C{i}")
    ax.set_xticks([j + 0.3 for j in range(len(runs))], [r["loop"] for r in runs])
    ax.axhline(1.0, color="k", lw=0.5)
    ax.set_ylabel("awaits/s over sleep(0)'s, median of rounds")
    ax.set_title("64 streams x 100 us kernels")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loop", default="asyncio")
    ap.add_argument("--rounds", type=int, default=4, help="rounds of the N-stream workloads")
    ap.add_argument("--tp-rounds", type=int, default=12, help="rounds of the throughput workload")
    ap.add_argument("--out", default=None)
    ap.add_argument("--plot", default=None, metavar="PNG", help="draw the JSON files given instead of running")
    ap.add_argument("json", nargs="*")
    a = ap.parse_args()
    if a.plot:
        plot(a.plot, a.json)
        return
    late = _lateness(a.loop, a.rounds)
    tp = _throughput(a.loop, a.tp_rounds)
    print(f"{a.loop}: N streams of random 50-3000 us kernels ({a.rounds} rounds), lateness p50/p99 us, cores")
    for name, wl in late["workloads"].items():
        print(f"  {name}")
        for key, m in wl["methods"].items():
            print(f"    {key:20s} {m['p50']:8.0f} {m['p99']:8.0f}  {m.get('cores', float('nan')):.3f}"
                  f"  (loop {m.get('cores_loop', float('nan')):.3f}, cudafd {m.get('cores_cudafd', float('nan')):.3f})"
                  f"  {m.get('waits_per_s', float('nan')):8.0f} waits/s")
    print(f"{a.loop}: 64 streams x 100 us ({tp['launch']}), {a.tp_rounds} rounds")
    for key, m in tp["methods"].items():
        lo, hi = m["x_range"] or (float("nan"), float("nan"))
        print(f"    {key:20s} {m['awaits_per_s']:9.0f}/s  {m['cores']:.2f} cores  {m['x_sleep0']:.3f}x sleep0"
              f" (rounds {lo:.2f}-{hi:.2f})")
    errors = {**late["errors"], **tp["errors"]}
    if errors:
        print("  errors:", errors)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"loop": a.loop, "lateness": late, "throughput": tp}, f, indent=1)


if __name__ == "__main__":
    main()
