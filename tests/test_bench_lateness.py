"""The bench's lateness section: it runs end to end (quick, on the simulator unless
CUDAFD_TEST_DRIVER=real) with every workload and method; and its arithmetic
(lateness from timing events, the spin floor, Pareto dominance, the targets)
on synthetic inputs. No timing thresholds: the figures of a quick run on a
loaded machine mean nothing."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time

import pytest

import cudafd
from cudafd._bench import options
from cudafd._core import lib as _lib
from cudafd._bench.clocks import anchor, end_on_host, lateness_us, net
from cudafd._bench.ends import Mark
from cudafd._bench.lateness import _Acc
from cudafd._bench.pareto import beaten_by, dominated, front
from cudafd._bench.targets_lateness import evaluate
from cudafd._bench.waiters import FLOOR, HANDOFF, all_keys, has_max_lateness
from support import REAL, child_env

ONE_STREAM = [f"1x{name}" for name, _, _ in options.LATENESS_ONE_STREAM]
MANY = ["4x_random", "16x_random", "64x_random"]


def _unavailable() -> set[str]:
    """The bench's keys of native mechanisms this machine lacks (syncfd off a Jetson, say):
    the bench notes why instead of measuring them."""
    lib = _lib.load()
    return {f"cudafd_{m}" for m, code in _lib.NATIVE_MECHANISMS.items() if lib.cudafd_mechanism_available(code) != 0}


def _finite(*xs) -> bool:
    return all(isinstance(x, (int, float)) and math.isfinite(x) for x in xs)


@pytest.mark.timeout(210)  # (the run below has its own limit of 150 s)
def test_quick_lateness_section_gives_every_workload_and_method(tmp_path):
    env = child_env()
    cmd = [sys.executable, "-m", "cudafd", "bench", "lateness", "--quick", "--loops", "asyncio", "--out", str(tmp_path)]
    if not REAL:
        cmd.append("--sim")
    r = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=150)
    log = r.stdout[-4000:] + r.stderr[-4000:]
    assert r.returncode == 0, log
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert list(doc["sections"]) == ["lateness"], list(doc["sections"])
    res = doc["sections"]["lateness"]["asyncio"]
    assert not res.get("error"), res.get("error")
    missing = _unavailable()
    expected = [k for k in all_keys() if (k != "cudafd_ml1ms" or has_max_lateness()) and k not in missing]
    assert set(res["errors"]) == ({"cudafd_ml1ms"} - set(expected)) | missing, res["errors"]
    for key in missing:
        assert "unavailable" in res["errors"][key], res["errors"][key]
    if not has_max_lateness():
        assert "max_lateness" in res["errors"]["cudafd_ml1ms"]
    assert res["gc_frozen"] is True  # the set-up's objects out of the collector (lateness.py)
    wl = res["workloads"]
    if res["truncated"] and REAL:
        # Its time budget ran out first (on a GPU shared with the suite's other workers, whose
        # kernels it waits behind): its JSON says so, and the workloads that ran are whole.
        # On the simulator the run is whole.
        assert wl and list(wl) == (ONE_STREAM + MANY + ["history"])[: len(wl)], list(wl)
    else:
        assert list(wl) == ONE_STREAM + MANY + ["history"]
    every = wl[MANY[0]]["timed_every"] if MANY[0] in wl else 1
    assert MANY[0] not in wl or every == options.QUICK["lateness"]["timed_every"] > 1
    for name in [n for n in ONE_STREAM + MANY if n in wl]:
        methods = wl[name]["methods"]
        for m in methods.values():
            if name in ONE_STREAM:
                assert m["n"] == m["waits"], (name, m["n"], m["waits"])  # every one-stream wait is timed
            else:  # each task times one wait in `every`, its first at its index
                streams = wl[name]["streams"]
                assert m["n"] <= m["waits"] // every + streams, (name, m["n"], m["waits"], every)
        want = expected if name in ONE_STREAM else [k for k in expected if k != FLOOR]
        assert sorted(methods) == sorted(want), name
        for key, m in methods.items():
            assert m["n"] > 0 and _finite(m["p50"], m["p99"], m["cores"]), (name, key, m)
            assert m["cores"] > 0 and len(m["cdf"]) == 101, (name, key)
            assert m["gc_max_ms"] >= 0.0, (name, key)  # the collector's longest pause in its stretches
            assert m["poller_wakes_per_wait"] >= 0 and m["poller_queries_per_wait"] >= 0, (name, key)
            if name in ONE_STREAM and key != FLOOR:
                assert _finite(m["net"]["p50"], m["net"]["p99"]), (name, key)
        if name in ONE_STREAM:
            assert wl[name]["kernel_s"] == dict(("1x" + n, s) for n, s, _ in options.LATENESS_ONE_STREAM)[name]
    with cudafd.Notifier() as n:
        assert res["max_lateness_us"] == n.max_lateness * 1e6
    # the default's poller asked about its 10 ms waits (the workload ran whole on the simulator)
    if "1x10ms" in wl:
        ten = wl["1x10ms"]["methods"]["cudafd_default"]
        assert ten["poller_wakes_per_wait"] >= 1 and ten["poller_queries_per_wait"] >= 1, ten
    if "history" in wl:
        h = wl["history"]["methods"]["cudafd_default"]
        assert h["n"] > 0 and _finite(h["p50"], h["p99"], h["net"]["p50"]) and h["first_block"]["n"] > 0
        if HANDOFF in expected:  # the bound ran the same after-stretch waits, in the same blocks
            b = wl["history"]["bound"]
            assert b["n"] == h["n"] and _finite(b["p50"], b["p99"], b["net"]["p50"]), b
    assert res["kernels"]["estimated_ends"] is (not REAL)
    figures = [t["figure"] for t in doc["targets"]]
    for part in ("one stream 50 us", "one stream 5 ms", "4 streams", "64 streams", "CPU, one stream",
                 "Pareto", "spin mechanism", "max_lateness", "history"):
        assert any(part in f for f in figures), part
    assert {t["status"] for t in doc["targets"]} <= {"pass", "miss", "n/a"}
    text = (tmp_path / "bench.txt").read_text()
    tables = text[text.index("One stream, asyncio") : text.index("Targets (")]
    assert max(len(line) for line in tables.splitlines()) <= 120
    for label in ("cudafd default", "sleep(0) poll", "executor+blocking ev", "thread poll 20us", "spin floor"):
        assert label in tables, label
    assert "One stream, asyncio: the loop's thread per wait, us" in tables
    assert "garbage collector: set-up frozen (gc.freeze); its longest pause in a measured stretch" in text
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert doc["files"]["lateness_plot"] is None
    else:
        assert doc["files"]["lateness_plot"] == "lateness.png" and (tmp_path / "lateness.png").stat().st_size > 0


_FREEZE_CHILD = """
import gc, json, sys
from cudafd._bench import lateness
from cudafd._bench.child import Progress
from cudafd._bench.options import QUICK
p = dict(QUICK["lateness"], loop="asyncio", methods=["sleep0"], one_stream=[], streams=[], history=None)
during = []
main = lateness.Run.main
async def counted(self, streams):
    during.append(gc.get_freeze_count())
    await main(self, streams)
lateness.Run.main = counted
out = {}
before = gc.get_freeze_count()  # 0 here; some Pythons start with objects frozen
flag = lateness.run(p, Progress("t", None, 60))["gc_frozen"]
out["plain"] = flag, during[-1] > before, gc.get_freeze_count() == 0 if before == 0 else gc.get_freeze_count() > 0
gc.freeze()  # a caller's own freeze: the run freezes its set-up too, and thaws nothing
kept = gc.get_freeze_count()
flag = lateness.run(p, Progress("t", None, 60))["gc_frozen"]
out["caller_frozen"] = flag, during[-1] > kept, gc.get_freeze_count() > 0
gc.unfreeze()
flag = lateness.run(dict(p, gc_freeze=False), Progress("t", None, 60))["gc_frozen"]
out["off"] = flag, during[-1], gc.get_freeze_count()
print(json.dumps(out))
"""


@pytest.mark.parametrize("start", ["nothing frozen", "some frozen at start-up"])
def test_the_lateness_section_freezes_its_set_up_and_thaws_only_when_nothing_was_frozen(start):
    # three runs in one process: on a GPU also that a run leaves PyTorch usable for the next.
    # The H200 machine's Python starts with objects frozen; "some frozen" does that anywhere.
    env = child_env(**({} if REAL else {"CUDAFD_SIMULATOR": "1"}))
    code = ("import gc; gc.freeze()\n" if start != "nothing frozen" else "") + _FREEZE_CHILD
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["plain"] == [True, True, True]  # frozen while the ways ran; thawed if nothing was frozen before
    assert out["caller_frozen"] == [True, True, True]  # frozen while they ran, and left frozen
    assert out["off"] == [False, 0, 0]


def test_anchor_takes_the_midpoint_of_the_last_no_and_the_first_yes():
    ticks = iter([10.0, 11.0, 12.0, 13.0, 14.0, 15.0])  # the clock: each call the next
    answers = iter([False, False, True])  # done() at the 1st, 2nd, 3rd query
    at, half = anchor(lambda: next(answers), clock=lambda: next(ticks), started=9.0)
    # queries began at 10 (no), 11 (no), 12 (yes, returned at 13): the GPU passed it in (11, 13)
    assert (at, half) == (12.0, 1.0)
    ticks = iter([5.0, 5.5])
    assert anchor(lambda: True, clock=lambda: next(ticks), started=4.0) == (4.75, 0.75)  # done at once: (started, 5.5)


def test_lateness_from_an_anchor_and_elapsed_times():
    end = end_on_host(100.0, 2.5)  # the reference at host 100 s, the kernel's end 2.5 GPU ms later
    assert end == pytest.approx(100.0025)
    assert lateness_us(100.0026, end) == pytest.approx(100.0)
    assert lateness_us(100.0024, end) == pytest.approx(-100.0)  # resumed "before" the end: an anchor error shows
    assert net({"n": 3, "p50": 50.0, "p99": 400.0}, 20.0) == {"p50": 30.0, "p99": 380.0}
    assert net({"n": 3, "p50": 50.0, "p99": 400.0}, None) is None and net({"n": 0}, 5.0) is None


class _FakeKernels:
    """end_s from a table; release remembered."""

    def __init__(self, ends):
        self.ends, self.released = ends, []

    def end_s(self, mark):
        return self.ends[mark.ev]

    def release(self, marks):
        self.released += marks


class _Meter:
    cpu, wall, gc_max = 0.25, 1.0, 0.0
    split = {"loop": 0.125, "cudafd": 0.0625}


def test_accumulator_turns_resume_times_into_lateness_and_cores():
    a, b, c = (Mark(name, False, 0.0, 0.0) for name in "abc")
    untimed = Mark("u", False, 0.0, 0.0, timed=False)  # its end is not known: counted, not timed
    k = _FakeKernels({"a": 1.0, "b": 2.0, "c": 3.0})
    acc = _Acc()
    acc.add(k, [(a, 1.000010), (untimed, 1.5), (b, 2.000050)], _Meter(), 1e-6, (6, 20))
    paused = _Meter()
    paused.gc_max = 0.005  # a 5 ms collection in the second stretch
    acc.add(k, [(c, 3.000030)], paused, 3e-6, (2, 12))
    assert [round(x, 3) for x in acc.lat] == [10.0, 50.0, 30.0]
    assert k.released == [a, untimed, b, c]
    r = acc.result("cudafd_default")
    assert r["n"] == 3 and round(r["p50"], 2) == 30.0 and r["cores"] == 0.25 and r["anchor_err_us"] == 3.0
    assert r["waits"] == 4 and r["waits_per_s"] == 2.0  # over the meters' 2 s of wall
    assert r["label"] == "cudafd default"
    assert (r["cores_loop"], r["cores_cudafd"]) == (0.125, 0.0625)
    assert r["gc_max_ms"] == 5.0  # the longest over the stretches
    # the core's poller over the stretches: 8 wakes and 32 queries for 4 waits, cudafd's 0.125 s of CPU
    assert (r["poller_wakes_per_wait"], r["poller_queries_per_wait"], r["cudafd_us_per_wake"]) == (2.0, 8.0, 15625.0)
    blind = _Meter()
    blind.split = {}  # a meter that could not tell the threads apart: no split for the whole workload
    acc.add(k, [], blind, 1e-6)
    assert "cores_loop" not in acc.result("cudafd_default")


def test_the_cpu_meter_tells_the_loops_thread_from_the_others():
    from cudafd._bench.proc import CpuMeter

    def burn(s):
        end = time.thread_time() + s
        while time.thread_time() < end:
            pass

    m = CpuMeter().start()
    t = threading.Thread(target=burn, args=(0.05,))
    t.start()
    t.join()
    burn(0.1)
    m.stop()
    assert m.split["loop"] >= 0.1 and m.split["cudafd"] == 0.0, m.split
    assert m.cpu >= m.split["loop"] + 0.05 - 0.01, (m.cpu, m.split)  # the other thread counts in cpu only


def test_the_cpu_meters_split_covers_the_window_of_its_process_cpu(monkeypatch):
    """Reading the threads' clocks costs the loop's thread CPU just outside the window of the
    process's CPU: none of it counts in the loop's share either, which stays within ``cpu``."""
    from cudafd._bench import proc

    real = proc.thread_cpu

    def burn(s):
        end = time.thread_time() + s
        while time.thread_time() < end:
            pass

    def slow_read():  # a read that spends 20 ms of the caller's CPU on each side of its own clock
        burn(0.02)
        out = real()
        burn(0.02)
        return out

    monkeypatch.setattr(proc, "thread_cpu", slow_read)
    m = proc.CpuMeter().start()
    burn(0.01)
    m.stop()
    assert m.split and m.split["loop"] >= 0.01 - 1e-3, m.split
    assert m.split["loop"] <= m.cpu + 2e-3, (m.split, m.cpu)


def test_the_cpu_meter_keeps_the_collectors_longest_pause_and_lets_go_of_gc_after():
    import gc

    from cudafd._bench.proc import CpuMeter, _on_gc

    was_enabled = gc.isenabled()
    gc.disable()  # the only collections in the windows: the two below
    try:
        outer = CpuMeter().start()
        inner = CpuMeter().start()
        junk = []
        for _ in range(200_000):  # cycles, so the collection has something to do
            a: list = []
            a.append(a)
            junk.append(a)
        del junk, a
        t0 = time.perf_counter()
        gc.collect()
        took = time.perf_counter() - t0
        inner.stop()
        assert _on_gc in gc.callbacks  # the outer meter still runs
        gc.collect()
        outer.stop()
    finally:
        if was_enabled:
            gc.enable()
    assert _on_gc not in gc.callbacks
    assert 0.0 < inner.gc_max <= took and outer.gc_max >= inner.gc_max, (inner.gc_max, outer.gc_max, took)
    quiet = CpuMeter().start().stop()  # no collection in its window
    assert quiet.gc_max == 0.0
    with pytest.raises(KeyError), CpuMeter() as failed:  # a block that raises stops its meter
        assert _on_gc in gc.callbacks
        raise KeyError("boom")
    assert _on_gc not in gc.callbacks and failed.wall > 0.0


def test_pareto_dominance():
    pts = {"a": (0.1, 100.0), "b": (0.2, 100.0), "c": (0.05, 500.0), "d": (1.0, 10.0), "e": (0.1, 100.0)}
    assert dominated(pts) == {"b"}  # a and e tie: neither dominates the other
    assert front(pts) == ["c", "a", "e", "d"]
    assert beaten_by(pts, "b", ["a", "c", "d"]) == []  # a is cheaper but not earlier: not beaten on both
    assert beaten_by({"x": (0.5, 50.0), "y": (0.4, 40.0), "z": (0.4, 50.0)}, "x", ["y", "z"]) == ["y"]
    assert beaten_by(pts, "missing", ["a"]) == []


def _section(default, sleep0, executor, floor_p50=10.0):
    """A one-loop lateness result: the default and two baselines on every workload."""
    def m(p50, p99, cores):
        return {"n": 10, "p50": p50, "p99": p99, "cores": cores, "net": {"p50": p50 - floor_p50, "p99": p99 - floor_p50}}
    wl = {}
    for name in ONE_STREAM + MANY:
        methods = {"cudafd_default": m(*default), "sleep0": m(*sleep0), "executor": m(*executor),
                   "cudafd_spin": m(sleep0[0] + 5, 50, 1.0)}
        if name in ONE_STREAM:
            methods[FLOOR] = {"n": 10, "p50": floor_p50, "p99": floor_p50, "cores": 1.0}
        wl[name] = {"methods": methods}
    wl["history"] = {"stretch_s": 10, "methods": {"cudafd_default": m(*default)}, "bound": m(22, 90, 1.0)}
    return {"lateness": {"asyncio": {"workloads": wl, "errors": {"cudafd_ml1ms": "no max_lateness"}}}}


def test_lateness_targets_on_synthetic_figures():
    rows = {r["figure"].split(", asyncio")[0]: r for r in evaluate(_section((30, 150, 0.05), (35, 60, 1.0), (300, 900, 0.2)))}
    status = {k: r["status"] for k, r in rows.items()}
    assert status["lateness, one stream 50 us, 200 us, 1 ms, random"] == "pass"  # net 20/140
    assert status["lateness, 4 streams random"] == "pass"  # raw 30/150
    assert status["lateness, 64 streams random"] == "pass"
    assert status["CPU, one stream back to back"] == "pass"  # 0.25x the executor's, 0.05 cores at 10 ms
    assert "10ms 0.050 cores" in rows["CPU, one stream back to back"]["measured"]
    assert status["Pareto, every workload"] == "pass"
    assert status["spin mechanism, one stream"] == "pass"  # +5 us
    assert status["max_lateness=1e-3, one stream"] == "n/a" and "no max_lateness" in rows["max_lateness=1e-3, one stream"]["measured"]
    assert status["history: 100 us waits after 10 s of 10 ms waits"] == "pass"
    assert "bound: loop asleep on fd, the same waits in the same blocks: 12/80 us" in rows[
        "history: 100 us waits after 10 s of 10 ms waits"]["measured"]
    # a baseline both earlier and cheaper: the Pareto row names it on every workload
    rows = {r["figure"].split(", asyncio")[0]: r for r in evaluate(_section((60, 150, 0.5), (35, 60, 0.4), (300, 900, 0.2)))}
    assert rows["Pareto, every workload"]["status"] == "miss"
    assert "beaten on 10 of 10 workloads" in rows["Pareto, every workload"]["measured"]
    assert rows["lateness, one stream 50 us, 200 us, 1 ms, random"]["status"] == "miss"  # net p50 50
    assert rows["lateness, 64 streams random"]["status"] == "miss"  # later than sleep(0)
    assert rows["CPU, one stream back to back"]["status"] == "miss"  # 2.5x the executor's
    empty = evaluate({"lateness": {"asyncio": {"workloads": {"1x50us": {"methods": {}}}}}})
    assert {r["status"] for r in empty} == {"n/a"}


def test_the_pareto_row_is_not_a_miss_where_the_default_went_unmeasured():
    """Beaten nowhere it was measured, but not measured on one workload: n/a, as every row
    with a figure missing; beaten where it was measured: a miss whatever is missing."""
    section = _section((30, 150, 0.05), (35, 60, 1.0), (300, 900, 0.2))
    del section["lateness"]["asyncio"]["workloads"]["1x5ms"]["methods"]["cudafd_default"]
    row = next(r for r in evaluate(section) if r["figure"].startswith("Pareto"))
    assert row["status"] == "n/a" and "beaten on 0 of 9 workloads" in row["measured"], row
    section = _section((60, 150, 0.5), (35, 60, 0.4), (300, 900, 0.2))
    del section["lateness"]["asyncio"]["workloads"]["1x5ms"]["methods"]["cudafd_default"]
    row = next(r for r in evaluate(section) if r["figure"].startswith("Pareto"))
    assert row["status"] == "miss" and "beaten on 9 of 9 workloads" in row["measured"], row


def test_a_missed_target_names_what_meeting_it_cost_in_the_same_run():
    """Beside a miss: the ways of the run that met the lateness target, cheapest first with
    their cores (the default's own aside), and the ways cheap enough for the CPU target
    with their lateness."""
    rows = {r["figure"].split(", asyncio")[0]: r for r in evaluate(_section((60, 150, 0.2), (35, 60, 1.0), (300, 900, 0.1)))}
    one = rows["lateness, one stream 50 us, 200 us, 1 ms, random"]["measured"]
    assert "the default's cores: 50us 0.20" in one
    # net 25 and 30: both within; the executor (net 290) is not
    assert "ways within the p50 target here, cores: 50us: cudafd spin 1.00, sleep(0) poll 1.00;" in one
    assert "executor" not in one.split("ways within")[1]
    many = rows["lateness, 64 streams random"]["measured"]
    assert "ways at sleep(0)'s p50 or under here, cores: random: sleep(0) poll 1.00" in many
    cpu = rows["CPU, one stream back to back"]["measured"]  # 2x the executor's; nothing at <= 0.08 cores
    assert "1ms: ways at <= 0.080 cores here, p50 us: none" in cpu
    assert "loop's thread" not in cpu  # no split measured: none printed
    section = _section((60, 150, 0.2), (35, 60, 1.0), (300, 900, 0.1))
    for w in section["lateness"]["asyncio"]["workloads"].values():
        w["methods"]["cudafd_default"].update(cores_loop=0.125, cores_cudafd=0.05)
    rows = {r["figure"].split(", asyncio")[0]: r for r in evaluate(section)}
    cpu = rows["CPU, one stream back to back"]["measured"]
    assert "1ms 0.200 = 2.00x executor (0.100) (loop's thread 0.125, cudafd's threads 0.050)" in cpu
    assert "bound" not in cpu  # the bound and the executor were not split
    for w in section["lateness"]["asyncio"]["workloads"].values():
        if "executor" not in w["methods"]:  # the history workload
            continue
        w["methods"]["executor"].update(cores_loop=0.06, cores_cudafd=0.0)  # 0.04 on its other threads
        w["methods"][HANDOFF] = {"n": 10, "p50": 20.0, "p99": 50.0, "cores": 1.1, "cores_loop": 0.05, "cores_cudafd": 1.0}
    rows = {r["figure"].split(", asyncio")[0]: r for r in evaluate(section)}
    cpu = rows["CPU, one stream back to back"]["measured"]
    assert "1ms bound: a loop told by one wake 0.090 = 0.90x executor (the wake: executor+blocking ev's)" in cpu  # 0.05 + (0.1 - 0.06)
    assert "10ms bound: a loop told by one wake 0.090 cores" in cpu
    # hostfunc's wake (the driver's thread) cheaper than the executor's: the bound takes it
    for w in section["lateness"]["asyncio"]["workloads"].values():
        if "executor" in w["methods"]:
            w["methods"]["cudafd_hostfunc"] = {"n": 10, "p50": 200.0, "p99": 400.0, "cores": 0.08, "cores_loop": 0.06}
    rows = {r["figure"].split(", asyncio")[0]: r for r in evaluate(section)}
    cpu = rows["CPU, one stream back to back"]["measured"]
    assert "1ms bound: a loop told by one wake 0.070 = 0.70x executor (the wake: cudafd hostfunc's)" in cpu  # 0.05 + 0.02


def test_the_cpu_rows_bound_what_asking_within_max_lateness_costs():
    """A wait that must be found within max_lateness of its end is asked at least every
    max_lateness from its start: ceil(kernel / budget) wakes of an asking thread per wait, at the
    run's CPU per wake of the core's poller, on top of a loop told at once."""
    section = _section((300, 600, 0.08), (35, 60, 1.0), (300, 900, 0.1))
    res = section["lateness"]["asyncio"]
    assert "asking within" not in " ".join(r["measured"] for r in evaluate(section))  # no figures for it: none
    res["max_lateness_us"] = 400.0
    res["errors"] = {}
    for name, w in res["workloads"].items():
        if name in ONE_STREAM:
            w["kernel_s"] = dict((f"1x{n}", s) for n, s, _ in options.LATENESS_ONE_STREAM)[name]
            w["methods"]["cudafd_default"].update(cudafd_us_per_wake=8.0, waits_per_s=95.0)
            # the bound's loop: 0.04 cores at 100 waits a second, 400 us a wait
            w["methods"][HANDOFF] = {"n": 10, "p50": 150.0, "p99": 300.0, "cores": 1.1, "cores_loop": 0.04,
                                     "waits_per_s": 100.0}
            w["methods"]["cudafd_ml1ms"] = {"n": 10, "p50": 400.0, "p99": 800.0, "cores": 0.066}
            w["methods"]["sleep1ms"] = {"n": 10, "p50": 264.0, "p99": 900.0, "cores": 0.063}
    rows = {r["figure"].split(", asyncio")[0]: r for r in evaluate(section)}
    cpu = rows["CPU, one stream back to back"]["measured"]
    # at the default's 95 waits a second: 25 asks of a 10 ms wait at 8 us, 0.019 cores, and the loop's 0.038
    assert "10ms bound, finding the end within 400 us by asking: a loop told at once + 25 wakes a wait at 8.0 us = 0.057 cores" in cpu
    assert "2ms bound, finding the end within 400 us by asking: a loop told at once + 5 wakes a wait at 8.0 us = 0.042 cores" in cpu
    ml = rows["max_lateness=1e-3, one stream"]["measured"]
    assert "10ms bound, finding the end within 1000 us by asking: a loop told at once + 10 wakes a wait at 8.0 us = 0.046 cores" in ml
    assert "random bound" not in cpu + ml  # no length to count asks by
    pareto = rows["Pareto, every workload"]["measured"]  # sleep(1 ms): earlier and cheaper at 10 ms
    assert ("1x10ms: sleep(1ms) poll 264 us at 0.063 (the default 300 at 0.080; a loop told at once 150 us; "
            "finding the end within 400 us by asking: a loop told at once + 25 wakes a wait at 8.0 us = 0.057 cores)") in pareto
    fifty = pareto.split("1x50us: ", 1)[1].split("1x200us: ", 1)[0]
    # shorter than the budget: one ask, 0.038 + 95 x 8 us
    assert "a loop told at once 150 us; finding the end within 400 us by asking: a loop told at once + 1 wake a wait at 8.0 us = 0.039 cores" in fifty


def test_asking_within_a_budget_counts_every_ask_up_to_the_one_that_finds_the_end():
    """Asks no more than a budget apart from a wait's start: the k-th is at most k budgets in,
    and the one that finds the end comes no earlier than the kernel's length, so a kernel
    takes ceil(kernel / budget) asks: 3 for 1 ms at 400 µs (at 400, 800 and 1200 µs, the
    first two before its end), 13 for 5 ms, 25 for 10 ms, 1 for a kernel shorter than the
    budget."""
    from cudafd._bench.targets_lateness import ask_bound

    def res(kernel_s: float) -> dict:
        methods = {"cudafd_default": {"n": 10, "p50": 100.0, "cudafd_us_per_wake": 10.0, "waits_per_s": 100.0},
                   HANDOFF: {"n": 10, "p50": 50.0, "cores_loop": 0.01, "waits_per_s": 100.0}}
        return {"max_lateness_us": 400.0, "workloads": {"w": {"kernel_s": kernel_s, "methods": methods}}}

    asks = {k: ask_bound(res(k), "w")[1] for k in (50e-6, 200e-6, 1e-3, 2e-3, 5e-3, 10e-3)}
    assert asks == {50e-6: 1, 200e-6: 1, 1e-3: 3, 2e-3: 5, 5e-3: 13, 10e-3: 25}, asks
    assert ask_bound(res(10e-3), "w", 1000.0)[1] == 10 and ask_bound(res(2e-3), "w", 1000.0)[1] == 2
    cores, n, per_wake = ask_bound(res(1e-3), "w")  # 100 waits a second: 100 us of the loop and 3 x 10 us a wait
    assert (n, per_wake) == (3, 10.0) and cores == pytest.approx(100 * (0.01 / 100 + 3 * 10e-6))


def test_sections_chosen_by_name():
    assert options.parse(["lateness"]).only == ["lateness"]
    assert options.parse(["--sections", "lateness,cpu"]).only == ["lateness", "cpu"]
    assert options.parse(["--", "--quick", "lateness"]).only == ["lateness"]
    with pytest.raises(SystemExit):
        options.parse(["latenesss"])
    full = options.plan(options.parse(["--loops", "asyncio"]))
    assert full["budget_s"] > options.FULL["budget_s"]  # the lateness section's own time on top
    assert options.plan(options.parse(["cpu"]))["budget_s"] == options.FULL["budget_s"]


def test_the_loops_time_per_wait_is_its_cpu_over_its_waits():
    """The report's per-wait figure of the loop's thread: its cores over the waits a second
    of the same rounds (0.5051 cores at 4400.6 waits a second: 115 µs a wait)."""
    from cudafd._bench.report_lateness import loop_per_wait

    assert loop_per_wait({"cores_loop": 0.5051, "waits_per_s": 4400.6}) == "115"
    assert loop_per_wait({"cores_loop": 0.04, "waits_per_s": 96.0}) == "417"
    assert loop_per_wait({"cores_loop": None, "waits_per_s": 10.0}) == ""
    assert loop_per_wait({"cores_loop": 0.5, "waits_per_s": 0}) == ""
    assert loop_per_wait(None) == ""


def test_table_figures_take_at_most_four_characters():
    """Whatever a run measures (the simulator's estimated ends can make lateness
    negative, a loaded machine large), a figure fits 4 characters, so a table
    row stays within 120 columns; and the figure still reads as its value."""
    from cudafd._bench.report_lateness import _n

    values = [0.0, 0.04, 9.94, 9.96, 999.4, 999.6, 3842, 9949, 9951, 12345, 999_400, 999_600, 3e7]
    values += [-v for v in values] + [x * 1.37 for x in range(-30_000, 30_000, 7)]
    for v in values:
        assert len(_n(v)) <= 4, (v, _n(v))
    assert [_n(v) for v in (9.5, 686, 3842, 12345, -2232, -0.5)] == ["9.5", "686", "3.8k", "12k", "-2k", "-0.5"]
