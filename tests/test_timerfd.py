"""The one-shot timerfd an asyncio loop sleeps on for the waits it times itself."""
from __future__ import annotations

import time

from support import readable

from cudafd._core.timerfd import OneShot


def test_fires_at_the_monotonic_time_it_was_armed_for():
    t = OneShot()
    try:
        t.arm_at(time.monotonic_ns() + 2_000_000_000)
        assert not readable(t, 0.005), "readable before its time"
        start = time.monotonic_ns()
        t.arm_at(start + 20_000_000)  # (arming again replaces the time)
        assert readable(t, 2.0)
        assert time.monotonic_ns() - start >= 20_000_000
        t.clear()
        assert not readable(t, 0), "clear() reads the expiry back"
        t.arm_at(start)  # a time already past: at once
        assert readable(t, 0.5)
        t.clear()
    finally:
        t.close()


def test_disarm_and_relative_arm_and_close():
    t = OneShot()
    t.arm(0.05)
    t.disarm()
    assert not readable(t, 0.1)
    t.arm(0.001)
    assert readable(t, 1.0)
    t.clear()
    t.clear()  # nothing to read: no error
    fd = t.fileno()
    t.close()
    t.close()  # idempotent
    assert t.fileno() == -1 and fd >= 0
