"""The interface between a Notifier and the mechanism that learns of GPU progress.

Two implementations: ``native.NativeBackend`` (the C core: mechanisms
"event", "hostfunc", "spin", "syncfd"; for spin also ``ask_token`` and
``set_asking``, Notifier.adapter_ask) and ``poll.PollBackend`` (pure Python over the
driver: mechanism "poll"). The Notifier serialises every call under its own
lock, so a backend needs no locking of its own, and it keeps the bookkeeping
that is the same for both (which tokens are pending, what close() reports).

Tokens are nonzero ints below 2**63; the Notifier uses the upper half for
waits that are complete on arrival.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Backend"]


class Backend(Protocol):
    mechanism: str
    needs_polling: bool  # True: nothing wakes the fd unless poll() is called (or a helper thread does: poll.py)

    def fileno(self) -> int:
        """The eventfd that is readable while completions are queued (and once closed)."""
        ...

    def prepare(self, handle: int) -> None:
        """Make now the streams later waits in the stream's context may need (cudafd_prepare)."""
        ...

    def watch_stream(self, handle: int) -> int:
        """Mark the stream's current end; return the token. Raises CudaError / CudafdError."""
        ...

    def watch_event(self, handle: int, ctx: int) -> int:
        """Watch the event's latest record (ctx: the context to make current, 0 = as is)."""
        ...

    def stream_done(self, handle: int) -> bool:
        """True when all work enqueued on the stream so far finished without error (False: watch it)."""
        ...

    def event_done(self, handle: int) -> bool:
        """True when the event's latest record finished without error (False: watch it)."""
        ...

    def stream_key(self, handle: int) -> int:
        """What this backend keeps one stream's waits together by (cudafd_stream_key): the
        driver's id of the stream where it has one, else the handle."""
        ...

    def cancel(self, token: int) -> bool:
        """Detach a wait: True if it was pending, False if it had completed (queued) or is unknown."""
        ...

    def drain(self, clear_fd: bool) -> list[tuple[int, int]]:
        """Take every queued completion as (token, status); clear_fd: the fd was also written by the caller."""
        ...

    def signal(self) -> None:
        """Make the fd readable (the caller queued a completion of its own)."""
        ...

    def poll(self, everything: bool) -> None:
        """Look for progress now (the poll mechanism: every wait, or those due); a no-op where threads do it."""
        ...

    def timer_fd(self) -> int:
        """The poll mechanism: an fd readable when poll() is due and while fileno() is (else -1)."""
        ...

    def close(self) -> None:
        """Detach every wait and make the fd readable; idempotent."""
        ...

    def destroy(self) -> None:
        """close(), then release the fd and everything else; nothing may follow."""
        ...

    def live_events(self) -> int:
        """CUevents this backend holds (0 where the native core counts them itself)."""
        ...
