"""``python -m cudafd bench --quick`` end to end: every section present, exit status 0.

On the simulator (a real GPU with CUDAFD_TEST_DRIVER=real). The suite runs
its sections in child processes, so nothing native is left in this one.
The ``--`` keeps the options away from the top-level CLI parser, which
forwards everything after ``bench`` to the bench's own (it works without
the ``--`` once cudafd._cli hands ``bench`` its arguments unparsed).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cudafd._bench import SECTIONS, options
from cudafd._bench.report import render
from support import REAL, child_env


@pytest.mark.timeout(240)  # (the run below has its own limit of 180 s)
def test_quick_bench_writes_every_section(tmp_path):
    env = child_env()
    cmd = [sys.executable, "-m", "cudafd", "bench", "--", "--quick", "--out", str(tmp_path)]
    if not REAL:
        cmd.append("--sim")
    r = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=180)
    log = r.stdout[-4000:] + r.stderr[-4000:]
    assert r.returncode == 0, log

    doc = json.loads((tmp_path / "bench.json").read_text())
    assert (tmp_path / "bench.txt").read_text().strip()

    def header(text: str) -> str:
        return next(line for line in text.splitlines() if line.startswith("cudafd bench on "))

    assert header((tmp_path / "bench.txt").read_text()).endswith("; quick run")  # every section ran
    partial = dict(doc, sections={"throughput": doc["sections"]["throughput"]})
    assert header(render(partial)).endswith("; quick settings, sections throughput")
    assert doc["simulator"] is (not REAL)
    assert doc["quick"] is True and doc["meaningful"] is False
    assert set(SECTIONS) <= set(doc["sections"]), list(doc["sections"])
    env_info = doc["environment"]
    for key in ("device", "cuda_version", "python", "versions", "loops"):
        assert env_info.get(key), key
    assert doc["command"].startswith("python -m cudafd bench") and doc["date_utc"].endswith("Z")

    s = doc["sections"]
    for loop in env_info["loops"]:
        lat = s["latency"][loop]["methods"]
        for key in (
            "floor",
            "executor_blocking",
            "sleep0",
            "sleep1ms",
            "cudafd_event",
            "cudafd_spin",
            "cudafd_hostfunc",
            "cudafd_poll",
        ):
            assert lat[key]["n"] > 0 and lat[key]["p50"] > 0, key
        assert "cudafd_event" in s["cpu"][loop]["methods"]
        assert s["throughput"][loop]["methods"]["cudafd_event"]["awaits_per_s"] > 0
    assert "numba" not in s["latency"][env_info["loops"][0]]["methods"] or REAL
    assert s["bubble"]["variants"]["cudafd_event"]["us_per_point"] is not None
    for mech, res in s["scale"].items():
        assert res["all_completed"], (mech, res)
    assert "latency" in s["c"] or "skipped" in s["c"], s["c"]
    assert {t["status"] for t in doc["targets"]} <= {"pass", "miss", "out of reach", "n/a"} and doc["targets"]
    for loop in env_info["loops"]:  # the bounds that show a target out of reach, measured beside it
        assert s["cpu"][loop]["methods"]["bound_sleep"]["cores"] > 0
        assert s["cpu"][loop]["methods"]["bound_loop"]["cores"] > 0
        assert s["throughput"][loop]["methods"]["bound_yield"]["awaits_per_s"] > 0
    if not REAL:
        assert "SIMULATOR" in r.stdout


def test_targets_tell_a_miss_from_a_target_out_of_reach():
    from cudafd._bench.targets import evaluate

    def cpu(ours, bound, bound_loop=None, executor=0.1):
        methods = {"cudafd_event": {"cores": ours}, "bound_sleep": {"cores": bound},
                   "executor_blocking": {"cores": executor}}
        if bound_loop is not None:
            methods["bound_loop"] = {"cores": bound_loop}
        return {"asyncio": {"methods": methods}}

    def tput(ours, best, bound):
        methods = {"cudafd_event": {"awaits_per_s": ours, "cores": 1.0}, "sleep0": {"awaits_per_s": best}}
        if bound is not None:
            methods["bound_yield"] = {"awaits_per_s": bound}
        return {"asyncio": {"streams": 64, "kernel_us": 100, "methods": methods}}

    def status(sections):
        (row,) = evaluate(sections)
        return row["status"]

    # CPU: against the executor's in the same rounds (<= 0.8x)
    assert status({"cpu": cpu(0.07, 0.03)}) == "pass"
    assert status({"cpu": cpu(0.09, 0.03)}) == "miss"  # the bound shows it can be done
    assert status({"cpu": cpu(0.09, 0.085)}) == "out of reach"
    assert status({"cpu": cpu(0.09, 0.03, 0.085)}) == "out of reach"  # the loop's own bound is the one judged
    assert status({"cpu": cpu(0.09, 0.03, 0.05)}) == "miss"
    assert status({"cpu": {"asyncio": {"methods": {"cudafd_event": {"cores": 0.01}}}}}) == "n/a"  # no executor
    # throughput: against sleep(0) polling's (>= 1.0x)
    assert status({"throughput": tput(160, 100, 200)}) == "pass"
    assert status({"throughput": tput(100, 100, 200)}) == "pass"
    assert status({"throughput": tput(90, 100, 200)}) == "miss"
    assert status({"throughput": tput(90, 100, 95)}) == "out of reach"
    assert status({"throughput": tput(90, 100, None)}) == "miss"  # no bound measured: no claim


def test_throughput_row_says_what_an_await_may_cost():
    """The target in time: the µs per await it leaves over a bare yield,
    against what cudafd's await and one query cost over it, round by round."""
    from cudafd._bench.targets import await_budget, evaluate

    def rounds(*rates):
        return {"awaits_per_s": sorted(rates)[len(rates) // 2], "cores": 1.0,
                "rounds": [{"awaits_per_s": r} for r in rates]}

    methods = {"cudafd_event": rounds(100, 50), "sleep0": rounds(100, 100),
               "bound_yield": rounds(200, 100), "bound_query": rounds(150, 80)}
    # round 1: allowed 1e6/100 - 1e6/200 = 5000, cost 1e6/100 - 5000 = 5000, one query 1666.7
    # round 2: allowed 10000 - 10000 = 0, cost 20000 - 10000 = 10000, one query 2500
    allowed, cost, ask = await_budget(methods, "sleep0")
    assert allowed == 2500 and cost == 7500 and round(ask, 1) == 2083.3
    (row,) = evaluate({"throughput": {"asyncio": {"streams": 64, "kernel_us": 100, "methods": methods}}})
    assert "the target allows 2500.0 us, cudafd takes 7500.0 us (one query alone 2083.3 us)" in row["measured"]
    del methods["bound_query"]
    assert await_budget(methods, "sleep0")[2] is None
    del methods["bound_yield"]
    assert await_budget(methods, "sleep0") is None


def test_scale_gives_no_verdict_unless_every_wait_was_pending_at_once():
    from cudafd._bench.targets import evaluate

    def row(all_pending):
        res = {"waits": 10000, "streams": 1000, "all_completed": True, "completed": 10000, "thread_cap": 2,
               "peak_native_threads": 2, "bytes_per_wait": 500.0, "drain_per_s": 1e5,
               "all_pending_when_measured": all_pending}
        (r,) = evaluate({"scale": {"event": res}})
        return r

    assert row(True)["status"] == "pass"
    late = row(False)
    assert late["status"] == "n/a" and "NOT all pending at once" in late["measured"]


def test_throughput_is_judged_on_ratios_within_a_round():
    """A slow spell that hits the baseline's good rounds and the method's bad
    one moves the medians apart; the ratios within each round do not move."""
    from cudafd._bench.numbers import paired
    from cudafd._bench.targets import evaluate

    assert paired([3.0, 1.0, 4.0], [2.0, 2.0]) == (1.0, 0.5, 1.5, 2)  # rounds both have: median, lowest, highest, count
    assert paired([1.0], [0.0]) is None and paired([], [1.0]) is None

    def rounds(*rates):
        return [{"awaits_per_s": r} for r in rates]

    ours = {"awaits_per_s": 150, "cores": 1.2, "rounds": rounds(150, 90, 300)}
    best = {"awaits_per_s": 200, "rounds": rounds(100, 210, 200)}  # its median beats ours; each round, ours wins 2 of 3
    sections = {"throughput": {"asyncio": {"streams": 64, "kernel_us": 100,
                                           "methods": {"cudafd_event": ours, "sleep0": best}}}}
    (row,) = evaluate(sections)
    assert row["status"] == "pass", row
    assert "1.50x sleep0" in row["measured"] and "median of 3 paired rounds, 0.43-1.50x" in row["measured"]


def test_throughput_takes_its_kernel_length_and_streams_from_the_command_line():
    plan = options.plan(options.parse(["throughput", "--kernel-us", "1000", "--streams", "32"]))
    assert plan["throughput"]["kernel_s"] == 1e-3 and plan["throughput"]["streams"] == 32
    assert options.plan(options.parse(["throughput"]))["throughput"]["kernel_s"] == options.FULL["throughput"]["kernel_s"]
    for bad in ("0", "-5", "nan"):
        with pytest.raises(SystemExit):
            options.parse(["throughput", "--kernel-us", bad])


@pytest.mark.parametrize("where", ["a-file", "a-file/below"])
def test_an_out_folder_that_cannot_be_made_is_a_usage_error(tmp_path, where):
    (tmp_path / "a-file").write_text("")
    cmd = [sys.executable, "-m", "cudafd", "bench", "--quick", "--sim", "--out", str(tmp_path / where), "latency"]
    r = subprocess.run(cmd, check=False, env=child_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"python -m cudafd bench: error: --out {tmp_path / where}: cannot make the folder" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("variable, value", [("CUDAFD_MECHANISM", "telepathy"), ("CUDAFD_MAX_LATENESS", "nan")])
def test_a_bad_cudafd_variable_is_a_usage_error(monkeypatch, capsys, variable, value):
    """Every cudafd method would fail in every child, and the run still exit 0 with
    its baselines' figures: refused before anything runs."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as info:
        options.parse(["latency"])
    assert info.value.code == 2
    assert f"python -m cudafd bench: error: ${variable}=" in capsys.readouterr().err
