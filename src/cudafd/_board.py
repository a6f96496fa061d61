"""The answer board (native/core/board.c) for the asyncio adapter's busy path.

A loop whose tasks each launch work and await it spends its one core on
launches, task switches and, per await, one driver query to learn whether
the work is over. The board's native thread makes those queries instead: a
wait announces its point (``want``: one call, an atomic add), yields, and on
resuming reads the answer as a word of memory (``done[slot] == w``), with no
driver call. A point not answered by then is asked about the usual way, so a
late answer, a fault or a lost wake only costs that query.

One Board per Dispatcher (one loop's thread), a slot per stream (its Line).
Destroyed when the Dispatcher is collected; its thread exits on its own after
20 ms with nothing to ask, so an idle loop holds no thread.

Memory order: the answer is read with a plain load (a memoryview item), and
what the caller reads next (results the work wrote to mapped host memory,
say) must not be read before it. That holds where loads are not reordered
with later loads: x86 (TSO). Elsewhere (aarch64: Jetson) no Board is made,
and the busy path asks the driver itself, whose call orders the loads.
"""

from __future__ import annotations

import ctypes
import platform
import weakref
from ctypes import byref, c_int64, c_void_p

from . import _lib

__all__ = ["Board", "STATS"]

SLOTS = 1024  # streams bound at once (a Line each: LINES_KEEP empty ones plus those pending)
LOADS_IN_ORDER = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")  # see "Memory order"
STATS = ("queries", "answers", "starts", "wakes")


def _words(addr: int | None, n: int) -> memoryview:
    return memoryview((ctypes.c_uint32 * n).from_address(addr or 0)).cast("B").cast("I")


class Board:
    """A native board; ``want``/``ptr``/``done`` are read on the hot path."""

    __slots__ = ("ptr", "want", "done", "wants", "_lib", "__weakref__")

    @classmethod
    def create(cls, owner: object) -> Board | None:
        """A board living as long as ``owner``, or None where the native core
        or the driver is unavailable, or loads may be reordered (the busy
        path then asks the driver itself)."""
        lib = _lib.try_load() if LOADS_IN_ORDER else None
        if lib is None:
            return None
        ptr = c_void_p()
        if lib.cudafd_board_create(SLOTS, byref(ptr)) != 0:
            return None
        return cls(lib, ptr.value, owner)

    def __init__(self, lib: ctypes.CDLL, ptr: int | None, owner: object) -> None:
        self._lib = lib
        self.ptr = ptr
        want, done = c_void_p(), c_void_p()
        n = lib.cudafd_board_words(ptr, byref(want), byref(done))
        self.wants = _words(want.value, n)  # read only: to tell whether a want is unanswered
        self.done = _words(done.value, n)
        self.want = lib.cudafd_board_want  # want(ptr, slot) -> w (>= 0), or an error (< 0)
        weakref.finalize(owner, lib.cudafd_board_destroy, ptr)

    def bind(self, stream: int) -> int:
        """A slot for ``stream``, or -1 (a default stream, or every slot bound)."""
        slot: int = self._lib.cudafd_board_bind(self.ptr, stream)
        return slot if slot >= 0 else -1

    def settle(self, slot: int, unbind: bool) -> None:
        """The last wait on the slot's stream ended with its want unanswered
        (``wants[slot] != done[slot]``, or ``unbind``): forget the want, so
        the stream is not queried after this, and free the slot if ``unbind``."""
        if unbind:
            self._lib.cudafd_board_unbind(self.ptr, slot)
        else:
            self._lib.cudafd_board_drop(self.ptr, slot)

    def stats(self) -> dict[str, int]:
        """The board's counts (tests, benchmarks)."""
        out = (c_int64 * len(STATS))()
        self._lib.cudafd_board_stats(self.ptr, out, len(STATS))
        return dict(zip(STATS, out))
