"""The native backend: a ``cudafd_notifier`` of libcudafd.so behind the Backend interface.

Facts from include/cudafd.h relied on here: the fd is readable exactly while
completions are queued or the notifier is closed; ``cudafd_drain`` that empties
the queue clears the fd under the producers' lock, so draining until a short
batch comes back never loses or repeats a completion; after close, drain
returns CUDAFD_E_CLOSED once the queue is empty. ctypes releases the GIL for
every call, and no native thread ever calls back into Python.
"""

from __future__ import annotations

import ctypes
import os
import sys
from ctypes import byref, c_uint64, c_void_p

from . import lib as _lib
from .errors import E_CLOSED, E_UNKNOWN_TOKEN

__all__ = ["NativeBackend", "BATCH"]

BATCH = 256  # completions per cudafd_drain call (16 bytes each)
_ONE = (1).to_bytes(8, sys.byteorder)


class NativeBackend:
    """One native notifier. Not thread-safe by itself: the Notifier serialises calls."""

    needs_polling = False

    def __init__(self, lib: ctypes.CDLL, mechanism: str, max_lateness_ns: int | None = None) -> None:
        self._ptr: c_void_p | None = None
        self._lib = lib
        self.mechanism = mechanism
        ptr = c_void_p()
        rc = lib.cudafd_notifier_create(_lib.NATIVE_MECHANISMS[mechanism], byref(ptr))
        _lib.raise_for(lib, rc, f"creating a notifier (mechanism {mechanism!r})")
        self._ptr = ptr
        self._fd: int = lib.cudafd_notifier_fd(ptr)
        if max_lateness_ns is not None:
            rc = lib.cudafd_notifier_set_max_lateness(ptr, max_lateness_ns)
            if rc:
                self.destroy()
                _lib.raise_for(lib, rc, "setting max_lateness")
        self._token = c_uint64()
        self._token_ref = ctypes.pointer(self._token)
        raw = bytearray(BATCH * ctypes.sizeof(_lib.Completion))
        self._buf = (_lib.Completion * BATCH).from_buffer(raw)
        view = memoryview(raw)
        self._u64 = view.cast("Q")  # tokens at even indexes
        self._i64 = view.cast("q")  # statuses at odd indexes
        self._c_watch_stream = lib.cudafd_watch_stream
        self._c_watch_event = lib.cudafd_watch_event
        self._c_drain = lib.cudafd_drain
        self._c_cancel = lib.cudafd_cancel
        self._c_ask_token = lib.cudafd_ask_token
        self._set_asking = lib.cudafd_notifier_set_asking
        self._asking = False  # cudafd_notifier_set_asking's state
        self._status = ctypes.c_int64()
        self._status_ref = ctypes.pointer(self._status)
        self.stream_done = lib.cudafd_stream_done  # ctypes returns 0/1: a bool in all but type
        self.event_done = lib.cudafd_event_done
        self.stream_key = lib.cudafd_stream_key

    def fileno(self) -> int:
        return self._fd

    def ask_token(self, token: int) -> int | None:
        """spin: is the wait of ``token`` over? Its status (0 or a CUresult) if it is, now the
        caller's; None while it runs; -1 if it is not pending here (queued, or cancelled)."""
        rc = self._c_ask_token(self._ptr, token, self._status_ref)
        if rc == 1:
            return self._status.value
        if rc == 0:
            return None
        if rc == E_UNKNOWN_TOKEN:
            return -1
        _lib.raise_for(self._lib, rc, "asking about a wait")
        return None

    def set_asking(self, on: bool) -> None:
        """spin: the waits watched from now on are asked about by their caller (ask_token),
        the poller only backing it up, every max(max_lateness, 10 ms) (cudafd_notifier_set_asking).
        A call that changes nothing costs no native call."""
        if on == self._asking:
            return
        rc = self._set_asking(self._ptr, 1 if on else 0)
        if rc:
            _lib.raise_for(self._lib, rc, "leaving the waits to the caller's asks")
        self._asking = on

    def prepare(self, handle: int) -> None:
        rc = self._lib.cudafd_prepare(self._ptr, handle)
        if rc:
            _lib.raise_for(self._lib, rc, "preparing the stream's context")

    def watch_stream(self, handle: int) -> int:
        rc = self._c_watch_stream(self._ptr, handle, self._token_ref)
        if rc:
            _lib.raise_for(self._lib, rc, "watching the stream")
        return self._token.value

    def watch_event(self, handle: int, ctx: int) -> int:
        if ctx:
            from . import driver as _driver

            with _driver.get().current(ctx):
                rc = self._c_watch_event(self._ptr, handle, self._token_ref)
        else:
            rc = self._c_watch_event(self._ptr, handle, self._token_ref)
        if rc:
            _lib.raise_for(self._lib, rc, "watching the event")
        return self._token.value

    def watch_fence(self, handle: int, is_event: bool, ctx: int | None) -> tuple[int, int]:
        """The syncfd mechanism's watch that also makes a sync_file: (token, fd)."""
        from .syncfd import native_watch_fence

        return native_watch_fence(self._lib, self._ptr, self._token_ref, handle, is_event, ctx)

    def cancel(self, token: int) -> bool:
        rc = self._c_cancel(self._ptr, token)
        if rc == 0:
            return True
        if rc in (E_UNKNOWN_TOKEN, E_CLOSED):
            return False
        _lib.raise_for(self._lib, rc, "cancelling a wait")
        return False

    def drain(self, clear_fd: bool) -> list[tuple[int, int]]:
        if clear_fd:  # read first, then drain: a later push writes the fd again
            try:
                os.read(self._fd, 8)
            except BlockingIOError:
                pass
        out: list[tuple[int, int]] = []
        ptr, buf, c_drain = self._ptr, self._buf, self._c_drain
        while True:
            n = c_drain(ptr, buf, BATCH)
            if n < 0:
                if n == E_CLOSED:
                    break
                _lib.raise_for(self._lib, n, "draining completions")
            if n:
                tokens = self._u64[0 : 2 * n : 2].tolist()
                out.extend(zip(tokens, self._i64[1 : 2 * n : 2].tolist(), strict=True))
            if n < BATCH:
                break
        return out

    def signal(self) -> None:
        os.write(self._fd, _ONE)

    def poll(self, everything: bool) -> None:
        pass

    def timer_fd(self) -> int:
        return -1

    def close(self) -> None:
        if self._ptr is not None:
            self._lib.cudafd_notifier_close(self._ptr)

    def destroy(self) -> None:
        ptr, self._ptr = self._ptr, None
        if ptr is not None:
            self._lib.cudafd_notifier_destroy(ptr)

    def live_events(self) -> int:
        return 0
