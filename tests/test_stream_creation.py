"""A hostfunc watch never creates a stream under load.

Now and then (about every 128th stream of a process on an H200) a stream
creation blocks until the device has no work in flight, and every call into
the context, from any thread, waits behind it (bench/hostfunc_stall.py; the
simulator blocks at every 128th stream of a context). The hostfunc mechanism
takes a side stream per stream it watches at once, so its first watch in a
context makes them all: a later watch, behind however much work, never makes
one. The test brings the context to one stream short of the simulator's
boundary, holds waits behind a gate, and checks that no watch blocked."""
from __future__ import annotations

import time

import pytest

import cudafd
from support import REAL, first_watch, release_idle, run, until
from test_host_notifications import SLOW_WATCH_S, _complete_in_order, _gate, _watch_all

BOUNDARY = 128  # the simulator's CUDAFDSIM_STREAM_BLOCK


def _pad_to_boundary(dev, made_by_gate: int = 1) -> None:
    """Create streams until the next one the context makes after the gate's
    is the simulator's blocking one (on a GPU: another 100, a boundary or not)."""
    if REAL:
        for _ in range(100):
            dev.stream()
        return
    while len(dev.streams) + cudafd.stats()["streams"] + made_by_gate < BOUNDARY - 1:
        dev.stream()


def test_hostfunc_watches_make_no_stream_under_load(dev):
    streams = [dev.stream() for _ in range(40)]
    with cudafd.Notifier("hostfunc") as n:
        first_watch(n, streams[0])
        made = cudafd.stats()["streams"]
        assert made > 1, "the first watch made at most one side stream: nothing was tested"
        _pad_to_boundary(dev)
        with _gate(dev, streams) as closed:
            # 80 waits on 40 streams: made one by one, more side streams would cross the boundary
            order, slowest = _watch_all(n, streams, 2)
            assert slowest < SLOW_WATCH_S, f"a watch blocked {slowest:.2f} s on a stream creation"
            assert closed(), "the gate opened before the watches ended: nothing was tested"
            assert cudafd.stats()["streams"] == made, "a watch under load made a stream"
            _complete_in_order(n, order)


def test_prepare_refuses_what_it_cannot_prepare(dev, mechanism):
    s = dev.stream()
    n = cudafd.Notifier(mechanism)
    with pytest.raises(TypeError):
        n.prepare(object())
    n.prepare(s)  # the poll mechanism has nothing to make, and says nothing
    n.close()
    with pytest.raises(cudafd.ClosedError):
        n.prepare(s)


def test_module_prepare_uses_the_running_loops_default_notifier(dev, loop_flavor):
    s = dev.stream()

    async def body(api):
        before = cudafd.stats()["streams"]
        cudafd.prepare(s)
        made = cudafd.stats()["streams"]
        assert made >= before + 32, f"cudafd.prepare() made {made - before} streams"
        s.launch(0.005)
        await cudafd.wait(s)  # the Notifier it prepared is the one cudafd.wait() uses
        assert cudafd.stats()["streams"] == made
        with pytest.raises(TypeError):
            cudafd.prepare(object())

    run(loop_flavor, "event", body, prepare=False)


def test_module_prepare_in_trio_guest_mode(dev):
    """trio run as a guest of an asyncio loop: its tasks see the host's asyncio loop
    running, yet cudafd.prepare() and cudafd.wait() serve trio's default Notifier."""
    import asyncio

    trio = pytest.importorskip("trio")
    s = dev.stream()

    async def guest() -> int:
        before = cudafd.stats()["streams"]
        cudafd.prepare(s)
        made = cudafd.stats()["streams"]
        s.launch(0.005)
        await cudafd.wait(s)  # the Notifier it prepared is the one cudafd.wait() uses
        assert cudafd.stats()["streams"] == made
        return made - before

    async def host() -> int:
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        trio.lowlevel.start_guest_run(
            guest, run_sync_soon_threadsafe=loop.call_soon_threadsafe, done_callback=done.set_result
        )
        return (await done).unwrap()

    assert asyncio.run(host()) >= 32, "cudafd.prepare() made too few streams"


def test_module_prepare_needs_a_running_loop(dev):
    with pytest.raises(cudafd.CudafdError):
        cudafd.prepare(dev.stream())


def test_prepare_returns_once_the_streams_are_made(dev):
    """Two notifiers prepare one context at once: the second waits for the
    first's streams rather than return with them half made. On the simulator
    the second starts while the first is held in the creation of the
    context's 128th stream until the gate opens; on a GPU, once the first
    has made a stream (which creation a GPU holds up, if any, is not known)."""
    import threading

    streams = [dev.stream() for _ in range(2)]
    errors: list[BaseException] = []

    def prepare_first() -> None:
        try:
            n1.prepare(streams[0])
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    with cudafd.Notifier("event") as n1, cudafd.Notifier("event") as n2:
        _pad_to_boundary(dev, made_by_gate=11)  # the 11th stream the first prepare makes is the 128th
        with _gate(dev, streams) as closed:
            first = threading.Thread(target=prepare_first)
            if REAL:
                first.start()
                assert until(lambda: cudafd.stats()["streams"] > 0 or not first.is_alive()), (
                    "the first prepare made no stream in 10 s")
            else:
                # the simulator counts a stream before its creation waits for the context to
                # drain, the core once the creation has returned
                blocking = BOUNDARY - len(dev.streams) - cudafd.stats()["streams"]
                assert 0 < blocking <= 32, f"the context's 128th stream would be the {blocking}th of the first prepare's 32"
                sim_streams = dev.drv.sim.stats
                held = sim_streams()["streams"] + blocking
                first.start()
                assert until(lambda: sim_streams()["streams"] >= held), (
                    f"the first prepare did not reach its {blocking}th stream in 10 s")
                assert closed() and first.is_alive(), (
                    "the gate opened before the first prepare reached the context's 128th stream: nothing was tested")
                assert cudafd.stats()["streams"] == blocking - 1, "the first prepare went past the 128th stream"
            n2.prepare(streams[1])
            made = cudafd.stats()["streams"]
            gate_closed = closed()
            first.join()
        assert not errors, errors
        assert made >= 32, f"prepare() returned with {made} streams made"
        if not REAL:
            assert not gate_closed, "the second prepare returned before the gate let the first one go on"


def test_one_shot_hostfunc_fences_make_no_stream_under_load(dev):
    """One hostfunc fence at a time, each closed before the next, with no
    other Notifier open: the context's side streams, made by the first,
    outlive it, so the later ones make none, and none waits for the GPU
    although the next stream the context makes would block until the gate
    opens."""
    s = dev.stream()
    with cudafd.fence(s, "hostfunc") as f:  # the context's first: makes its side streams
        assert f.wait(10)
        made = cudafd.stats()["streams"]
    assert made >= 32, f"the first hostfunc fence made {made} side streams"
    assert cudafd.stats()["notifiers"] == 0
    _pad_to_boundary(dev, made_by_gate=1 + made - cudafd.stats()["streams"])
    with _gate(dev, [s]) as closed:
        slowest, done = 0.0, 0
        for _ in range(12):
            t0 = time.monotonic()
            with cudafd.fence(s, "hostfunc") as f:
                slowest = max(slowest, time.monotonic() - t0)
                done += f.done()
        assert slowest < SLOW_WATCH_S and not done, (
            f"a one-shot fence blocked {slowest:.2f} s on a stream creation ({done} of 12 found the gate open)")
        assert closed(), "the gate opened before the fences ended: nothing was tested"
        assert cudafd.stats()["streams"] == made, "a one-shot fence under load made a stream"
        pending = cudafd.fence(s, "hostfunc")
    assert pending.wait(30)
    pending.close()
    assert cudafd.stats()["streams"] == made


def test_kept_side_streams_are_released_on_request(dev):
    """cudafd_release_idle lets go of the side streams of a context with no wait
    in flight, with Notifiers open or not, and keeps those of one with a wait."""
    s = dev.stream()
    with cudafd.fence(s, "hostfunc") as f:
        assert f.wait(10)
    assert cudafd.stats()["streams"] >= 32
    s.launch(2.0)
    with cudafd.fence(s, "hostfunc") as f:
        assert release_idle() == 0, "released side streams while a wait was in flight in their context"
        assert f.wait(30)
    with cudafd.Notifier("hostfunc"):
        assert release_idle() >= 32, "kept the side streams of a context with no wait in flight"
    assert cudafd.stats()["streams"] == 0
    assert cudafd.stats()["contexts"] == 0
