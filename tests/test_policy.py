"""The waiting policy: max_lateness bounds how seldom a wait is asked, the
spin mechanism never sleeps, and many tasks awaiting short kernels on many
streams all complete, under every loop.

The figures that say how prompt and how cheap this is are the benchmark's
(`python -m cudafd bench lateness`); these tests check counts, which hold on
a loaded machine: a poller can be late, but it never asks more often than
the policy lets it.
"""
from __future__ import annotations

import math
import time

import pytest
from fault_scenario import BYSTANDER_S, SURFACE_BOUND_S
from support import REAL, RUNNING_S, run, until

import cudafd
from cudafd._core import lib as _lib


def _counts():
    s = cudafd.stats()
    return s["queries"], s["wakes"]


@pytest.mark.parametrize("bad", [0, -1, 1e-7, 11.0, math.nan, math.inf])
def test_max_lateness_out_of_range_is_refused(bad):
    with pytest.raises(ValueError, match="max_lateness"):
        cudafd.Notifier("event", max_lateness=bad)


@pytest.mark.parametrize("bad", ["1ms", True, [0.001]])
def test_max_lateness_of_the_wrong_type_is_refused(bad):
    with pytest.raises(TypeError, match="seconds"):
        cudafd.Notifier("event", max_lateness=bad)


def test_max_lateness_default_and_environment(monkeypatch):
    with cudafd.Notifier("event") as n:
        assert n.max_lateness == _lib.MAX_LATENESS_DEFAULT_NS / 1e9
    monkeypatch.setenv("CUDAFD_MAX_LATENESS", "0.001")
    with cudafd.Notifier("event") as n:
        assert n.max_lateness == 0.001
    with cudafd.Notifier("event", max_lateness=0.002) as n:  # the argument wins
        assert n.max_lateness == 0.002
    monkeypatch.setenv("CUDAFD_MAX_LATENESS", "soon")
    with pytest.raises(ValueError, match="CUDAFD_MAX_LATENESS"):
        cudafd.Notifier("event")


def test_a_lazy_budget_asks_a_long_wait_seldom(dev):
    """A 300 ms wait with max_lateness 50 ms: asked after 1/16 of its age but at
    least 12.5 ms apart, so at most ~24 times (the default budget would ask it
    ~800 times). An upper bound: a late poller asks less, never more."""
    s = dev.stream()
    with cudafd.Notifier("event", max_lateness=0.05) as n:
        s.launch(0.3)
        q0, _ = _counts()
        token = n.watch(s)
        deadline = time.monotonic() + 10
        got = []
        while not got and time.monotonic() < deadline:
            got = n.drain()
            time.sleep(0.01)
        queries = _counts()[0] - q0
    assert got == [(token, None)]
    assert 1 <= queries <= 300 / 12.5 + 2, queries


def test_a_wait_is_asked_at_least_once_per_budget(dev):
    """The lower side of the same rule, as a count: a 400 ms wait with a 20 ms
    budget is asked every 5-20 ms, so several times before it ends (a budget
    that was ignored would ask it once, at the end, or never)."""
    s = dev.stream()
    with cudafd.Notifier("event", max_lateness=0.02) as n:
        s.launch(0.4)
        q0, _ = _counts()
        n.watch(s)
        asked = 0
        while asked < 3 and not s.idle():  # at least 400/20 - 1 asks are due before the end
            time.sleep(0.005)
            asked = _counts()[0] - q0
        s.synchronize()
    assert asked >= 3, asked


def test_spin_never_sleeps_while_a_wait_is_pending(dev):
    s = dev.stream()
    with cudafd.Notifier("spin") as n:
        s.launch(RUNNING_S)
        n.watch(s)
        asked = _counts()[0]
        assert until(lambda: _counts()[0] > asked), "the spin poller never asked"
        q0, w0 = _counts()
        time.sleep(0.1)  # the stretch in which it must neither sleep nor stop asking
        q1, w1 = _counts()
        assert not s.idle(), "the kernel ended within the stretch: nothing was tested"
    assert w1 == w0, "the spin poller slept"
    assert q1 > q0, "the spin poller stopped asking"


@pytest.mark.parametrize("mech", ["event", "poll"])
@pytest.mark.parametrize("lateness", [None, 0.05], ids=["default", "lazy"])
def test_a_fault_surfaces_within_the_budget(dev, lateness, loop_flavor, mech):
    if REAL:
        pytest.skip("a fault ends CUDA for the process on a GPU: tests/test_faults.py runs it in a subprocess")
    s, other = dev.stream(), dev.stream()

    async def body(api):
        api.notifier.close()
        api.notifier = cudafd.Notifier(mech, max_lateness=lateness)
        other.launch(BYSTANDER_S)  # a bystander of the fault: only the fault can end its wait
        s.launch(0.01, fault=True)
        t0 = time.monotonic()
        results = []
        for target in (other, s):
            try:
                await api.notifier.wait(target)
                results.append("ok")
            except cudafd.CudaError as e:
                results.append(e.name)
        return results, time.monotonic() - t0

    results, took = run(loop_flavor, mech, body)
    assert results == ["CUDA_ERROR_ILLEGAL_ADDRESS"] * 2
    assert took < SURFACE_BOUND_S, took  # a sixth of the bystander's kernel


def test_many_tasks_on_many_streams_all_complete(dev, flavor, mechanism):
    """64 streams, each a task launching short kernels and awaiting them: the
    shape of a busy service. Every wait completes, in order per stream."""
    streams = [dev.stream() for _ in range(64)]
    rounds = 20

    async def body(api):
        done = [0] * len(streams)

        async def task(i, s):
            for r in range(rounds):
                s.launch(100e-6 * (1 + (i + r) % 5))
                await api.wait(s)
                assert s.idle()
                done[i] += 1

        await api.gather(*(task(i, s) for i, s in enumerate(streams)))
        return done

    assert run(flavor, mechanism, body) == [rounds] * len(streams)
