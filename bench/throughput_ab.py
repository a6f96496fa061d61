"""Does a wait that starts in a busy loop pay for asking before its yield? Side by side.

    python bench/throughput_ab.py [--loop asyncio] [--rounds 12] [--streams 64] [--out FILE]

The throughput section's workload (:mod:`cudafd._bench.throughput`: N streams,
each a task looping over a 100 µs kernel launched through PyTorch where it
can, and an await), with these ways of waiting taking turns in every round:

* ``cudafd_event``: ``await n.wait(stream)`` as the policy is
  (cudafd/_core/policy.py: a wait that starts while others are in progress
  yields before it asks the driver);
* ``cudafd_askfirst``: the same on a Notifier of its own whose waits ask the
  driver before that yield too (the fast path's query in a busy loop);
* ``sleep0``: launch, record an event, ``while not query: await sleep(0)``;
* ``bound_yield``, ``bound_query``: launch and one yield, without and with
  one stream query: what waiting costs nothing and one query cost.

Prints per way the median awaits/s and cores over the rounds and the median
over the rounds of each way's awaits/s over ``sleep0``'s in the same round.
"""
from __future__ import annotations

import argparse
import json

import cudafd
from cudafd._bench import methods, throughput
from cudafd._bench.child import Progress
from cudafd._bench.methods import Kit
from cudafd._bench.numbers import median
from cudafd._core.policy import WaitPolicy

ASKFIRST = "cudafd_askfirst"
_askers: set = set()  # Notifiers whose waits ask before they yield in a busy loop
_own: dict = {}  # "n": the askfirst way's Notifier, one for every stream
_steps = WaitPolicy.steps


def _over():
    return
    yield  # (a generator that ends at once)


def _steps_askfirst(self, notifier, t):
    if notifier in _askers and self._streams:
        key = t.handle if t.kind == "stream" else -1
        if key not in self._streams and notifier.adapter_done_now(t):
            return _over()  # over at once, as an idle loop's fast path (without its every-8th yield)
    return _steps(self, notifier, t)


WaitPolicy.steps = _steps_askfirst
_make = methods.make
methods.LABELS[ASKFIRST] = "cudafd event, asking before the yield"


def _make_ab(key: str, kit: Kit, stream: int):
    if key != ASKFIRST:
        return _make(key, kit, stream)
    n = _own.get("n")
    if n is None:
        n = _own["n"] = cudafd.Notifier("event")
        _askers.add(n)
        kit.on_close(n.close)
    launch, wait = kit.gpu.launcher(stream), n.wait

    async def askfirst(seconds: float) -> None:
        launch(seconds)
        await wait(stream)

    return askfirst


throughput.make = _make_ab


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loop", default="asyncio")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    keys = ["cudafd_event", ASKFIRST, "sleep0", "bound_yield", "bound_query"]
    p = {"streams": a.streams, "kernel_s": 100e-6, "seconds": a.seconds, "settle_s": 0.15,
         "rounds": a.rounds, "soft_s": 300}
    try:
        state, runs = throughput.rounds_of(keys, p, a.loop, Progress("throughput_ab", None, 600))
    finally:
        _own.clear()
    base = [r["awaits_per_s"] for r in runs.get("sleep0", [])]
    out = {"loop": a.loop, "launch": state.get("launch"), "errors": state["errors"], "methods": {}}
    print(f"{a.loop}, {a.streams} streams x 100 us ({state.get('launch')}), {a.rounds} rounds")
    for key in keys:
        rs = runs.get(key, [])
        if not rs:
            continue
        ratios = [r["awaits_per_s"] / b for r, b in zip(rs, base) if b]
        m = {"awaits_per_s": median([r["awaits_per_s"] for r in rs]), "cores": median([r["cores"] for r in rs]),
             "x_sleep0": median(ratios) if ratios else None, "rounds": rs}
        out["methods"][key] = m
        print(f"  {key:18s} {m['awaits_per_s']:9.0f}/s  {m['cores']:.2f} cores  "
              f"{m['x_sleep0']:.3f}x sleep0 (rounds {min(ratios):.2f}-{max(ratios):.2f})")
    if state["errors"]:
        print("  errors:", state["errors"])
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
