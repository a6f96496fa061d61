"""How the native core chooses between spinning and blocking (mechanism "event").

The poller spins on a new wait for an adaptive budget; once waits keep
outlasting its floor, new waits go straight to a blocking waiter (stat
"direct"), and every 16th still spins, for the whole spin_ns, so the core
notices when waits got short again. Counts, not timings: these hold on any machine."""
from __future__ import annotations

import select

import cudafd


def _wait_one(n: cudafd.Notifier, stream, seconds: float) -> None:
    if seconds:
        stream.launch(seconds)
    token = n.watch(stream)
    p = select.poll()
    p.register(n.fileno(), select.POLLIN)
    while True:
        assert p.poll(10_000), "no completion within 10 s"
        results = dict(n.drain())
        if token in results:
            assert results[token] is None
            return


def test_long_waits_go_straight_to_a_blocker_and_short_ones_spin_again(dev):
    s = dev.stream()
    with cudafd.Notifier("event") as n:
        before = cudafd.stats()
        for _ in range(40):
            _wait_one(n, s, 0.005)
        mid = cudafd.stats()
        # the budget halves from 50 us to its 5 us floor within a few waits,
        # then all but every 16th go straight to a blocker
        assert mid["direct"] - before["direct"] >= 20, (before, mid)
        assert mid["blocked"] - before["blocked"] >= 30, (before, mid)
        for _ in range(64):
            _wait_one(n, s, 0)
        after = cudafd.stats()
        # every 16th wait is a probe that spins for the whole spin_ns (50 us
        # from the poller's first look): these short waits are found spinning.
        # How many more spin after that depends on this machine's timing.
        assert after["spun"] - mid["spun"] >= 1, (mid, after)
        assert after["direct"] - mid["direct"] < 64, (mid, after)
