"""A busy loop's waits on the simulator: asking after each long pass against one ask, side by side.

    python bench/busy_asks_sim.py [--streams 64] [--launch-us 25] [--kernels 50:3000] [--rounds 6]
                                  [--seconds 1.5] [--loop asyncio] [--out FILE]

N tasks on the simulator, each looping over (hold the loop's thread
``--launch-us`` µs, as a framework's launch and timing event do on a GPU;
launch a kernel of a length drawn from ``--kernels``, uniform, 50-3000 µs
by default; await it). With enough streams the
loop's thread is saturated and its passes last milliseconds, which is when
a wait asks after each pass instead of watching (cudafd/_core/policy.py,
step 2). Three ways take turns within every round:

* ``cudafd``: ``await n.wait(stream)`` with the policy as it is;
* ``oneask``: the same on a Notifier whose policy asks once after the
  yield, then watches, however long the pass was (``busy_asks`` 1);
* ``sleep0``: ``while not stream.query(): await asyncio.sleep(0)``.

Lateness: the time the task resumed minus the kernel's end (its launch
plus its length: the simulator ends a kernel at that time). Prints, per
way, the medians over the rounds of the p50 and p99 lateness, the process's
cores, the waits a second, the loop's thread's CPU per wait, and the asks
(driver queries on the loop's thread) and watches per wait. On a GPU the bench's lateness section and
``bench/busy_watch_ab.py`` measure the same.

    python bench/busy_asks_sim.py --plot PNG A.json [B.json ...]

draws the JSON of runs (``--out``): p50 lateness per way, a panel per run.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time

os.environ.setdefault("CUDAFD_SIMULATOR", "1")

import cudafd  # noqa: E402
import cudafd.sim  # noqa: E402
from one_ask import one_ask  # noqa: E402

WAYS = ("cudafd", "oneask", "sleep0")


def _hold(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _counted(n, counts: dict):  # type: ignore[no-untyped-def]
    """``n`` with its asks (adapter_done_now) and watches counted into ``counts``."""
    done_now, watch = n.adapter_done_now, n.adapter_watch

    def ask(t):  # type: ignore[no-untyped-def]
        counts["asks"] += 1
        return done_now(t)

    def watched(t):  # type: ignore[no-untyped-def]
        counts["watches"] += 1
        return watch(t)

    n.adapter_done_now, n.adapter_watch = ask, watched
    return n


async def _round(way: str, streams: list, notifiers: dict, a: argparse.Namespace, seed: int,
                 counts: dict) -> dict:
    late: list[float] = []
    lo, hi = (float(x) * 1e-6 for x in a.kernels.split(":"))
    stop = False
    measuring = False
    clock = time.perf_counter

    async def task(s, rnd: random.Random) -> None:
        while not stop:
            k = rnd.uniform(lo, hi)
            _hold(a.launch_us * 1e-6)
            s.launch(k)
            t0 = clock()
            if way == "sleep0":
                while not s.query():
                    counts["asks"] += 1
                    await asyncio.sleep(0)
                counts["asks"] += 1
            else:
                await notifiers[way].wait(s)
            if measuring:
                late.append((clock() - t0 - k) * 1e6)

    tasks = [asyncio.ensure_future(task(s, random.Random(seed * 1000 + i))) for i, s in enumerate(streams)]
    await asyncio.sleep(0.3)
    measuring = True
    counts.update(asks=0, watches=0)
    c0, w0, t0 = time.process_time(), clock(), time.thread_time()
    await asyncio.sleep(a.seconds)
    c1, w1, t1 = time.process_time(), clock(), time.thread_time()
    asks, watches = counts["asks"], counts["watches"]
    measuring = False
    stop = True
    await asyncio.gather(*tasks)
    late.sort()
    return {"p50": late[len(late) // 2], "p99": late[int(len(late) * 0.99)], "cores": (c1 - c0) / (w1 - w0),
            "waits_per_s": len(late) / (w1 - w0), "loop_us_per_wait": (t1 - t0) / len(late) * 1e6,
            "asks_per_wait": asks / len(late), "watches_per_wait": watches / len(late)}


async def _main(a: argparse.Namespace) -> dict:
    dev = cudafd.sim.Device()
    streams = [dev.stream() for _ in range(a.streams)]
    counts = {"asks": 0, "watches": 0}
    notifiers = {"cudafd": _counted(cudafd.Notifier("event"), counts),
                 "oneask": _counted(one_ask(cudafd.Notifier("event")), counts)}
    runs: dict[str, list[dict]] = {w: [] for w in WAYS}
    try:
        for r in range(a.rounds):
            order = WAYS if r % 2 == 0 else WAYS[::-1]
            for way in order:
                runs[way].append(await _round(way, streams, notifiers, a, r, counts))
    finally:
        for n in notifiers.values():
            n.close()
            n.drain()
    return runs


def plot(png: str, paths: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    docs = [json.load(open(p)) for p in paths]
    cols = min(5, len(docs))
    rows = -(-len(docs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(docs):]:
        ax.set_visible(False)
    for ax, doc in zip(axes.flat, docs):
        for i, (way, rs) in enumerate(doc["runs"].items()):
            ax.scatter([i] * len(rs), [r["p50"] for r in rs], s=14, color=f"C{i}")
            ax.plot([i - 0.3, i + 0.3], [statistics.median(r["p50"] for r in rs)] * 2, color=f"C{i}")
        ax.set_xticks(range(len(doc["runs"])), list(doc["runs"]))
        ax.set_ylim(bottom=0)
        ax.set_title(f"{doc['args']['streams']} streams, {doc['args']['loop']}, {doc['args']['launch_us']:g} µs held", fontsize=8)
    for row in axes:
        row[0].set_ylabel("p50 lateness per round, µs")
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plot", default=None, metavar="PNG", help="draw the JSON files given instead of running")
    ap.add_argument("json", nargs="*")
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--launch-us", type=float, default=25.0)
    ap.add_argument("--kernels", default="50:3000", metavar="LO:HI", help="kernel lengths, uniform, µs")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--loop", default="asyncio", choices=["asyncio", "uvloop"])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.plot:
        plot(a.plot, a.json)
        return
    if a.loop == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    runs = asyncio.run(_main(a))
    print(f"{a.loop}, simulator: {a.streams} streams, kernels of {a.kernels.replace(':', '-')} us,"
          f" {a.launch_us:g} us held per launch;"
          f" medians of {a.rounds} rounds")
    print(f"  {'way':8s} {'p50 us':>8s} {'p99 us':>8s} {'cores':>6s} {'waits/s':>8s} {'loop us/wait':>12s}"
          f" {'asks/wait':>9s} {'watches/wait':>12s}")
    for way, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"  {way:8s} {med['p50']:8.0f} {med['p99']:8.0f} {med['cores']:6.2f} {med['waits_per_s']:8.0f}"
              f" {med['loop_us_per_wait']:12.1f} {med['asks_per_wait']:9.2f} {med['watches_per_wait']:12.2f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"args": vars(a), "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
