"""The "poll" mechanism: no native threads, the waiting thread asks cuEventQuery.

Used when asked for, and where libcudafd.so cannot load. A stream
watch records a pooled ``CU_EVENT_DISABLE_TIMING`` event at the stream's
current end (with the stream's context made current for the record); an
event watch queries the caller's event itself (so it follows the event's
latest record at query time, not at watch time as the native core does,
and the caller must not re-record or destroy the event until the wait ends:
docs/guide.md).

Who asks, and when. poll() asks about the head wait of each stream (and each
event watch) that is due, and queues what finished. A head is due again
:func:`policy.ask_interval_ns` after a query found it running, counted from
when it became head (the same schedule as the native core's poller), and
a head due within half of that interval is asked in a poll() that runs
anyway, so heads due at nearby times share one wake (the native poller's
rule, which saved wakes there; here, where the loop's thread is awake most
of the time on several streams, it saved nothing measurable:
docs/performance.md). The backend keeps a timerfd (``timer_fd()``) armed at
the earliest due time, or at once while the eventfd is readable (completions
queued here, or kept by the Notifier for its other kind of drain, or
closed): a loop adapter registers that fd, and on each readable calls poll()
then drains.
So the loop's own thread asks the driver, woken by its own timer, and no
completion is handed across threads. On the H200 host that is earlier than
the "event" mechanism, whose native poller hands each completion to a loop
asleep in epoll, and costs more CPU: each ask wakes the loop, which costs
more than a wake of the native thread (docs/performance.md).

``fileno()`` is an eventfd, readable while completions are queued and once
closed, as with the native mechanisms. A caller of ``Notifier.fileno()`` (a
plain select() loop, a Fence's fd handed to a selector) gets a helper thread
(poll_by_itself): a Python thread that sleeps on the timerfd and, with the
Notifier's lock, calls poll() while anything is pending, ending when nothing
is; the next watch starts it again. Without it such an fd would never turn
readable.

Facts relied on: a stream runs its work in order, so the events recorded on
one stream complete in the order they were recorded, and poll() stops at the
first pending one of each stream. cuEventQuery returns CUDA_SUCCESS,
CUDA_ERROR_NOT_READY, or the context's sticky fault, which is the wait's status.
Destroying an event whose record is still pending is allowed (the driver
frees it once complete). A backend holds a reference to each primary context
it made events in until it closes, as the native core does (its
contexts.c): a caller releasing the primary context meanwhile would
otherwise destroy it under them, and a primary context retained again has
the old one's handle, so a pooled event of the old one would be handed to
the new one: a call given an event of a destroyed context crashed the
process on an H100 (bench/ctx_reuse.py). There a finished wait's event goes
to a pool per context, and a cancelled wait's is asked about until its
record completes, then pooled. In any other context (the caller's own,
which it may destroy once its waits ended or were cancelled: docs/guide.md)
an event lives only as long as its wait: a finished or cancelled wait's
event is destroyed at once.

fork(): in a child forked after the driver was initialised, every call
that would reach the driver raises CudafdError (_fork.MESSAGE), and a
backend made before the fork can only be closed, without a driver call: the
driver is not usable there, and its lock may be held by a thread that did
not come along.

Nothing here is thread-safe by itself: the Notifier serialises calls (the
helper thread takes the Notifier's lock too).
"""

from __future__ import annotations

import math
import os
import select
import sys
import threading
import time
import weakref
from collections import deque
from ctypes import byref, c_void_p

from . import driver as _driver, fork as _fork
from .errors import CudaError, CudafdError
from .policy import ask_interval_ns
from .timerfd import OneShot

__all__ = ["PollBackend", "live_events", "live_eventfds"]

_NOT_READY = 600
_PER_THREAD_STREAM = 2
_ONE = (1).to_bytes(8, sys.byteorder)

_count_lock = threading.Lock()
_live = {"events": 0, "eventfds": 0}


def _count(what: str, delta: int) -> None:
    with _count_lock:
        _live[what] += delta


def live_events() -> int:
    """CUevents created by poll backends and not yet destroyed (process-wide)."""
    return _live["events"]


def live_eventfds() -> int:
    """eventfds opened by poll backends and not yet closed (process-wide)."""
    return _live["eventfds"]


class PollBackend:
    """The "poll" mechanism behind the Backend interface."""

    mechanism = "poll"
    needs_polling = True

    def __init__(self, max_lateness_ns: int) -> None:
        self._fd = -1
        self._timer: OneShot | None = OneShot()
        _count("eventfds", 1)  # counted with the eventfds, as the core counts its poller's timerfd
        try:
            self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except BaseException:
            self._timer.close()
            _count("eventfds", -1)
            raise
        _count("eventfds", 1)
        self._budget = max_lateness_ns
        self._armed = 0  # when the timer fires (monotonic ns), 0: disarmed; -1: at once (completions queued)
        self._drv: _driver.Driver | None = None
        self._fork_generation = _fork.generation()  # another one later: made before a fork()
        self._next_token = 1
        # (ctx, stream, thread) -> deque of (token, event, ctx), in record order
        self._lanes: dict[tuple[int, int, int], deque[tuple[int, int, int]]] = {}
        # lane key, or token of an event watch -> [since, next, step] (ns): its head became head at
        # since, is asked next at next, planned by an interval of step
        self._plans: dict[object, list[int]] = {}
        self._retire_at = 0  # when the cancelled watches' events are asked next
        self._lane_of: dict[int, tuple[int, int, int]] = {}
        self._events: dict[int, int] = {}  # token -> caller's event
        self._done: list[tuple[int, int]] = []
        self._retiring: list[tuple[int, int]] = []  # (event, ctx) of cancelled watches in held contexts
        self._pool: dict[int, list[int]] = {}  # held ctx -> idle events
        self._held: dict[int, int] = {}  # ctx -> the device whose primary context this is (held), else -1
        self._nevents = 0
        self._signalled = False
        self._closed = False
        self._owner: weakref.ref[object] | None = None  # the Notifier whose fileno() asked for the helper
        self._helper: threading.Thread | None = None  # running while set (owner's lock)

    # ---- helpers ----

    def _inherited(self) -> bool:
        return self._fork_generation != _fork.generation()

    def _refuse_if_forked(self) -> None:
        _fork.check()
        if self._inherited():
            raise CudafdError("this Notifier was made before a fork(): in the child it can only be closed; " + _fork.MESSAGE)

    def _get_driver(self) -> _driver.Driver:
        self._refuse_if_forked()
        drv = self._drv
        if drv is None:
            drv = self._drv = _driver.get()
            drv.init()
        return drv

    def _take_event(self, drv: _driver.Driver, ctx: int) -> int:
        pool = self._pool.get(ctx)
        if pool:
            return pool.pop()
        if ctx not in self._held:
            self._held[ctx] = drv.hold_if_primary(ctx)
        ev = c_void_p()
        with drv.current(ctx):
            _driver.check(drv.cuEventCreate(byref(ev), _driver.CU_EVENT_DISABLE_TIMING), "cuEventCreate")  # type: ignore[attr-defined]
        self._nevents += 1
        _count("events", 1)
        return ev.value or 0

    def _destroy_event(self, ev: int) -> None:
        if self._drv is not None and not _fork.forbidden():
            self._drv.cuEventDestroy(ev)  # type: ignore[attr-defined]
        self._nevents -= 1
        _count("events", -1)

    def _give_event(self, ev: int, ctx: int, status: int) -> None:
        """An event whose wait ended: pooled in a held primary context, else destroyed."""
        if status == 0 and not self._closed and self._held.get(ctx, -1) >= 0:
            self._pool.setdefault(ctx, []).append(ev)
        else:
            self._destroy_event(ev)

    def _token(self) -> int:
        token = self._next_token
        self._next_token += 1
        return token

    # ---- Backend ----

    def fileno(self) -> int:
        return self._fd

    def watch_stream(self, handle: int) -> int:
        drv = self._get_driver()
        ctx = drv.stream_ctx(handle)
        ev = self._take_event(drv, ctx)
        with drv.current(ctx):
            res = drv.cuEventRecord(ev, handle)  # type: ignore[attr-defined]
            sid = drv.stream_key(handle)  # not the handle: a new stream may get a destroyed one's
        if res != 0:
            self._destroy_event(ev)
            raise CudaError(res, where="cuEventRecord on the stream")
        token = self._token()
        key = (ctx, sid, threading.get_ident() if handle == _PER_THREAD_STREAM else 0)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = deque()
            self._plan_new(key)
        lane.append((token, ev, ctx))
        self._lane_of[token] = key
        self._start_helper()
        return token

    def stream_done(self, handle: int) -> bool:
        return self._get_driver().cuStreamQuery(handle) == 0  # type: ignore[attr-defined]

    def event_done(self, handle: int) -> bool:
        return bool(handle) and self._get_driver().cuEventQuery(handle) == 0  # type: ignore[attr-defined]

    def stream_key(self, handle: int) -> int:
        return self._get_driver().stream_key(handle)

    def watch_event(self, handle: int, ctx: int) -> int:
        drv = self._get_driver()
        res = drv.cuEventQuery(handle)  # type: ignore[attr-defined]
        if res in (1, 400, 709):  # invalid value / handle, context destroyed
            raise CudaError(res, where="cuEventQuery (is this a live event?)")
        token = self._token()
        self._events[token] = handle
        self._plan_new(token)
        self._start_helper()
        return token

    def cancel(self, token: int) -> bool:
        key = self._lane_of.pop(token, None)
        if key is not None:
            lane = self._lanes[key]
            for i, (tok, ev, ctx) in enumerate(lane):
                if tok == token:
                    del lane[i]
                    if self._held.get(ctx, -1) >= 0:
                        self._retiring.append((ev, ctx))  # pooled once its record completes
                    else:
                        self._destroy_event(ev)  # its context may be destroyed once the wait is let go
                    break
            if not lane:
                del self._lanes[key]
                del self._plans[key]
            if self._retire_at == 0:
                self._retire_at = time.monotonic_ns() + self._budget
            self._arm()
            return True
        if self._events.pop(token, None) is None:
            return False
        del self._plans[token]
        self._arm()
        return True

    def prepare(self, handle: int) -> None:
        """Nothing to make (the poll mechanism has no side streams); a dead
        stream raises CudaError, as with the other mechanisms."""
        drv = self._get_driver()
        ctx = drv.stream_ctx(handle)
        with drv.current(ctx):
            res = drv.cuStreamQuery(handle)  # type: ignore[attr-defined]
        if res not in (0, _NOT_READY):
            raise CudaError(res, where="cuStreamQuery (is this a live stream?)")

    # ---- the helper thread (Notifier.fileno) ----

    def poll_by_itself(self, owner: object, lock: threading.Lock) -> None:
        """From now on, keep a helper thread polling while anything is pending.
        Called with ``lock`` (the owner's ``_lock``) held; the helper takes
        the owner's lock for each poll() and holds ``owner`` (the Notifier)
        alive while it runs, so no finalizer destroys this backend under it."""
        self._owner = weakref.ref(owner)
        self._start_helper()

    def _has_work(self) -> bool:
        return bool(self._lanes or self._events or self._retiring)

    def _start_helper(self) -> None:  # owner's lock held
        if self._owner is None or self._closed or not self._has_work() or self._inherited():
            return  # (inherited by a fork() child: nothing it may ask; its calls say so)
        helper = self._helper
        if helper is not None and helper.is_alive():  # (not alive: left behind by fork())
            return
        owner = self._owner()
        if owner is None:
            return
        # the timer's fd is read here, under the owner's lock: the backend is alive
        helper = threading.Thread(target=self._helper_main, args=(owner, self.timer_fd()), name="cudafd-poll",
                                  daemon=True)
        self._helper = helper
        helper.start()

    def _helper_main(self, owner: object, timer_fd: int) -> None:
        me = threading.current_thread()
        timer = select.poll()
        timer.register(timer_fd, select.POLLIN)
        while True:
            with owner._lock:  # type: ignore[attr-defined]  # (looked up each time: a fork() child gets a new one)
                if self._helper is not me:
                    return
                if self._closed or not self._has_work():
                    self._helper = None
                    return
                self.poll(False)
                queued = self._armed < 0
            if queued:  # the timer stays readable until the fd's reader drains: look again a quarter budget on
                time.sleep(self._budget / 4e9)
            else:  # the timer, or a watch that moved it earlier; at most a budget
                timer.poll(self._budget // 1_000_000 + 1)

    # ---- asking ----

    def timer_fd(self) -> int:
        """Readable when poll() is due, and at once while the eventfd is readable (completions
        queued, or kept by the Notifier for a drain) or once closed."""
        return self._timer.fileno() if self._timer is not None else -1

    def _plan_new(self, key: object) -> None:
        """The plan of a head that became head now (a new lane or event watch); arms the timer."""
        now = time.monotonic_ns()
        step = ask_interval_ns(0, self._budget)
        self._plans[key] = [now, now + step, step]
        if self._armed == 0 or now + step < self._armed:
            self._arm()

    def _asked(self, key: object, plan: list[int], now: int, moved: bool) -> None:
        """A query found the head of ``key`` running (``moved``: a new head, since earlier ones finished)."""
        if moved:
            plan[0] = now
        plan[2] = step = ask_interval_ns(now - plan[0], self._budget)
        plan[1] = now + step

    def _arm(self) -> None:
        """Set the timer: at once while completions are queued, the fd is signalled for a drain
        (the Notifier's completions kept for the other side) or closed, else at the earliest plan."""
        timer = self._timer
        if timer is None:
            return
        if self._done or self._signalled or self._closed:
            at = -1
        else:
            at = min((p[1] for p in self._plans.values()), default=0)
            if self._retiring and (at == 0 or self._retire_at < at):
                at = self._retire_at
        if at == self._armed:
            return
        self._armed = at
        if at == 0:
            timer.disarm()
        else:
            timer.arm_at(1 if at < 0 else at)

    def poll(self, everything: bool = True) -> None:
        """Ask about every head now (``everything``), or only those due; queue what finished; re-arm the timer."""
        if self._closed or self._drv is None:
            return
        self._refuse_if_forked()
        now = time.monotonic_ns()
        now_due = math.inf if everything else now
        query = self._drv.cuEventQuery  # type: ignore[attr-defined]
        done = self._done
        before = len(done)
        plans = self._plans
        if self._lanes:
            emptied = []
            for key, lane in self._lanes.items():
                plan = plans[key]
                if plan[1] - plan[2] // 2 > now_due:  # not due (one due within half of its interval is)
                    continue
                moved = False
                while lane:
                    token, ev, ctx = lane[0]
                    res = query(ev)
                    if res == _NOT_READY:
                        break
                    lane.popleft()
                    del self._lane_of[token]
                    done.append((token, res))
                    self._give_event(ev, ctx, res)
                    moved = True
                if lane:
                    self._asked(key, plan, now, moved)
                else:
                    emptied.append(key)
            for key in emptied:
                del self._lanes[key]
                del plans[key]
        if self._events:
            finished = []
            for token, ev in self._events.items():
                plan = plans[token]
                if plan[1] - plan[2] // 2 > now_due:
                    continue
                res = query(ev)
                if res != _NOT_READY:
                    finished.append(token)
                    done.append((token, res))
                else:
                    self._asked(token, plan, now, False)
            for token in finished:
                del self._events[token]
                del plans[token]
        if self._retiring and self._retire_at <= now_due:
            still = []
            for ev, ctx in self._retiring:
                res = query(ev)
                if res == _NOT_READY:
                    still.append((ev, ctx))
                else:
                    self._give_event(ev, ctx, res)
            self._retiring = still
            self._retire_at = now + self._budget if still else 0
        if len(done) > before and not self._signalled:
            self.signal()
        self._arm()

    def drain(self, clear_fd: bool) -> list[tuple[int, int]]:
        if self._inherited():
            self._refuse_if_forked()
        if self._signalled or clear_fd:
            try:
                os.read(self._fd, 8)
            except BlockingIOError:
                pass
            self._signalled = False
        out, self._done = self._done, []
        if self._armed < 0:
            self._arm()  # the queue is empty now: back to the earliest plan
        return out

    def signal(self) -> None:
        os.write(self._fd, _ONE)
        self._signalled = True
        if self._timer is not None and self._armed >= 0:
            self._armed = -1  # a polling reader drains too (a completion of the Notifier's own, or close)
            self._timer.arm_at(1)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for lane in self._lanes.values():
            for _token, ev, _ctx in lane:
                self._destroy_event(ev)
        for ev, _ctx in self._retiring:
            self._destroy_event(ev)
        for pool in self._pool.values():
            for ev in pool:
                self._destroy_event(ev)
        if self._drv is not None and not _fork.forbidden():
            for dev in self._held.values():
                if dev >= 0:
                    self._drv.cuDevicePrimaryCtxRelease(dev)  # type: ignore[attr-defined]
        self._held.clear()
        self._lanes.clear()
        self._lane_of.clear()
        self._plans.clear()
        self._events.clear()
        self._retiring.clear()
        self._pool.clear()
        self._done.clear()
        self._owner = None  # the helper sees _closed and ends
        if self._fd >= 0 and not self._signalled:
            self.signal()
        self._arm()  # at once, for good: readers drain the close

    def destroy(self) -> None:
        self.close()
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
            _count("eventfds", -1)
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.close()
            _count("eventfds", -1)

    def live_events(self) -> int:
        return self._nevents
