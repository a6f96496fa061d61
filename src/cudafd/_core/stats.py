"""Live counts for leak checks: the native core's (cudafd_stats) plus the poll mechanism's."""

from __future__ import annotations

from ctypes import c_int64

from . import lib as _lib, poll as _poll

__all__ = ["stats"]


def stats() -> dict[str, int]:
    """Live counts of what cudafd holds now, by name.

    From the native core (when it loads): ``threads``, ``events``,
    ``eventfds``, ``pending``, ``notifiers``, ``contexts``, ``streams`` (live)
    ``notifications`` (host functions in flight), and ``completed``,
    ``faults``, ``queries``, ``wakes`` (cumulative: ``queries`` counts the
    event queries of the poller and of the spin mechanism's asks, ``wakes``
    the poller's wakes from sleep). ``eventfds``
    includes the poller's timerfd while it runs. From the pure-Python "poll"
    mechanism: ``poll_events`` and ``poll_eventfds``.
    Native waiter threads may linger briefly after the last wait; every other
    live count returns to zero once all Notifiers are closed and drained,
    but ``streams`` and ``contexts``: a context's side streams, once made,
    are kept for later Notifiers until the process exits, so that those
    make none (the C call ``cudafd_release_idle()`` destroys those of every
    context with no wait in flight; docs/guide.md, "Many streams").
    """
    out: dict[str, int] = {}
    lib = _lib.try_load()
    if lib is not None:
        values = (c_int64 * _lib.STAT_COUNT)()
        n = lib.cudafd_stats(values, _lib.STAT_COUNT)
        for i in range(max(0, min(n, _lib.STAT_COUNT))):
            raw = lib.cudafd_stat_name(i)
            out[raw.decode() if raw else f"stat{i}"] = int(values[i])
    out["poll_events"] = _poll.live_events()
    out["poll_eventfds"] = _poll.live_eventfds()
    return out
