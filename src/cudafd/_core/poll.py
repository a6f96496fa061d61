"""The "poll" mechanism: no native threads, the caller's loop polls cuEventQuery.

Used where libcudafd.so cannot load (or when asked for). A stream watch
records a pooled ``CU_EVENT_DISABLE_TIMING`` event at the stream's current
end (with the stream's context made current for the record); an event watch
queries the caller's event itself (so it follows the event's latest record at
query time, not at watch time as the native core does). poll() queries what
is pending; finished tokens are queued and an eventfd of our own is written,
so ``fileno()`` behaves like the native notifier's: readable while
completions are queued, and once closed.

Nothing calls poll() unless someone asks: the loop adapters do, on a timer of
the loop's own. A caller of ``Notifier.fileno()`` (a plain select() loop, a
Fence's fd handed to a selector) gets a helper thread instead
(poll_by_itself): a Python thread that takes the Notifier's lock and calls
poll() while anything is pending, at the poll intervals of policy.py, and ends when nothing is pending; the next watch starts it
again. Without it such an fd would never turn readable.

Facts relied on: a stream runs its work in order, so the events recorded on
one stream complete in the order they were recorded, and poll() stops at the
first pending one of each stream. cuEventQuery returns CUDA_SUCCESS,
CUDA_ERROR_NOT_READY, or the context's sticky fault, which is the wait's status.
Destroying an event whose record is still pending is allowed (the driver
frees it once complete).

fork(): in a child forked after the driver was initialised, every call
that would reach the driver raises CudafdError (_fork.MESSAGE), and a
backend made before the fork can only be closed, without a driver call: the
driver is not usable there, and its lock may be held by a thread that did
not come along.

Nothing here is thread-safe by itself: the Notifier serialises calls (the
helper thread takes the Notifier's lock too).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections import deque
from ctypes import byref, c_void_p

from . import driver as _driver, fork as _fork
from .errors import CudaError, CudafdError
from .policy import POLL_MIN, next_delay

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

    def __init__(self) -> None:
        self._fd = -1
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        _count("eventfds", 1)
        self._drv: _driver.Driver | None = None
        self._fork_generation = _fork.generation()  # another one later: made before a fork()
        self._next_token = 1
        # (ctx, stream, thread) -> deque of (token, event, ctx), in record order
        self._lanes: dict[tuple[int, int, int], deque[tuple[int, int, int]]] = {}
        self._lane_of: dict[int, tuple[int, int, int]] = {}
        self._events: dict[int, int] = {}  # token -> caller's event
        self._done: list[tuple[int, int]] = []
        self._retiring: list[tuple[int, int]] = []  # (event, ctx) of cancelled watches
        self._pool: dict[int, list[int]] = {}  # ctx -> idle events
        self._nevents = 0
        self._found = 0  # completions poll() found, ever
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
        ev = c_void_p()
        with drv.current(ctx):
            _driver.check(drv.cuEventCreate(byref(ev), _driver.CU_EVENT_DISABLE_TIMING), "cuEventCreate")  # type: ignore[attr-defined]
        self._nevents += 1
        _count("events", 1)
        return ev.value or 0

    def _destroy_event(self, ev: int) -> None:
        if self._drv is not None and not _fork.forbidden():
            self._drv.cuEventDestroy(ev)  # type: ignore[attr-defined]  # errors: the context is gone
        self._nevents -= 1
        _count("events", -1)

    def _give_event(self, ev: int, ctx: int, status: int) -> None:
        if status == 0 and not self._closed:
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
        if res != 0:
            self._destroy_event(ev)
            raise CudaError(res, where="cuEventRecord on the stream")
        token = self._token()
        key = (ctx, handle, threading.get_ident() if handle == _PER_THREAD_STREAM else 0)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = deque()
        lane.append((token, ev, ctx))
        self._lane_of[token] = key
        self._start_helper()
        return token

    def stream_done(self, handle: int) -> bool:
        return self._get_driver().cuStreamQuery(handle) == 0  # type: ignore[attr-defined]

    def event_done(self, handle: int) -> bool:
        return bool(handle) and self._get_driver().cuEventQuery(handle) == 0  # type: ignore[attr-defined]

    def watch_event(self, handle: int, ctx: int) -> int:
        drv = self._get_driver()
        res = drv.cuEventQuery(handle)  # type: ignore[attr-defined]
        if res in (1, 400, 709):  # invalid value / handle, context destroyed
            raise CudaError(res, where="cuEventQuery (is this a live event?)")
        token = self._token()
        self._events[token] = handle
        self._start_helper()
        return token

    def cancel(self, token: int) -> bool:
        key = self._lane_of.pop(token, None)
        if key is not None:
            lane = self._lanes[key]
            for i, (tok, ev, ctx) in enumerate(lane):
                if tok == token:
                    del lane[i]
                    self._retiring.append((ev, ctx))  # reused once its record completes
                    break
            if not lane:
                del self._lanes[key]
            return True
        return self._events.pop(token, None) is not None

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
        if self._owner is None or self._closed or not self._has_work():
            return
        helper = self._helper
        if helper is not None and helper.is_alive():  # (not alive: left behind by fork())
            return
        owner = self._owner()
        if owner is None:
            return
        helper = threading.Thread(target=self._helper_main, args=(owner,), name="cudafd-poll", daemon=True)
        self._helper = helper
        helper.start()

    def _helper_main(self, owner: object) -> None:
        me = threading.current_thread()
        delay = POLL_MIN
        while True:
            with owner._lock:  # type: ignore[attr-defined]  # (looked up each time: a fork() child gets a new one)
                if self._helper is not me:
                    return
                if self._closed or not self._has_work():
                    self._helper = None
                    return
                before = self._found
                self.poll()
                found = self._found != before
            delay = next_delay(delay, found)
            time.sleep(delay)

    def poll(self) -> None:
        if self._closed or self._drv is None:
            return
        self._refuse_if_forked()
        query = self._drv.cuEventQuery  # type: ignore[attr-defined]
        done = self._done
        before = len(done)
        if self._lanes:
            emptied = []
            for key, lane in self._lanes.items():
                while lane:
                    token, ev, ctx = lane[0]
                    res = query(ev)
                    if res == _NOT_READY:
                        break
                    lane.popleft()
                    del self._lane_of[token]
                    done.append((token, res))
                    self._give_event(ev, ctx, res)
                if not lane:
                    emptied.append(key)
            for key in emptied:
                del self._lanes[key]
        if self._events:
            finished = []
            for token, ev in self._events.items():
                res = query(ev)
                if res != _NOT_READY:
                    finished.append(token)
                    done.append((token, res))
            for token in finished:
                del self._events[token]
        if self._retiring:
            still = []
            for ev, ctx in self._retiring:
                res = query(ev)
                if res == _NOT_READY:
                    still.append((ev, ctx))
                else:
                    self._give_event(ev, ctx, res)
            self._retiring = still
        if len(done) > before:
            self._found += len(done) - before
            if not self._signalled:
                self.signal()

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
        return out

    def signal(self) -> None:
        os.write(self._fd, _ONE)
        self._signalled = True

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
        self._lanes.clear()
        self._lane_of.clear()
        self._events.clear()
        self._retiring.clear()
        self._pool.clear()
        self._done.clear()
        self._owner = None  # the helper sees _closed and ends
        if self._fd >= 0 and not self._signalled:
            self.signal()

    def destroy(self) -> None:
        self.close()
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
            _count("eventfds", -1)

    def live_events(self) -> int:
        return self._nevents
