"""Notifier: one file descriptor, many waits. The sans-io core every loop adapter uses.

A Notifier never blocks and never waits: ``watch(target)`` marks a point on a
stream (or an event's record) and returns a token; when the GPU passes the
point, the token is queued and ``fileno()`` becomes readable; ``drain()``
returns every finished token in one batch, with ``None`` or the CudaError of
the awaited work. Any event loop can drive it: wait for the fd to be readable
(level-triggered; after an edge, drain until it returns []), then drain.

Threads: every method may be called from any thread; calls are serialised by
a small lock (ctypes releases the GIL inside native calls, so the lock is
what keeps close() from freeing the native notifier under another call).
Completions are found by native threads (or by poll() for the "poll"
mechanism) that never call into Python.

Ordering: waits on one stream complete in the order they were watched, and
drain() returns them in that order. Across streams it sets no order: a
batch's waits that had nothing to wait for (an event never recorded) come
first, then the others in the order they were found.

Faults: a fault in the awaited work (or a sticky fault of its context) is
reported as a CudaError for that token. Never a hang.

Cancellation: cancel(token) detaches the wait; the GPU work is not cancelled.

Timing (event mechanism): a wait is found at most ``max_lateness`` seconds
after its work ended, plus the time the machine takes to wake a thread
(include/cudafd.h, native/core/waiters.c). Per Notifier, or for the process
with $CUDAFD_MAX_LATENESS.

The loop-adapter protocol: what an event-loop adapter (cudafd/_loops/:
asyncio_loop.py, asyncio_fence.py, trio_loop.py) uses of a Notifier, and all it
uses. The methods are the ``adapter_*`` ones plus ``cancel()``, ``poll()``,
``needs_polling``, ``mechanism`` and ``closed``:

* claim and release: ``adapter_claim(owner)`` makes ``owner`` (the adapter's
  per-loop object, with a ``busy()`` method) the one loop or trio run that
  waits on this Notifier. The claim lapses by itself once ``owner.busy()`` is
  false or the owner is collected (it is held weakly): that is the release.
  A claim while another owner is busy raises CudafdError, and so does an
  ``adapter_watch()`` on a thread other than the latest claim's (a loop on
  another thread claimed while this one's wait had not yet begun).
* ask: where ``adapter_asks`` (the spin mechanism) the adapter's tasks ask
  about their own waits instead of parking: ``adapter_ask(token)`` asks the
  driver on the calling thread (one query) and says whether the wait is
  over, and with what. The core's poller leaves such waits to them and only
  backs them up (every max(max_lateness, 10 ms)), so one core spins (the
  loop's), not two.
* check: ``adapter_done_now(t)`` answers "is this resolved target over by now,
  without error?" with one driver query and no lock (the fast path).
* watch: ``adapter_watch(t)`` starts a wait whose completion only
  ``adapter_drain()`` reports; ``drain()`` returns only the tokens of
  ``watch()``. Each kind of drain keeps the other's completions for it and
  makes the fd readable again, so ``watch()``/``drain()`` and
  ``await n.wait()`` can share one Notifier (a program that polls the fd
  itself must not also register it on the loop the adapter uses).
* poll: where ``needs_polling`` (the "poll" mechanism) nothing asks the
  driver unless the Notifier's user does: ``adapter_poll()`` asks about the
  waits that are due (an adapter calls it whenever its fd is readable, before
  it drains), ``poll()`` about every wait now.
* drain: ``adapter_drain()`` as above; ``cancel(token)`` detaches a wait.
* the fd: ``adapter_hold_fd()`` returns the fd and keeps it open until
  ``adapter_release_fd()``: an adapter holds it while it has a reader
  registered, so the number is never reused under its selector.
* close hooks: ``adapter_on_close(hook)`` runs ``hook()`` after close(), on the
  closing thread, without the Notifier's lock (trio wakes a reader blocked on
  the fd from there).
* state: ``adapter_state(key, make)`` is the adapter's own object for this
  Notifier (``make()`` on first use; ``key`` is the adapter's, e.g. a class),
  kept as long as the Notifier: per-Notifier tables of an adapter live there,
  never in attributes of the Notifier's.

Waiting policy (fast path, asking again, order, poll intervals) is not part of
the protocol: it is cudafd/_core/policy.py, which every adapter follows.

Lifetime: close() (idempotent, any thread) detaches every pending wait and
makes the fd readable; the next drain() returns each token that was pending at
close with a ClosedError, later drains return []. The fd itself is released
once that batch has been drained and no loop adapter holds it (adapters hold
it while they have a reader registered, so the fd number cannot be reused
under their selector); when nothing is pending at close, close() releases it
at once. ``__del__`` only runs the same cleanup. A cancel(), close() or
adapter_release_fd() made from inside one of the Notifier's own calls on the
same thread (a finalizer that a garbage collection runs there, such as a
closed loop's parked task) takes effect at the start of its next call, or
the next close(), instead of deadlocking on its lock.
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

from . import driver as _driver, fork as _fork, lib as _lib, loop_hook
from .backend import Backend
from .errors import ClosedError, CudaError, CudafdError, LibraryError
from .targets import Target, resolve

__all__ = ["Notifier", "MECHANISMS", "check_environment", "default_mechanism"]

MECHANISMS = ("event", "hostfunc", "spin", "poll", "syncfd")
_DONE_TOKEN_BASE = 1 << 63  # tokens of waits complete on arrival (native tokens stay below: waits.c)
_TWO_LOOPS = (
    "this Notifier is already waited on by another event loop or trio run; use one "
    "Notifier per loop (cudafd.wait() without notifier= does that)"
)
_get_ident = threading.get_ident
_LATER_RELEASE, _LATER_CLOSE = -1, -2  # Notifier._later's entries beside tokens (never negative)
_CLOSED_MESSAGE = "the Notifier was closed while this wait was pending (the GPU work is not cancelled)"


def _without(results: list[tuple[int, BaseException | None]], token: int) -> list[tuple[int, BaseException | None]]:
    return [r for r in results if r[0] != token] if results else results


def _run_hooks(hooks: list[Callable[[], None]]) -> None:
    for hook in hooks:
        try:
            hook()
        except Exception:
            pass


def default_mechanism() -> str:
    """$CUDAFD_MECHANISM if set (not blank), else "event"; ValueError naming the variable if it is not a mechanism."""
    raw = os.environ.get("CUDAFD_MECHANISM", "")
    name = raw.strip().lower()
    if not name:
        return "event"
    if name not in MECHANISMS:
        raise ValueError(f"$CUDAFD_MECHANISM={raw!r} is not a cudafd mechanism: choose one of {', '.join(MECHANISMS)}")
    return name


def check_environment() -> None:
    """Raise what Notifier() would raise for a malformed $CUDAFD_MECHANISM or $CUDAFD_MAX_LATENESS (ValueError)."""
    default_mechanism()
    _max_lateness_ns(None)


def _check_mechanism(name: object) -> str:
    if not isinstance(name, str) or name.strip().lower() not in MECHANISMS:
        raise ValueError(f"unknown cudafd mechanism {name!r}: choose one of {', '.join(MECHANISMS)}")
    return name.strip().lower()


def _make_backend(mechanism: str, max_lateness_ns: int | None) -> tuple[str, Backend]:
    if mechanism != "poll":
        try:
            lib = _lib.load()
        except LibraryError as exc:
            warnings.warn(
                f"cudafd: the native library is unavailable, so this Notifier uses the 'poll' "
                f"mechanism instead of {mechanism!r} (the loop polls with a timer; no native "
                f"threads). Why: {exc}",
                RuntimeWarning,
                stacklevel=3,
            )
        else:
            from .native import NativeBackend

            return mechanism, NativeBackend(lib, mechanism, max_lateness_ns)
    from .poll import PollBackend

    return "poll", PollBackend(max_lateness_ns if max_lateness_ns is not None else _lib.MAX_LATENESS_DEFAULT_NS)


def _max_lateness_ns(value: object) -> int | None:
    """max_lateness (seconds) as ns for the core, from the argument or $CUDAFD_MAX_LATENESS."""
    where = "max_lateness"
    if value is None:
        raw = os.environ.get("CUDAFD_MAX_LATENESS", "").strip()
        if not raw:
            return None
        where = "$CUDAFD_MAX_LATENESS"
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{where}={raw!r} is not a number of seconds (e.g. 0.0002)") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{where} is a number of seconds, not {type(value).__qualname__}")
    low, high = _lib.MAX_LATENESS_MIN_NS / 1e9, _lib.MAX_LATENESS_MAX_NS / 1e9
    if not (low <= value <= high):  # (NaN fails too)
        raise ValueError(f"{where}={value!r} s is outside [{low:g}, {high:g}] s")
    return max(_lib.MAX_LATENESS_MIN_NS, min(_lib.MAX_LATENESS_MAX_NS, round(value * 1e9)))


def _wait_error(status: int) -> CudaError | None:
    """What a finished wait with this status raises (None: it succeeded)."""
    return None if status == 0 else CudaError(status, where="the awaited GPU work")


def _in_ctx(t: Target, call: Callable[[int], Any]) -> Any:
    """``call(t.handle)`` for a stream Target, with the context it carries made current
    around it: a default-stream handle of another device's context (targets.py)."""
    if not t.ctx:
        return call(t.handle)
    with _driver.get().pushed(t.ctx):
        return call(t.handle)


class Notifier:
    """A pollable fd plus a queue of finished waits (see the module docstring).

    ``mechanism`` is how the GPU's progress is learnt: "event" (default, or
    $CUDAFD_MECHANISM unless blank), "hostfunc", "spin", "poll" or "syncfd"
    (Jetson, experimental: docs/jetson.md). Where libcudafd.so cannot
    load, "poll" is used instead, with a RuntimeWarning saying why. Raises
    ValueError for an unknown mechanism (naming $CUDAFD_MECHANISM when it
    came from there) and CudafdError when the mechanism cannot be used here
    (see ``python -m cudafd doctor``).

    ``max_lateness`` (seconds; default $CUDAFD_MAX_LATENESS unless blank, else 400 µs):
    with the "event" mechanism the core's poller asks about a wait at least
    this often, so it finds the wait at most this long after its work ended,
    plus the time the machine takes to wake the poller and then the loop
    (100-300 µs together on the H200 virtual machine measured:
    docs/performance.md); a long wait costs about 1/max_lateness poller
    wake-ups per second. Faults surface within it too. With "poll" the
    loop's own thread asks on the same schedule (no poller, no hand-off; a
    wake of the loop per ask). Between 1 µs and 10 s; ValueError otherwise
    (naming $CUDAFD_MAX_LATENESS for a value of it out of range or not a number).
    """

    mechanism: str
    needs_polling: bool

    def __init__(self, mechanism: str | None = None, *, max_lateness: float | None = None) -> None:
        self._closed = True  # first: a half-built object is safe to collect
        self._released = True
        self._backend: Backend | None = None
        name = _check_mechanism(mechanism if mechanism is not None else default_mechanism())
        lateness_ns = _max_lateness_ns(max_lateness)
        self._max_lateness = (lateness_ns if lateness_ns is not None else _lib.MAX_LATENESS_DEFAULT_NS) / 1e9
        # Reentered only by a finalizer that a collection runs inside a locked section
        # (a closed loop's task parked here, a loop's default Notifier): cancel(),
        # adapter_release_fd() and close() then leave their work to the next section
        # (_catch_up) instead of deadlocking or changing state under it.
        self._lock = threading.RLock()
        self._later: list[int] = []  # tokens to cancel, _LATER_RELEASE, _LATER_CLOSE
        _fork.track(self)  # a fresh lock in a fork() child
        self.mechanism, self._backend = _make_backend(name, lateness_ns)
        self.needs_polling = self._backend.needs_polling
        self._fd = self._backend.fileno()
        self._reader_fd = self._backend.timer_fd() if self.needs_polling else self._fd  # adapter_hold_fd()
        self._pending: dict[int, object] = {}  # token -> object kept alive for it
        self._dropped: set[int] = set()  # cancelled after completing: never reported
        self._ready: list[int] = []  # complete on arrival, not yet drained
        self._adapter_tokens: set[int] = set()  # pending tokens of adapter_watch
        self._kept: list[tuple[int, BaseException | None]] = []  # drained by one side, for drain()
        self._kept_adapter: list[tuple[int, BaseException | None]] = []  # ... for adapter_drain()
        self._owner: Callable[[], object | None] | None = None  # the loop adapter's claim (a weakref)
        self._owner_thread = 0  # the thread that made it (0: none yet): only it may adapter_watch()
        self._asked: dict[int, BaseException | None] = {}  # adapter_ask's: reported through the queue
        self._signalled = False  # we wrote the fd for them: the next drain must clear it
        self._next_done = _DONE_TOKEN_BASE
        self._closed_batch: list[tuple[int, BaseException | None]] = []
        self._fd_holds = 0
        self._close_hooks: list[Callable[[], None]] = []
        self._adapter_states: dict[object, object] = {}  # adapter_state()
        self._stream_done = self._backend.stream_done  # for adapter_done_now, looked up once
        self._event_done = self._backend.event_done
        self.adapter_asks = self.mechanism == "spin"  # (always native: no spin without libcudafd)
        self._released = False
        self._closed = False

    # ---- the sans-io interface ----

    def fileno(self) -> int:
        """The fd to poll for readability. Raises ClosedError once it was released after close().

        With the "poll" mechanism nothing native watches the GPU, so the first
        fileno() starts a helper thread (Python, one per Notifier) that asks
        about the pending waits on the mechanism's schedule (each after 1/16
        of its age, within max_lateness/4 and max_lateness), and ends when
        none is pending: the fd then turns readable by itself, as with the
        other mechanisms. The helper keeps the Notifier alive while it runs.
        """
        if self._released:
            raise ClosedError("the Notifier is closed and its fd released")
        if self.needs_polling:
            with self._lock:
                if not self._closed:
                    self._backend.poll_by_itself(self, self._lock)  # type: ignore[union-attr]
        return self._fd

    def watch(self, target: object) -> int:
        """Start a wait and return its token.

        ``target`` is a stream (all work enqueued on it so far) or a recorded
        event (its latest record); see the guide (docs/guide.md) for what is accepted.
        The event may be re-recorded or destroyed once watch() returns, except
        with the "poll" mechanism, which asks about the event itself (its latest
        record then): there not until the wait ends.
        The target object is kept alive until the token is drained or
        cancelled. Raises TypeError/ValueError for a bad target, CudaError if
        the driver refuses (a dead handle, a context that already faulted),
        ClosedError after close().
        """
        return self._watch(resolve(target))

    def prepare(self, stream: object) -> None:
        """Make now every stream this Notifier's waits in ``stream``'s context
        may need later (side streams: the hostfunc mechanism's points and
        waits on events), so that no later wait creates one. Optional; call
        it before the work starts. Why: on an H200 about every 128th stream a
        process creates waits until the GPU has no work in flight, and every
        CUDA call of the process waits behind it (docs/guide.md, "Many
        streams"). Side streams stay until the process exits.
        Raises TypeError for something that is
        not a stream, CudaError for a dead one, ClosedError after close().
        """
        t = resolve(stream)
        if t.kind != "stream":
            raise TypeError(f"prepare() takes a stream, not {type(stream).__qualname__}")
        with self._lock:
            if self._closed:
                raise ClosedError("prepare() on a closed Notifier")
            _in_ctx(t, self._backend.prepare)  # type: ignore[union-attr]

    # ---- the loop-adapter protocol (module docstring) ----

    def adapter_claim(self, owner: Any) -> None:
        """Loop-adapter protocol: make ``owner`` (an adapter's per-loop object, with a
        ``busy()`` method; held weakly) the one that waits on this Notifier. The claim
        lapses once ``owner.busy()`` is false or it is collected. Raises CudafdError while
        another owner still has waits (its ``busy()`` is true): its drains would take the
        new one's completions.

        An owner is busy only once its wait is under way, after its claim; so a loop on
        another thread may claim in between, and the first loop's adapter_watch() then
        raises that error (the claim's thread is the one whose watches go on): two
        loops never hold tokens of one Notifier at once, whose drains would take each
        other's."""
        ref = self._owner
        if ref is not None and ref() is owner and self._owner_thread == _get_ident():
            return
        with self._lock:
            ref = self._owner
            current = ref() if ref is not None else None
            if current is not None and current is not owner and current.busy():
                raise CudafdError(_TWO_LOOPS)
            self._owner = weakref.ref(owner)
            self._owner_thread = _get_ident()

    def adapter_ask(self, token: int) -> tuple[bool, BaseException | None]:
        """Loop-adapter protocol, where ``adapter_asks``: is the wait of this adapter_watch()
        token over? Asks the driver on this thread (native: cudafd_ask_token, one query).
        ``(True, None)`` or ``(True, its CudaError or ClosedError)`` once it is: the token is
        then the caller's, no drain reports it. ``(False, None)`` while its work runs. Each
        wait is over once its own work is: a caller with several waits on one stream asks
        about the first only (policy.py), to end them in watch order. Raises CudafdError
        if the core fails."""
        asked = self._asked
        with self._lock:
            if token in asked:
                return True, asked.pop(token)
            if not self._closed:
                status = self._backend.ask_token(token)  # type: ignore[union-attr]
                if status is None:
                    return False, None
                if status >= 0:
                    del self._pending[token]
                    self._adapter_tokens.discard(token)
                    return True, _wait_error(status)
        # Reported through the queue instead (the poller's backstop, a fault swept from
        # elsewhere, close()): drain, keeping the other tasks' results for their asks.
        for tok, exc in self._drain(True):
            asked[tok] = exc
        if token in asked:
            return True, asked.pop(token)
        raise CudafdError(f"wait {token} is neither pending nor reported: it was cancelled elsewhere")

    def adapter_watch(self, t: Target) -> int:
        """Loop-adapter protocol: watch() of a resolved target (cudafd._core.targets.resolve),
        whose completion only adapter_drain() reports, or, where ``adapter_asks``, that the
        caller learns of with adapter_ask() (the core's poller then only backs it up)."""
        return self._watch(t, asked=self.adapter_asks, adapter=True)

    def adapter_drain(self) -> list[tuple[int, BaseException | None]]:
        """Loop-adapter protocol: drain() of the adapter_watch() tokens only."""
        return self._drain(True)

    def _watch(self, t: Target, asked: bool = False, adapter: bool = False) -> int:
        with self._lock:
            if self._later:
                self._catch_up()
            if self._closed:
                raise ClosedError("watch() on a closed Notifier")
            owner_thread = self._owner_thread
            if adapter and owner_thread and owner_thread != _get_ident():  # another thread's loop claimed since
                raise CudafdError(_TWO_LOOPS)
            kind = t.kind
            backend = self._backend
            if kind == "stream" or kind == "event":
                if self.adapter_asks:  # per wait: watch()'s waits on this Notifier still spin in the core
                    backend.set_asking(asked)  # type: ignore[union-attr]
                if kind == "stream":
                    token = _in_ctx(t, backend.watch_stream)  # type: ignore[union-attr]
                else:
                    token = backend.watch_event(t.handle, t.ctx)  # type: ignore[union-attr]
            else:  # nothing to wait for: report it at the next drain
                token = self._next_done
                self._next_done += 1
                self._signal()
                self._ready.append(token)
            self._pending[token] = t.keep
            if adapter:  # before any drain (another thread's too) can see its completion
                self._adapter_tokens.add(token)
        return token

    def _signal(self) -> None:  # lock held: make the fd readable for a drain to come
        if not self._signalled:
            self._backend.signal()  # type: ignore[union-attr]
            self._signalled = True

    def adapter_done_now(self, t: Target) -> bool:
        """Loop-adapter protocol: True when the resolved target ``t`` (stream or event) has
        finished without error by now: one driver query, no lock. False while it runs, after
        a fault, or once closed (the wait reports those)."""
        if self._closed:
            return False
        kind = t.kind
        if kind == "stream":
            if t.ctx:  # (_in_ctx, inline on the fast path)
                return _in_ctx(t, self._stream_done) == 1
            return self._stream_done(t.handle) == 1  # (ctypes gives 0 or 1)
        if kind == "event":
            return self._event_done(t.handle) == 1
        return True

    def adapter_stream_key(self, t: Target) -> object:
        """Loop-adapter protocol: what the waits of the stream Target ``t`` are kept in
        order by (cudafd_stream_key, in the context ``t`` carries): the driver's id of the
        stream, else its handle, with that context where ``t`` names one. Not the
        handle: a driver hands a new stream the handle of one destroyed just before,
        even while that one's work runs, and its waits would line up behind that work;
        and handle 0 names a default stream of every context."""
        key = _in_ctx(t, self._backend.stream_key)  # type: ignore[union-attr]
        return (t.ctx, key) if t.ctx else key

    def cancel(self, token: int) -> bool:
        """Detach a wait: its token will never be reported by drain(). The GPU work is not cancelled.

        Returns True if the wait was still pending, False if it had already
        finished (its result is discarded) or the token is unknown.
        Raises TypeError for something that is not an int token.
        """
        if isinstance(token, bool) or not isinstance(token, int):
            raise TypeError(f"a wait token is an int from watch(), not {type(token).__qualname__}")
        if token < 0:  # (never a token: watch() gives none below zero)
            return False
        if self._lock._is_owned():  # type: ignore[attr-defined]  # (see __init__)
            self._later.append(token)
            return False
        with self._lock:
            if self._later:
                self._catch_up()
            return self._cancel(token)

    def _cancel(self, token: int) -> bool:  # lock held
        if token not in self._pending:
            # Finished already: its result, wherever it waits to be taken, goes (asked
            # about by adapter_ask, kept by the other side's drain, or close()'s batch).
            self._asked.pop(token, None)
            self._kept = _without(self._kept, token)
            self._kept_adapter = _without(self._kept_adapter, token)
            if self._closed:
                self._closed_batch = _without(self._closed_batch, token)
                self._release_if_idle()
            self._adapter_tokens.discard(token)
            return False
        del self._pending[token]
        self._adapter_tokens.discard(token)
        if token >= _DONE_TOKEN_BASE:
            self._ready.remove(token)
            return False
        if self._backend.cancel(token):  # type: ignore[union-attr]
            return True
        self._dropped.add(token)
        return False

    def _catch_up(self) -> None:  # lock held: what a reentered cancel(), adapter_release_fd() or close() left
        later = self._later
        while later:
            token = later.pop(0)
            if token == _LATER_RELEASE:
                self._fd_holds -= 1
            elif token == _LATER_CLOSE:
                _run_hooks(self._close_locked())  # (its hooks' calls back here are put off again)
            else:
                self._cancel(token)
        self._release_if_idle()

    def drain(self) -> list[tuple[int, BaseException | None]]:
        """Every wait of watch() finished since the last drain, as (token, None or exception).

        The exception is a CudaError for a fault, or a ClosedError for the
        waits that were pending when close() was called (reported by the first
        drain after close; later drains return []). Never blocks. Waits of
        ``await n.wait()`` on this Notifier are not reported here: their
        coroutines get them.
        """
        return self._drain(False)

    def _drain(self, for_adapter: bool) -> list[tuple[int, BaseException | None]]:
        with self._lock:
            if self._later:
                self._catch_up()
            if self._closed:  # the batch of close(), each side its own
                mine = self._adapter_tokens
                out = [r for r in self._closed_batch if (r[0] in mine) == for_adapter]
                self._closed_batch = [r for r in self._closed_batch if (r[0] in mine) != for_adapter]
                if for_adapter:
                    self._adapter_tokens = set()
                self._release_if_idle()
                return out
            clear = self._signalled
            self._signalled = False
            backend = self._backend
            raw = backend.drain(clear)  # type: ignore[union-attr]
            if not raw and not self._ready and not self._kept and not self._kept_adapter:
                return []
            pending = self._pending
            results: list[tuple[int, BaseException | None]] = []
            ready = self._ready
            if ready:
                self._ready = []
                for token in ready:
                    del pending[token]
                    results.append((token, None))
            dropped = self._dropped
            for token, status in raw:
                if dropped and token in dropped:
                    dropped.discard(token)
                    continue
                pending.pop(token, None)
                results.append((token, _wait_error(status)))
            mine_list, other_list = (self._kept_adapter, self._kept) if for_adapter else (self._kept, self._kept_adapter)
            out = mine_list[:]
            mine_list.clear()
            adapter = self._adapter_tokens
            for r in results:
                if r[0] in adapter:
                    adapter.discard(r[0])
                    (out if for_adapter else other_list).append(r)
                else:
                    (other_list if for_adapter else out).append(r)
            if other_list:  # the other side's: the fd stays readable for it
                self._signal()
            return out

    def poll(self) -> None:
        """Look for progress now. Needed only when ``needs_polling`` (the "poll" mechanism); else a no-op."""
        if self.needs_polling:
            with self._lock:
                if not self._closed:
                    self._backend.poll(True)  # type: ignore[union-attr]

    def adapter_poll(self) -> None:
        """Loop-adapter protocol: with the "poll" mechanism, ask about the waits that are due
        (call it whenever the adapter_hold_fd() fd is readable, before draining); else a no-op."""
        if self.needs_polling:
            with self._lock:
                if not self._closed:
                    self._backend.poll(False)  # type: ignore[union-attr]

    @property
    def max_lateness(self) -> float:
        """The max_lateness (seconds) this Notifier was made with (read-only)."""
        return self._max_lateness

    @property
    def pending(self) -> int:
        """Waits not yet reported by drain() (nor cancelled)."""
        return (len(self._pending) + len(self._closed_batch) + len(self._kept) + len(self._kept_adapter)
                + len(self._asked))

    def statistics(self) -> dict[str, int]:
        """Counts of this Notifier's state now, by name (for tests and monitoring; any thread).

        - ``pending``: waits not yet reported (nor cancelled), as the property;
        - ``watched``: of those, the waits of watch(), which drain() reports;
        - ``awaited``: of those, the waits of ``await n.wait()`` (cudafd.wait
          with notifier=n), which the event loop's adapter reports;
        - ``loop_busy``: 1 while an event loop or trio run has a wait in
          progress on this Notifier (a wait from another loop is refused
          meanwhile), else 0;
        - ``fd_holds``: event-loop readers registered on the fd (it stays open
          while there is one);
        - ``fd_open``: 1 until the fd is released after close();
        - ``events``: CUevents the "poll" mechanism holds for this Notifier
          (the native mechanisms' events are counted by cudafd.stats()).
        """
        with self._lock:
            if self._later:
                self._catch_up()
            adapter = self._adapter_tokens
            awaited = (
                sum(1 for token in self._pending if token in adapter)
                + len(self._kept_adapter)
                + len(self._asked)
                + sum(1 for token, _ in self._closed_batch if token in adapter)
            )
            pending = self.pending
            ref = self._owner
            owner = ref() if ref is not None else None
            return {
                "pending": pending,
                "watched": pending - awaited,
                "awaited": awaited,
                "loop_busy": int(owner is not None and bool(owner.busy())),
                "fd_holds": self._fd_holds,
                "fd_open": int(not self._released),
                "events": self._live_events(),
            }

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._closed

    def close(self) -> None:
        """Close: wake every pending waiter with ClosedError. Idempotent; any thread.

        Every pending wait is detached (its GPU work goes on) and reported by
        the next drain() with a ClosedError; the fd becomes readable. Later
        watch() raises ClosedError.
        """
        lock = getattr(self, "_lock", None)
        if lock is None or self._backend is None:
            return
        if lock._is_owned():  # (see __init__)
            self._later.append(_LATER_CLOSE)
            return
        with lock:
            self._catch_up()
            hooks = self._close_locked()
        _run_hooks(hooks)  # outside the lock: a hook may give the fd back

    def _close_locked(self) -> list[Callable[[], None]]:  # lock held; returns the hooks to run
        if self._closed:
            return []
        self._closed = True
        self._backend.close()  # type: ignore[union-attr]
        self._adapter_tokens.update(token for token, _ in self._kept_adapter)  # still the adapter's
        self._closed_batch = self._kept + self._kept_adapter + [
            (token, ClosedError(_CLOSED_MESSAGE)) for token in self._pending
        ]
        self._kept, self._kept_adapter = [], []
        self._pending.clear()
        self._ready = []
        self._dropped.clear()
        self._catch_up()  # (a collection may have run in this section too)
        return list(self._close_hooks)

    # ---- fd ownership, for loop adapters ----

    def adapter_hold_fd(self) -> int:
        """Loop-adapter protocol: keep the fds open until adapter_release_fd(); call it before
        registering a reader. Returns the fd to register: fileno()'s, or with the "poll"
        mechanism the backend's timer, readable when adapter_poll() is due and while
        fileno() is (completions queued for either kind of drain, or closed). Raises
        ClosedError once the fds were released."""
        with self._lock:
            if self._later:
                self._catch_up()
            if self._released:
                raise ClosedError("the Notifier is closed")
            self._fd_holds += 1
            return self._reader_fd

    def adapter_on_close(self, hook: Callable[[], None]) -> None:
        """Loop-adapter protocol: call ``hook()`` after close() (on the closing thread,
        without the Notifier's lock held)."""
        with self._lock:
            self._close_hooks.append(hook)

    def adapter_release_fd(self) -> None:
        """Loop-adapter protocol: undo adapter_hold_fd(); call it after removing the reader."""
        if self._lock._is_owned():  # type: ignore[attr-defined]  # (see __init__)
            self._later.append(_LATER_RELEASE)
            return
        with self._lock:
            self._fd_holds -= 1
            self._catch_up()

    def _release_if_idle(self) -> None:  # lock held
        if self._closed and not self._released and not self._closed_batch and self._fd_holds <= 0:
            self._released = True
            self._backend.destroy()  # type: ignore[union-attr]

    def adapter_state(self, key: object, make: Callable[[], object]) -> Any:
        """Loop-adapter protocol: the adapter's object for this Notifier under ``key``
        (made by ``make()`` on first use), kept as long as the Notifier. Loop thread only."""
        states = self._adapter_states
        state = states.get(key)
        if state is None:
            state = states[key] = make()
        return state

    def _live_events(self) -> int:
        backend = self._backend
        return backend.live_events() if backend is not None and not self._released else 0

    # ---- conveniences ----

    def wait(self, target: object) -> Coroutine[Any, Any, None]:
        """``await n.wait(target)``: cudafd.wait(target, notifier=n)."""
        return loop_hook.wait(target, notifier=self)

    def __enter__(self) -> Notifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if self._released or self._backend is None:
            return
        self._closed = True
        self._released = True
        try:
            self._backend.destroy()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"  # fd=-1 once the fd was released
        fd = -1 if self._released else self._fd
        return (
            f"<cudafd.Notifier fd={fd} mechanism={getattr(self, 'mechanism', '?')!r} "
            f"pending={self.pending if hasattr(self, '_pending') else 0} {state}>"
        )
