"""The PNGs: drawn from a committed lateness run and a quick simulator run,
with the targets where the workload has one (when matplotlib is importable)."""
from __future__ import annotations

import importlib.util
import json
import os

import pytest

from cudafd._bench import plot, plot_lateness, targets_lateness
from cudafd._bench.numbers import CDF_POINTS
from support import committed_lateness_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LATENESS = committed_lateness_run()
needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                      reason="matplotlib is not importable (pip install matplotlib)")


def _doc() -> dict:
    with open(LATENESS) as f:
        return json.load(f)


def test_every_lateness_target_with_a_bound_is_a_line():
    res = _doc()["sections"]["lateness"]["asyncio"]
    floor = res["workloads"]["1x50us"]["methods"]["spin_floor"]["p50"]
    lines = {name: plot_lateness.target_lines(name, res) for name in res["workloads"]}
    assert ("p50", floor + targets_lateness.ONE_STREAM_P50_US) == lines["1x50us"][0][:2]
    assert [k for k, _, _ in lines["1x1ms"]] == ["p50", "cores"]  # the bound and the CPU target
    assert ("cores", targets_lateness.MANY_CORES) in [x[:2] for x in lines["64x_random"]]
    assert lines["history"] == [] and lines["16x_random"] == []


@needs_matplotlib
def test_lateness_png_is_drawn(tmp_path):
    path = tmp_path / "lateness.png"
    assert plot_lateness.write(_doc(), str(path)) is None
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_matplotlib
def test_bench_png_is_drawn_with_cdfs_and_bars(tmp_path):
    cdf = [10.0 + i for i in range(CDF_POINTS)]
    methods = {"floor": {"p50": 10.0, "cdf": cdf}, "cudafd_event": {"p50": 11.0, "cdf": cdf},
               "sleep0": {"p50": 9.0, "cdf": cdf}}
    cpu = {"executor_blocking": {"cores": 0.2}, "cudafd_event": {"cores": 0.1}, "bound_sleep": {"cores": 0.01}}
    tput = {"cudafd_event": {"awaits_per_s": 1e5}, "sleep0": {"awaits_per_s": 9e4}}
    doc = {"sections": {"latency": {"asyncio": {"methods": methods}}, "cpu": {"asyncio": {"methods": cpu}},
                        "throughput": {"asyncio": {"methods": tput, "streams": 8, "kernel_us": 100}}},
           "environment": {"device": "test", "simulator": True}, "date_utc": "now"}
    path = tmp_path / "bench.png"
    assert plot.write(doc, str(path)) is None
    assert path.stat().st_size > 10_000
