"""Kernels of a length chosen at launch, and the host time each one ended (see :mod:`.clocks`).

Two sources with one interface:

* :class:`TorchKernels`: ``torch.cuda._sleep`` and a
  ``torch.cuda.Event(enable_timing=True)`` recorded after each kernel (what
  users launch; chosen when torch has a CUDA device), on
  ``torch.cuda.ExternalStream``s over streams of their own made in the
  primary context torch uses (``torch.cuda.Stream()`` hands out streams from
  a pool of 32, so 64 of them would share streams);
* :class:`DriverKernels`: the project's ``cudafd_spin`` through
  ``cudafd._core.kernels.launcher`` on raw streams, a timing event after each
  kernel, ``cuEventElapsedTime`` against the anchored reference. On the
  simulator, which has no ``cuEventElapsedTime``, a kernel's end is
  *estimated* as the host time of its launch plus its length (every launch
  here is on an idle stream: its previous kernel was awaited), which puts
  the simulator's own start-up delay into the lateness.

``launch(stream, seconds, blocking, timed)`` returns a :class:`Mark` (the
end event; ``blocking``: a blocking-sync event, for waiters that sleep in
``synchronize``; ``timed`` false: an event without timing, whose end is not
known); ``query``/``sync`` ask or wait for it from any thread; ``anchor()``
maps a fresh reference to the host clock; after the kernel ended,
``end_s(mark)`` is a timed mark's host time; ``release(marks)`` returns the
events to a pool, which ``prefill(n, blocking, timed)`` fills beforehand, so
that no measured stretch pays for making events.

A timing event, like a blocking-sync one, holds the hardware queue its
stream shares with others until the kernel before it ends, which an event
without either does not (``bench/c/query_cost.c --hold``): streams that
share a queue (more streams than ``CUDA_DEVICE_MAX_CONNECTIONS``) then run
in turn. Workloads of many streams therefore time a sample of their waits.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

from .._core import driver as _driver
from .clocks import anchor, end_on_host
from .gpu import NOT_READY, Gpu

__all__ = ["DriverKernels", "Mark", "TorchKernels", "ANCHOR_TRIES"]

ANCHOR_TRIES = 5  # the narrowest bracket of this many is kept


class Mark:
    """One kernel's end event, its launch's host time and its length."""

    __slots__ = ("ev", "blocking", "timed", "t", "seconds")

    def __init__(self, ev: Any, blocking: bool, t: float, seconds: float, timed: bool = True) -> None:
        self.ev, self.blocking, self.timed, self.t, self.seconds = ev, blocking, timed, t, seconds


class _Pool:
    """Free events by kind: ``make(blocking, timed)`` makes one."""

    def __init__(self, make) -> None:
        self._make = make
        self._free: dict[tuple[bool, bool], list] = {}

    def take(self, blocking: bool, timed: bool):
        free = self._free.get((blocking, timed))
        return free.pop() if free else self._make(blocking, timed)

    def fill(self, n: int, blocking: bool, timed: bool) -> list:
        """Make events until ``n`` are free; the new ones."""
        free = self._free.setdefault((blocking, timed), [])
        new = [self._make(blocking, timed) for _ in range(n - len(free))]
        free += new
        return new

    def give(self, marks: list[Mark]) -> None:
        for m in marks:
            self._free.setdefault((m.blocking, m.timed), []).append(m.ev)


class TorchKernels:
    """``torch.cuda._sleep`` kernels on torch streams; ends from torch timing events."""

    kind = "torch"
    estimated = False
    timing = "CUDA timing events (torch.cuda.Event.elapsed_time against an anchored reference)"

    def __init__(self, torch: Any, gpu: Gpu) -> None:
        from . import torchk

        self.torch = torch
        self.gpu = gpu  # device 0's primary context: torch's
        torch.cuda.init()
        torch.cuda.set_device(0)
        self.device = torch.cuda.get_device_name()
        self._ref_stream = self.streams(1)[0]
        self.calibration = torchk.calibrate(torch, self._ref_stream)
        self._cps = self.calibration["cycles_per_s"]
        self._launchers: dict[int, Any] = {}
        self._pool = _Pool(lambda blocking, timed: torch.cuda.Event(enable_timing=timed, blocking=blocking))
        self._ref: Any = None
        self._anchor = 0.0

    def streams(self, n: int) -> list[Any]:
        ext = self.torch.cuda.ExternalStream
        return [ext(h) for h in self.gpu.streams(n)]

    def launch(self, stream: Any, seconds: float, blocking: bool = False, timed: bool = True) -> Mark:
        from .torchk import launcher

        fn = self._launchers.get(id(stream))
        if fn is None:
            fn = self._launchers[id(stream)] = launcher(self.torch, stream, self._cps)
        ev = self._pool.take(blocking, timed)
        t = perf_counter()
        fn(seconds)
        ev.record(stream)
        return Mark(ev, blocking, t, seconds, timed)

    def query(self, mark: Mark) -> bool:
        return mark.ev.query()

    def sync(self, mark: Mark) -> None:
        mark.ev.synchronize()

    def anchor(self) -> float:
        best = None
        for _ in range(ANCHOR_TRIES):
            ev = self.torch.cuda.Event(enable_timing=True)
            t0 = perf_counter()
            ev.record(self._ref_stream)
            at, half = anchor(ev.query, started=t0)
            if best is None or half < best[2]:
                best = (ev, at, half)
        self._ref, self._anchor, half = best  # type: ignore[misc]
        return half

    def end_s(self, mark: Mark) -> float:
        return end_on_host(self._anchor, self._ref.elapsed_time(mark.ev))

    def release(self, marks: list[Mark]) -> None:
        self._pool.give(marks)

    def prefill(self, n: int, blocking: bool, timed: bool = True) -> None:
        new = self._pool.fill(n, blocking, timed)
        for ev in new:  # torch makes the CUevent at the first record
            ev.record(self._ref_stream)
        if new:
            new[-1].synchronize()

    def close(self) -> None:
        torch = self.torch
        torch.cuda.synchronize()
        # launch() made one of these streams torch's current one: a destroyed stream
        # left current fails torch's later calls in this process ("context is destroyed")
        torch.cuda.set_stream(torch.cuda.default_stream())
        self.gpu.close()


class DriverKernels:
    """``cudafd_spin`` on raw streams of a :class:`Gpu` (a real GPU or the simulator)."""

    def __init__(self, gpu: Gpu) -> None:
        self.gpu = gpu
        self.device = gpu.description
        self.estimated = not gpu.has_gpu_timing
        self.kind = "simulator" if gpu.simulator else "cudafd_spin"
        self.timing = (
            "ESTIMATED: the simulator has no cuEventElapsedTime, so a kernel's end is its launch's host "
            "time plus its length (on an idle stream); the simulator's start-up delay counts as lateness"
            if self.estimated
            else "CUDA timing events (cuEventElapsedTime against an anchored reference)"
        )
        self.calibration = None
        drv = gpu.drv
        self._record, self._query, self._sync = drv.cuEventRecord, drv.cuEventQuery, drv.cuEventSynchronize  # type: ignore[attr-defined]
        self._ref_stream = gpu.streams(1)[0]

        def make(blocking: bool, timed: bool) -> int:
            flags = _driver.CU_EVENT_BLOCKING_SYNC if blocking else _driver.CU_EVENT_DEFAULT
            return gpu.event(flags if timed else flags | _driver.CU_EVENT_DISABLE_TIMING)

        self._pool = _Pool(make)
        self._ref = 0
        self._anchor = 0.0

    def streams(self, n: int) -> list[int]:
        return self.gpu.streams(n)

    def launch(self, stream: int, seconds: float, blocking: bool = False, timed: bool = True) -> Mark:
        ev = self._pool.take(blocking, timed)
        launch = self.gpu.launcher(stream)
        t = perf_counter()
        launch(seconds)
        if rc := self._record(ev, stream):
            _driver.check(rc, "cuEventRecord")
        return Mark(ev, blocking, t, seconds, timed)

    def query(self, mark: Mark) -> bool:
        rc = self._query(mark.ev)
        if rc == NOT_READY:
            return False
        if rc:
            _driver.check(rc, "cuEventQuery")
        return True

    def sync(self, mark: Mark) -> None:
        if rc := self._sync(mark.ev):
            _driver.check(rc, "cuEventSynchronize")

    def anchor(self) -> float:
        if self.estimated:
            return 0.0
        best = None
        for _ in range(ANCHOR_TRIES):
            ev = self._pool.take(False, True)
            t0 = perf_counter()
            self.gpu.record(ev, self._ref_stream)
            at, half = anchor(lambda ev=ev: self.gpu.query_event(ev), started=t0)
            if best is None or half < best[2]:
                if best is not None:
                    self._pool.give([Mark(best[0], False, 0.0, 0.0)])
                best = (ev, at, half)
            else:
                self._pool.give([Mark(ev, False, 0.0, 0.0)])
        if self._ref:
            self._pool.give([Mark(self._ref, False, 0.0, 0.0)])
        self._ref, self._anchor, half = best  # type: ignore[misc]
        return half

    def end_s(self, mark: Mark) -> float:
        if self.estimated:
            return mark.t + mark.seconds
        ms = self.gpu.elapsed_ms(self._ref, mark.ev)
        return end_on_host(self._anchor, ms)  # type: ignore[arg-type]

    def release(self, marks: list[Mark]) -> None:
        self._pool.give(marks)

    def prefill(self, n: int, blocking: bool, timed: bool = True) -> None:
        self._pool.fill(n, blocking, timed)

    def close(self) -> None:
        self.gpu.close()
