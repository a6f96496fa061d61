"""A busy loop: many tasks each launching work and awaiting it (asyncio, uvloop).

A wait that is not lone yields once first; when its work is over by then (the
other tasks ran meanwhile) it returns without a watch, so neither an event
nor the poller's thread is spent on it (_aio_line). These tests pin down
that it does so when it pays and stops when it does not, that waits on one
stream still resume in the order they began, and that cancellation during
that yield leaves nothing behind (and the autouse no_leaks fixture).
"""
from __future__ import annotations

import asyncio
import time

import pytest
from support import run

import cudafd
from cudafd import _aio, _aio_line, _aio_spin, _board

pytestmark = pytest.mark.asyncio_only


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _count_watches(notifier) -> dict:
    calls = {"watch": 0}
    real_watch, real_timed = notifier._watch, notifier._watch_timed

    def watch(t, unless_done):
        calls["watch"] += 1
        return real_watch(t, unless_done)

    def watch_timed(t):
        calls["watch"] += 1
        return real_timed(t)

    notifier._watch, notifier._watch_timed = watch, watch_timed
    return calls


def test_a_busy_loop_finds_most_waits_over_without_a_watch(dev, loop_flavor):
    streams = [dev.stream() for _ in range(16)]

    async def body(api):
        calls = _count_watches(api.notifier)
        before = cudafd.stats()

        async def worker(s):
            for _ in range(30):
                s.launch(10e-6)
                _busy(300e-6)  # the task's own work: a pass of the 16 outlasts the kernel by far
                await api.notifier.wait(s)
                assert s.idle()

        await asyncio.gather(*(worker(s) for s in streams))
        after = cudafd.stats()
        awaits = 16 * 30
        assert calls["watch"] < awaits // 4, calls  # most never watched
        assert after["completed"] - before["completed"] == calls["watch"]  # the core saw only those
        assert api.notifier.pending == 0

    run(loop_flavor, "event", body)


def test_long_waits_turn_the_busy_path_off(dev, loop_flavor):
    streams = [dev.stream() for _ in range(4)]

    async def body(api):
        d = _aio.dispatcher(asyncio.get_running_loop(), api.notifier)
        tries = {"n": 0}
        real_done_now = api.notifier._done_now

        def done_now(t):  # the busy path's query after its yield (lone waits ask too)
            if d._futures:
                tries["n"] += 1
            return real_done_now(t)

        api.notifier._done_now = done_now

        async def worker(s):
            for _ in range(20):
                s.launch(3e-3)
                await api.notifier.wait(s)

        await asyncio.gather(*(worker(s) for s in streams))
        awaits = 4 * 20
        # off after a miss or so per task (before the first miss lands), then one try per probe
        # (on an idle machine 4-6 tries; a loaded one that stalls the loop past a kernel's end
        # makes a probe find it over, and turns the path on for a try or two more)
        assert tries["n"] <= awaits // 4, tries

    run(loop_flavor, "event", body)


def test_waits_on_one_stream_resume_in_order_in_a_busy_loop(dev, loop_flavor):
    shared = dev.stream()
    others = [dev.stream() for _ in range(8)]

    async def body(api):
        started, resumed = [], []

        async def on_shared(name, n):
            for i in range(n):
                shared.launch(20e-6 * (1 + (i % 3)))
                started.append((name, i))
                await api.notifier.wait(shared)
                resumed.append((name, i))

        async def busy(s):
            for _ in range(40):
                s.launch(10e-6)
                await api.notifier.wait(s)

        await asyncio.gather(on_shared("a", 30), on_shared("b", 30), *(busy(s) for s in others))
        assert sorted(resumed) == sorted(started)
        assert resumed == started  # one stream: resumed in the order the waits began
        assert api.notifier.pending == 0

    run(loop_flavor, "event", body)


def test_cancelling_a_wait_during_its_yield_leaves_nothing(dev, loop_flavor):
    streams = [dev.stream() for _ in range(3)]

    async def body(api):
        d = _aio.dispatcher(asyncio.get_running_loop(), api.notifier)
        streams[0].launch(0.05)
        parked = asyncio.ensure_future(api.notifier.wait(streams[0]))  # so the next is not lone
        await asyncio.sleep(0)
        streams[1].launch(0.05)
        task = asyncio.ensure_future(api.notifier.wait(streams[1]))
        await asyncio.sleep(0)  # task is in its one yield now
        assert d._joined >= 1 and not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await parked
        assert d._joined == 0 and not any(line.waits for line in d._lines.values())
        assert api.notifier.pending == 0
        streams[1].synchronize()

    run(loop_flavor, "event", body)


def test_the_busy_path_is_learnt_from_what_the_driver_says(dev, loop_flavor):
    # Scripted: while the driver says "over" after the yield, no wait is
    # watched; once it keeps saying "running", the path turns off (each try
    # cost a yield and a query for nothing) and is tried once in
    # BUSY_PROBE_EVERY waits; when it pays again, it is back on.
    streams = [dev.stream() for _ in range(4)]

    async def body(api):
        calls = _count_watches(api.notifier)  # first: the dispatcher keeps the notifier's _watch
        d = _aio.dispatcher(asyncio.get_running_loop(), api.notifier)
        d._board = None  # the driver's answers are scripted here: none from the board's thread
        over = {"now": True}
        real_done_now = api.notifier._done_now
        api.notifier._done_now = lambda t: over["now"] and real_done_now(t)
        parked = asyncio.ensure_future(api.notifier.wait(streams[0]))  # keeps the others from being lone
        streams[0].launch(0.5)
        for _ in range(100000):  # parked: past its inline spin, watched
            if calls["watch"]:
                break
            await asyncio.sleep(0)
        assert calls["watch"] == 1

        async def rounds(n):
            for _ in range(n):
                await asyncio.gather(*(api.notifier.wait(s) for s in streams[1:]))

        watched = calls["watch"]
        await rounds(10)  # the streams are idle: over at once
        assert calls["watch"] == watched and d._busy_credit > 0
        over["now"] = False  # the driver says "running" from now on: every wait is watched
        await rounds(12)
        assert d._busy_credit < 0
        asked_while_off = []

        def done_now(t):
            if d._busy_credit < 0:
                asked_while_off.append(t)
            return real_done_now(t)

        api.notifier._done_now = done_now  # and the driver says "over" again
        waits = 0
        while d._busy_credit < 0 and waits < 4 * _aio_line.BUSY_PROBE_EVERY:
            await rounds(1)
            waits += 3
        assert d._busy_credit >= 0  # a probe found it over: on again
        assert waits <= _aio_line.BUSY_PROBE_EVERY + 3, waits  # within one probe interval
        assert len(asked_while_off) == 1  # off, the driver was asked by that probe alone
        parked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await parked

    run(loop_flavor, "event", body)


def test_cancelling_a_later_wait_on_the_stream_does_not_strand_the_others(dev, loop_flavor, monkeypatch):
    # A lone wait spins ahead of its watch (yielding, not watched yet) while
    # two more waits on its stream queue behind it; the middle one is
    # cancelled. Its own place in the stream's line must go (places are told
    # apart by identity, not by value): taking the first one's instead would
    # leave the last one behind a place that never watches, yielding
    # forever, and the first one's exit would find no place of its own.
    monkeypatch.setattr(_aio_spin, "AHEAD_MAX", 0.05)
    shared = dev.stream()

    async def body(api):
        d = _aio.dispatcher(asyncio.get_running_loop(), api.notifier)
        d._window = 0.05  # the first wait spins ahead for up to 50 ms (its window is on)
        d._tight = False
        shared.launch(0.2)
        first = asyncio.ensure_future(api.notifier.wait(shared))
        await asyncio.sleep(0)
        assert d._inline, "the first wait spins ahead of its watch"
        later = [asyncio.ensure_future(api.notifier.wait(shared)) for _ in range(2)]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert [w.unwatched for w in d._lines[shared.handle].waits] == [True, True, True]
        later[0].cancel()
        with pytest.raises(asyncio.CancelledError):
            await later[0]
        await asyncio.wait_for(asyncio.gather(first, later[1]), 5.0)
        assert d._joined == 0 and not any(line.waits for line in d._lines.values())
        assert api.notifier.pending == 0

    run(loop_flavor, "event", body)


# ---- the answer board (_board): the busy path's query made by a native thread ----


async def _parked(api, stream):
    """The dispatcher, and a wait on a long kernel, parked by now, so that
    the others are not lone (they take the busy path)."""
    stream.launch(0.5)
    parked = asyncio.ensure_future(api.notifier.wait(stream))
    await asyncio.sleep(0.01)
    return _aio.dispatcher(asyncio.get_running_loop(), api.notifier), parked


async def _unpark(parked) -> None:
    parked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await parked


async def _busy_rounds(api, streams, rounds: int, banked: bool = False):
    """A wait parked on streams[0], and a task per other stream looping
    (10 µs kernel, 300 µs of its own work, await) ``rounds`` times, each
    checking that its stream passed the point when its wait returned. Returns
    the dispatcher and how often the loop asked the driver itself. ``banked``:
    the busy path starts with its full credit, so a point a loaded machine
    has not finished by then (a miss) does not turn it off."""
    asked = {"n": 0}
    real_done_now = api.notifier._done_now

    def done_now(t):  # the loop's own query: for points the board did not answer
        asked["n"] += 1
        return real_done_now(t)

    d, parked = await _parked(api, streams[0])
    api.notifier._done_now = done_now
    if banked:
        d._busy_credit = _aio_line.BUSY_CREDIT_MAX

    async def worker(s):
        for _ in range(rounds):
            s.launch(10e-6)
            _busy(300e-6)  # a pass of the others outlasts the kernel by far
            await api.notifier.wait(s)
            assert s.idle()  # an answer means the stream passed the point

    await asyncio.gather(*(worker(s) for s in streams[1:]))
    await _unpark(parked)
    return d, asked["n"]


def test_the_board_answers_a_busy_loop_and_the_loop_asks_the_driver_little(dev, loop_flavor):
    streams = [dev.stream() for _ in range(8)]

    async def body(api):
        d, asked = await _busy_rounds(api, streams, 30)
        awaits = 7 * 30
        stats = d._board.stats()
        assert stats["answers"] >= awaits // 2, stats
        assert asked <= awaits // 2, (asked, stats)
        assert stats["queries"] <= 4 * stats["answers"], stats  # paced, not a query per scan
        slots = [line.slot for line in d._lines.values() if line.slot >= 0]
        assert len(slots) == 7 and len(set(slots)) == 7
        board = d._board
        assert all(board.wants[i] == board.done[i] for i in slots)  # nothing left to ask

    run(loop_flavor, "event", body)


def test_a_wait_cancelled_in_its_yield_takes_back_its_want(dev, loop_flavor):
    streams = [dev.stream() for _ in range(2)]

    async def body(api):
        d, parked = await _parked(api, streams[0])
        streams[1].launch(0.3)
        task = asyncio.ensure_future(api.notifier.wait(streams[1]))
        await asyncio.sleep(0)  # in its yield, its point announced on the board
        line = d._lines[streams[1].handle]
        board, slot = d._board, line.slot
        assert slot >= 0 and board.wants[slot] != board.done[slot]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert board.wants[slot] == board.done[slot]  # taken back: the stream is not asked after
        queries = board.stats()["queries"]
        await asyncio.sleep(0.02)
        assert board.stats()["queries"] == queries  # while its kernel still runs
        assert not streams[1].idle()
        await _unpark(parked)
        streams[1].synchronize()

    run(loop_flavor, "event", body)


def test_an_answer_after_close_still_raises_closed(dev, loop_flavor):
    streams = [dev.stream() for _ in range(2)]

    async def body(api):
        d, parked = await _parked(api, streams[0])
        task = asyncio.ensure_future(api.notifier.wait(streams[1]))  # idle: answered at once
        await asyncio.sleep(0)
        slot = d._lines[streams[1].handle].slot
        end = time.monotonic() + 2
        while d._board.done[slot] != d._board.wants[slot] and time.monotonic() < end:
            time.sleep(0.001)  # the loop held: the board answers meanwhile
        assert d._board.done[slot] == d._board.wants[slot]
        api.notifier.close()
        with pytest.raises(cudafd.ClosedError):
            await task
        with pytest.raises(cudafd.ClosedError):
            await parked

    run(loop_flavor, "event", body)


def test_streams_past_the_kept_lines_give_their_slots_back(dev, loop_flavor, monkeypatch):
    monkeypatch.setattr(_aio, "LINES_KEEP", 2)
    streams = [dev.stream() for _ in range(9)]

    async def body(api):
        d, parked = await _parked(api, streams[0])
        for _ in range(3):
            await asyncio.gather(*(api.notifier.wait(s) for s in streams[1:]))
        kept = [line.slot for line in d._lines.values()]
        assert len(d._lines) <= 3 + 1 and len(set(kept)) == len(kept)  # the parked one's line too
        # slots were given back and used again: 8 streams, 3 rounds, few slots ever made
        assert max(kept) < 8, kept
        await _unpark(parked)

    run(loop_flavor, "event", body)


def test_a_point_still_running_is_not_answered(dev, loop_flavor):
    streams = [dev.stream() for _ in range(4)]

    async def body(api):
        d, parked = await _parked(api, streams[0])

        async def worker(s, i):
            for j in range(6):
                s.launch(0.004 * (1 + (i + j) % 3))  # 4-12 ms: running when the wait resumes
                await api.notifier.wait(s)
                assert s.idle()

        await asyncio.gather(*(worker(s, i) for i, s in enumerate(streams[1:])))
        assert d._board.stats()["queries"] > 0  # the board was asked, and never answered early
        await _unpark(parked)

    run(loop_flavor, "event", body)


def test_without_a_board_the_busy_path_asks_the_driver_itself(dev, loop_flavor, monkeypatch):
    # Where a plain load may be reordered with later loads (aarch64), no board
    # is made: the wait after its yield queries the driver on the loop's thread.
    monkeypatch.setattr(_board, "LOADS_IN_ORDER", False)
    streams = [dev.stream() for _ in range(5)]

    async def body(api):
        d, asked = await _busy_rounds(api, streams, 10, banked=True)
        assert d._board is None
        assert asked >= 4 * 10  # each await asked the driver itself
        assert not any(line.slot >= 0 for line in d._lines.values())

    run(loop_flavor, "event", body)


def test_a_wait_over_at_once_keeps_its_place_while_it_yields(dev, loop_flavor):
    # A lone wait whose work is already over returns without suspending, but
    # one in QUICK_YIELD_EVERY yields first so the loop is not starved. A wait
    # started on its stream during that yield must not be taken for lone and
    # return first: waits on one stream resume in the order they began.
    shared = dev.stream()

    async def body(api):
        d = _aio.dispatcher(asyncio.get_running_loop(), api.notifier)
        d._quick = _aio.QUICK_YIELD_EVERY - 1  # the next quick wait yields, the one after it does not
        resumed = []

        async def one(name):
            await api.notifier.wait(shared)  # idle: over at once
            resumed.append(name)

        first = asyncio.ensure_future(one("first"))
        await asyncio.sleep(0)  # first is in its yield now
        assert not first.done()
        await one("second")  # over at once too
        await first
        assert resumed == ["first", "second"]

    run(loop_flavor, "event", body)
