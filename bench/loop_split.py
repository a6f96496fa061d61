"""Where the event loop's thread spends its time per wait on N busy streams.

    CUDA_DEVICE_MAX_CONNECTIONS=32 python bench/loop_split.py [--streams 64] [--rounds 3]
        [--loop asyncio|uvloop] [--methods A,B,...] [--gc freeze|on|off] [--out FILE]

The lateness section's N-stream workload (N tasks each looping over a random
50-3000 µs kernel and an await, one wait in 8 timed; :mod:`cudafd._bench.lateness`),
the ways of ``--methods`` taking turns for ``--rounds`` rounds. When the
loop's thread is saturated, every task waits for it in turn, and a task's
cycle is N times the thread's time per wait: Little's law gives the waits'
mean lateness as N / (waits a second) minus the mean kernel, which the
table prints beside the measured mean. So on such a workload the loop's
time per wait sets the lateness, and this says where it goes:

* each callback the loop runs (``asyncio.events.Handle._run``; asyncio
  only: uvloop's handles are not Python's), by kind: a task's step, a
  reader of a cudafd fd, anything else (timers, cudafd's idle check);
  the loop thread's CPU outside them is the loop's own (its select and
  scheduling, and this probe's timing of the callbacks);
* within the steps, inclusive: the bench's launch (kernel and end event;
  its wall time, and the thread's CPU time within it), cudafd's stream
  query (``Notifier.adapter_done_now``, and how often it found the work
  over), watch and drain, and a polling way's event query;
* over each way's windows, what the scheduler says of the loop's thread
  (``/proc/thread-self/schedstat``: time on a CPU, time runnable but
  waiting for one) and the virtual machine's stolen time (``/proc/stat``,
  every CPU, in clock ticks): a process whose thread is slower per wait
  because it waits for a CPU, or because the host runs something else on
  its CPUs, shows it there; and the longest pause of Python's garbage
  collector within them (ms). The header gives the thread's speed at plain
  Python with no GPU call, before and after the run (``ref``: ms for a
  fixed loop, the best of five), to tell a slower CPU from slower calls;
* the longest single stretch of each (ms, asyncio only): a callback, a
  launch, and a gap between two callbacks (the loop's own: its select, or
  the thread off a CPU). A wait many ms late shows where the loop stood
  still: in a callback (a launch held in the driver, say) or between them.

Every number is µs of the loop's thread per wait (all waits, timed or
not) or a count per wait. The wrappers add a few tenths of a µs per call;
compare ways within one run. ``--gc``: ``freeze`` (the bench's way:
``gc.freeze()`` after the set-up, PyTorch imported and the kernels made),
``on`` (the collector left as it is), ``off`` (disabled).
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import os
import tempfile
import time

from cudafd._bench import ends, lateness
from cudafd._bench.child import Progress
from cudafd._bench.options import FULL
from cudafd._core.notifier import Notifier

METHODS = ["cudafd_default", "sleep0", "bound_handoff"]
ns = time.perf_counter_ns
_on = [False]  # counting: between the CPU meter's start and stop of a way's window
_key = [""]  # the way whose window runs
_acc: dict[str, dict[str, list[int]]] = {}  # way -> name -> [calls, ns]
_longest: dict[str, dict[str, int]] = {}  # way -> "callback", "launch", "gap" -> the longest, ns
_last_end = [0]  # when the last callback of the window ended, ns (0: none yet)


def _add(name: str, d: int, n: int = 1) -> None:
    a = _acc.setdefault(_key[0], {}).setdefault(name, [0, 0])
    a[0] += n
    a[1] += d


def _longer(name: str, d: int) -> None:
    m = _longest.setdefault(_key[0], {})
    if d > m.get(name, 0):
        m[name] = d


def _timed(name: str, fn, over: str | None = None):
    @functools.wraps(fn)
    def wrapper(*args, **kw):
        if not _on[0]:
            return fn(*args, **kw)
        t0 = ns()
        r = fn(*args, **kw)
        _add(name, ns() - t0)
        if over is not None and r is True:
            _add(over, 0)
        return r

    return wrapper


def _sched() -> tuple[int, int]:
    """The calling thread's time on a CPU and time runnable waiting for one, ns (0, 0 if unknown)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            run, wait = f.read().split()[:2]
        return int(run), int(wait)
    except (OSError, ValueError):
        return 0, 0


def _steal() -> int:
    """Stolen time of every CPU of the machine so far, ns (0 if unknown)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0


def _ref_ms() -> float:
    """ms of the calling thread for a fixed pure-Python loop, the best of five."""
    best = float("inf")
    for _ in range(5):
        t0 = ns()
        x = 0
        for i in range(200_000):
            x += i & 7
        best = min(best, (ns() - t0) / 1e6)
    return round(best, 2)


def _timed_cpu(name: str, fn):
    """_timed, with the thread's CPU time within the call as ``name cpu``."""
    cpu = time.thread_time_ns

    @functools.wraps(fn)
    def wrapper(*args, **kw):
        if not _on[0]:
            return fn(*args, **kw)
        t0, c0 = ns(), cpu()
        r = fn(*args, **kw)
        c1 = cpu()
        d = ns() - t0
        _add(name, d)
        _add(name + " cpu", c1 - c0)
        _longer(name, d)
        return r

    return wrapper


def _kind(cb) -> str:
    owner = getattr(cb, "__self__", None)
    if isinstance(owner, asyncio.Future) or "Task" in type(cb).__name__:
        return "step"
    name = getattr(getattr(cb, "__func__", None), "__qualname__", "")
    return "reader" if name in ("_Parked.on_readable", "FdHandoff._drain") else "other"


def _instrument() -> None:
    run = asyncio.events.Handle._run

    def timed_run(self):
        if not _on[0]:
            return run(self)
        t0 = ns()
        if _last_end[0]:
            _longer("gap", t0 - _last_end[0])
        try:
            return run(self)
        finally:
            t1 = _last_end[0] = ns()
            _add(_kind(self._callback), t1 - t0)
            _longer("callback", t1 - t0)

    asyncio.events.Handle._run = timed_run
    for cls in (ends.TorchKernels, ends.DriverKernels):
        cls.launch = _timed_cpu("launch", cls.launch)
        cls.query = _timed("query", cls.query)
    Notifier.adapter_done_now = _timed("ask", Notifier.adapter_done_now, over="ask over")
    Notifier.adapter_watch = _timed("watch", Notifier.adapter_watch)
    Notifier.watch = _timed("watch", Notifier.watch)
    Notifier.adapter_drain = _timed("drain", Notifier.adapter_drain)
    Notifier.drain = _timed("drain", Notifier.drain)

    meter = lateness.CpuMeter

    class Meter(meter):
        def start(self):
            r = super().start()
            self._sched0, self._steal0 = _sched(), _steal()
            _last_end[0] = 0
            _on[0] = True
            return r

        def stop(self):
            _on[0] = False
            run, wait = _sched()
            _add("sched run", run - self._sched0[0])
            _add("sched wait", wait - self._sched0[1])
            _add("steal", _steal() - self._steal0)
            r = super().stop()
            a = _acc.setdefault(_key[0], {}).setdefault("gc max", [0, 0])  # (windows, the longest pause ns)
            a[0] += 1
            a[1] = max(a[1], int(self.gc_max * 1e9))
            return r

    lateness.CpuMeter = Meter
    tasks = lateness.Run._tasks

    async def keyed(self, key, *args, **kw):
        _key[0] = key
        return await tasks(self, key, *args, **kw)

    lateness.Run._tasks = keyed


COLUMNS = ["step", "reader", "other", "launch", "query", "ask", "watch", "drain"]
SCHED = ["launch cpu", "sched run", "sched wait", "steal"]  # µs per wait, no call counts
LONGEST = ["callback", "launch", "gap"]  # ms, the longest single one in the way's windows


def table(res: dict, n: int, mean_kernel_us: float) -> str:
    out = [f"{n} streams: µs of the loop's thread per wait (calls per wait); lateness µs",
           f"{'way':<16}{'waits/s':>8}{'loop':>7}{'own':>7}" + "".join(f"{c:>13}" for c in COLUMNS)
           + f"{'ask over':>9}{'mean':>7}{'Little':>7}{'p50':>7}{'p99':>7}{'max':>8}"
           + "".join(f"{c:>11}" for c in SCHED) + f"{'gc max ms':>10}"
           + "".join(f"{'longest ' + c:>17}" for c in LONGEST)]
    for key, m in res["methods"].items():
        w = m.get("waits") or 1
        acc = _acc.get(key, {})
        loop_us = m.get("cores_loop", float("nan")) * m.get("wall_s", float("nan")) / w * 1e6
        handles = sum(acc.get(k, [0, 0])[1] for k in ("step", "reader", "other")) / w / 1e3
        cells = []
        for c in COLUMNS:
            calls, t = acc.get(c, [0, 0])
            cells.append(f"{t / w / 1e3:6.1f} ({calls / w:4.2f})" if calls else f"{'-':>13}")
        ask = acc.get("ask", [0, 0])[0]
        over = f"{acc.get('ask over', [0, 0])[0] / ask:8.0%}" if ask else f"{'-':>8}"
        little = n / m["waits_per_s"] * 1e6 - mean_kernel_us if m.get("waits_per_s") else float("nan")
        own = f"{loop_us - handles:7.1f}" if handles else f"{'-':>7}"
        out.append(f"{key:<16}{m.get('waits_per_s', 0):8.0f}{loop_us:7.1f}{own}" + "".join(cells)
                   + f" {over}{m['mean']:7.0f}{little:7.0f}{m['p50']:7.0f}{m['p99']:7.0f}{m['max']:8.0f}"
                   + "".join(f"{acc.get(c, [0, 0])[1] / w / 1e3:11.1f}" for c in SCHED)
                   + f"{acc.get('gc max', [0, 0])[1] / 1e6:10.1f}"
                   + "".join(f"{_longest.get(key, {}).get(c, 0) / 1e6:17.2f}" for c in LONGEST))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=0.4)
    ap.add_argument("--loop", default="asyncio")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--gc", choices=("freeze", "on", "off"), default="freeze")
    ap.add_argument("--out", default=None, help="keep the bench's result and the counts as JSON")
    ap.add_argument("--plot", default=None, metavar="PNG", help="draw the --out JSON files given instead of running")
    ap.add_argument("json", nargs="*")
    a = ap.parse_args()
    if a.plot:
        plot(a.plot, a.json)
        return
    _instrument()
    p = dict(FULL["lateness"], loop=a.loop, methods=a.methods.split(","), one_stream=[], streams=[a.streams],
             history=None, window_s=a.window, multi_rounds=a.rounds, soft_s=600)
    p["gc_freeze"] = a.gc == "freeze"
    if a.gc == "off":
        gc.disable()
    ref = [_ref_ms()]
    with tempfile.TemporaryDirectory() as d:
        res = lateness.run(p, Progress("loop_split", os.path.join(d, "r.json"), 900))
    ref.append(_ref_ms())
    wl = res["workloads"][f"{a.streams}x_random"]
    lo, hi = p["random_s"]
    print(f"{a.loop}, gc {a.gc}, CUDA_DEVICE_MAX_CONNECTIONS={os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS')}, "
          f"{a.rounds} rounds of {a.window} s, kernels {res['kernels']['kind']}, ref {ref[0]} / {ref[1]} ms")
    print(table(wl, a.streams, (lo + hi) / 2 * 1e6))
    if res["errors"]:
        print("errors:", res["errors"])
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"args": vars(a), "ref_ms": ref, "workload": wl, "counts": _acc, "longest_ns": _longest,
                       "errors": res["errors"]}, f, indent=1)


PARTS = [("launch", "launch + end event"), ("query", "sleep(0)'s queries"), ("ask", "cudafd's ask"),
         ("watch", "cudafd's watch"), ("drain", "cudafd's drain")]


def _parts(run: dict, key: str) -> list[float]:
    """µs per wait of the loop's thread: PARTS, the rest of the steps and callbacks, the loop's own."""
    m, acc = run["workload"]["methods"][key], run["counts"].get(key, {})
    w = m["waits"]
    us = {k: v[1] / w / 1e3 for k, v in acc.items()}
    total = m["cores_loop"] * m["wall_s"] / w * 1e6
    named = [us.get(k, 0.0) for k, _ in PARTS]
    handles = us.get("step", 0.0) + us.get("reader", 0.0) + us.get("other", 0.0)
    if not handles:  # uvloop: no split of the callbacks
        return named + [total - sum(named), 0.0]
    return named + [handles - sum(named), total - handles]


def plot(png: str, paths: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [json.load(open(p)) for p in paths]
    fig, ax = plt.subplots(figsize=(1.1 * sum(len(r["workload"]["methods"]) for r in runs) + 4, 4.5))
    labels = [t for _, t in PARTS] + ["rest of the steps and callbacks", "the loop's own"]
    x, ticks = 0, []
    for run in runs:
        for key in run["workload"]["methods"]:
            bottom = 0.0
            for i, v in enumerate(_parts(run, key)):
                ax.bar(x, v, 0.7, bottom=bottom, color=f"C{i}", label=labels[i] if x == 0 else None)
                bottom += v
            ticks.append((x, f"{key}\n{run['args']['loop']}"))
            x += 1
        x += 0.5
    ax.set_xticks([t for t, _ in ticks], [n for _, n in ticks], fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("µs of the loop's thread per wait")
    ax.set_title(f"{runs[0]['args']['streams']} streams of random 50-3000 µs kernels")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(png, dpi=100)


if __name__ == "__main__":
    main()
