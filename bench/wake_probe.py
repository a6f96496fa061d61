"""Who should wake the loop: ways of waiting that differ only in that, side by side.

    python bench/wake_probe.py [--loop asyncio] [--quick] [--out FILE]

Runs the lateness section's one-stream and N-stream workloads
(:mod:`cudafd._bench.lateness`) with, besides the default wait, ``spin``,
``sleep(0)``, the executor and the 20 µs polling thread:

* ``nap<N>``: the default wait while the loop also naps on a timerfd of its
  own every N µs (the wake still comes from the poller's eventfd): does a
  loop that never sleeps long wake sooner when told?
* ``lpoll``: a ``poll``-mechanism Notifier asked by the loop itself, on a
  timerfd armed at the default's schedule (the oldest pending wait asked
  again after 1/16 of its age, clamped to 100-400 µs): the same schedule as
  the default, the loop woken by its own timer instead of another thread.
* ``lpoll<N>``: the same at a fixed N µs.
* ``lspin``: the ``poll`` Notifier asked by the loop on every pass.
* ``thread20us_s1``: the 20 µs polling thread with 1 ns of timer slack.
* ``sched<R>_<B>``: the default ("poll") mechanism with the schedule's ratio R
  and budget (max_lateness) B µs, for choosing them.
* ``ml<N>``: the default wait on a Notifier with ``max_lateness`` N µs (the
  native poller's schedule, one knob): what a cheaper or earlier schedule costs.
* ``spinml<N>``: a ``spin`` Notifier with ``max_lateness`` N µs, whose
  poller backstop for the waits their tasks ask about comes every max(N µs,
  10 ms) instead of every 10 ms: does a backstop that falls due as the
  kernel ends make ``spin`` later?
* ``readereach``: the default wait on a Notifier of its own whose asyncio
  reader is removed as soon as no wait is parked and added again for the
  next one, against the default's reader kept between back-to-back waits.

``--methods a,b,c`` and ``--lengths 200us,1ms,...`` pick what runs.
"""
from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import time

import cudafd
from cudafd._bench import lateness, waiters
from cudafd._bench.child import Progress
from cudafd._core.timerfd import OneShot
from cudafd._loops import asyncio_loop

_orig_make = waiters._make


class LoopPoller:
    """The loop asks a poll Notifier itself, woken by its own timerfd (interval None: the age schedule)."""

    def __init__(self, interval_us: float | None) -> None:
        self.n = cudafd.Notifier("poll")
        self.iv = interval_us
        self.futs: dict[int, tuple[asyncio.Future, int]] = {}
        self.tfd = OneShot()
        self.loop = None

    def _next(self, now: int) -> int:
        if self.iv is not None:
            return now + int(self.iv * 1e3)
        oldest = min(t0 for _, t0 in self.futs.values())
        age = now - oldest
        return now + min(max(age // 16, 100_000), 400_000)

    def _tick(self) -> None:
        self.tfd.clear()
        self.n.poll()
        for tok, exc in self.n.drain():
            f = self.futs.pop(tok, None)
            if f is not None and not f[0].done():
                f[0].set_result(None) if exc is None else f[0].set_exception(exc)
        if self.futs:
            self.tfd.arm_at(self._next(time.monotonic_ns()))
        else:
            self.tfd.disarm()

    async def wait(self, stream) -> None:
        loop = asyncio.get_running_loop()
        if self.loop is None:
            self.loop = loop
            loop.add_reader(self.tfd.fileno(), self._tick)
        tok = self.n.watch(stream)
        fut = loop.create_future()
        now = time.monotonic_ns()
        if not self.futs:
            self.futs[tok] = (fut, now)
            self.tfd.arm_at(self._next(now))
        else:
            self.futs[tok] = (fut, now)
        await fut

    def close(self) -> None:
        if self.loop is not None:
            self.loop.remove_reader(self.tfd.fileno())
        self.tfd.close()
        self.n.close()


class LoopSpinner:
    def __init__(self) -> None:
        self.n = cudafd.Notifier("poll")
        self.futs: dict[int, asyncio.Future] = {}
        self.handle = None

    def _tick(self) -> None:
        self.handle = None
        self.n.poll()
        for tok, exc in self.n.drain():
            f = self.futs.pop(tok, None)
            if f is not None and not f.done():
                f.set_result(None) if exc is None else f.set_exception(exc)
        if self.futs:
            self.handle = asyncio.get_running_loop().call_soon(self._tick)

    async def wait(self, stream) -> None:
        loop = asyncio.get_running_loop()
        tok = self.n.watch(stream)
        fut = self.futs[tok] = loop.create_future()
        if self.handle is None:
            self.handle = loop.call_soon(self._tick)
        await fut

    def close(self) -> None:
        self.n.close()


class Napper:
    def __init__(self, nap_us: int) -> None:
        self.nap_ns = nap_us * 1000
        self.pending = 0
        self.tfd = OneShot()
        self.loop = None

    def _tick(self) -> None:
        self.tfd.clear()
        if self.pending:
            self.tfd.arm_at(time.monotonic_ns() + self.nap_ns)

    async def wait(self, stream) -> None:
        loop = asyncio.get_running_loop()
        if self.loop is None:
            self.loop = loop
            loop.add_reader(self.tfd.fileno(), self._tick)
        self.pending += 1
        if self.pending == 1:
            self.tfd.arm_at(time.monotonic_ns() + self.nap_ns)
        try:
            await cudafd.wait(stream)
        finally:
            self.pending -= 1

    def close(self) -> None:
        if self.loop is not None:
            self.loop.remove_reader(self.tfd.fileno())
        self.tfd.close()


def _slack_thread(kernels):
    libc = ctypes.CDLL(None)
    poller = waiters.PollThread(kernels.query)
    # the thread is running already: set its slack through its first scan
    orig = poller._query

    slack_set = False

    def query(mark):
        nonlocal slack_set
        if not slack_set:
            libc.prctl(29, ctypes.c_ulong(1), 0, 0, 0)  # PR_SET_TIMERSLACK
            slack_set = True
        return orig(mark)

    poller._query = query
    return poller


_EAGER: set = set()  # Notifiers whose asyncio reader goes as soon as no wait is parked ("readereach")
_linger = asyncio_loop._Parked.linger


def _eager_linger(parked) -> None:
    if parked.notifier in _EAGER:
        parked.disarm()
    else:
        _linger(parked)


asyncio_loop._Parked.linger = _eager_linger


def _make(key: str, kernels, notifiers: list):
    obj = None
    if key.startswith("nap"):
        obj = Napper(int(key[3:]))
    elif key == "lpoll":
        obj = LoopPoller(None)
    elif key.startswith("lpoll"):
        obj = LoopPoller(float(key[5:]))
    elif key == "lspin":
        obj = LoopSpinner()
    elif key.startswith("sched"):
        ratio, budget_us = (int(x) for x in key[5:].split("_"))
        n = cudafd.Notifier("poll", max_lateness=budget_us * 1e-6)
        notifiers.append(n)
        b = n._backend

        def asked(k, plan, now, moved, b=b, ratio=ratio):
            if moved:
                plan[0] = now
            plan[2] = step = min(max((now - plan[0]) // ratio, b._budget // 4), b._budget)
            plan[1] = now + step

        b._asked = asked

        async def w(stream, mark):
            await cudafd.wait(stream, notifier=n)

        return waiters.Way(w)
    elif key.startswith("ml") or key.startswith("spinml"):
        ml = key.startswith("ml")
        n = cudafd.Notifier("event" if ml else "spin", max_lateness=int(key[2 if ml else 6:]) * 1e-6)
        notifiers.append(n)

        async def w(stream, mark):
            await cudafd.wait(stream, notifier=n)

        return waiters.Way(w)
    elif key == "readereach":
        n = cudafd.Notifier()
        notifiers.append(n)
        _EAGER.add(n)

        async def w(stream, mark):
            await cudafd.wait(stream, notifier=n)

        return waiters.Way(w)
    elif key == "thread20us_s1":
        poller = _slack_thread(kernels)

        async def w(stream, mark):
            await poller.wait(mark)

        return waiters.Way(w, close=poller.close)
    if obj is None:
        return _orig_make(key, kernels, notifiers)

    async def way(stream, mark):
        await obj.wait(stream)

    return waiters.Way(way, close=obj.close)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loop", default="asyncio")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--methods", default="cudafd_default,nap100,nap200,lpoll,lpoll50,lpoll100,cudafd_spin,lspin,"
                    "sleep0,executor,thread20us,thread20us_s1,spin_floor")
    ap.add_argument("--lengths", default="200us,1ms,5ms,random")
    ap.add_argument("--streams", default="4,64", help="the N of the N-stream workloads ('' for none)")
    a = ap.parse_args()
    waiters._make = _make
    methods = a.methods.split(",")
    q = a.quick
    spec = {"5us": 5e-6, "50us": 50e-6, "200us": 200e-6, "1ms": 1e-3, "2ms": 2e-3, "5ms": 5e-3, "10ms": 10e-3, "random": None}
    p = {"loop": a.loop, "methods": methods,
         "one_stream": [[name, spec[name], (20 if q else 120) if name in ("5ms", "10ms") else (30 if q else 240)]
                        for name in a.lengths.split(",")],
         "random_s": [50e-6, 3000e-6], "rounds": 2 if q else 6, "streams": [int(x) for x in a.streams.split(",") if x],
         "window_s": 0.1 if q else 0.4, "multi_rounds": 1 if q else 2, "history": None, "warmup": 3,
         "torch": True, "soft_s": 200, "hard_s": 260}
    out = lateness.run(p, Progress("wake_probe", a.out or "/dev/null", 260))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    print(f"{a.loop}; errors: {out['errors']}; notes: {out['notes']}")
    for name, wl in out["workloads"].items():
        print(f"-- {name}")
        for key, m in wl["methods"].items():
            lat = m.get("net") or m
            split = f" (loop {m['cores_loop']:.3f}, cudafd {m.get('cores_cudafd', 0):.3f})" if "cores_loop" in m else ""
            print(f"  {key:15s} p50 {lat['p50']:8.1f}  p99 {lat['p99']:8.1f}  cores {m.get('cores', 0):.3f}{split}")


if __name__ == "__main__":
    main()
