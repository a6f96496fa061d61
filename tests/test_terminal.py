"""What the demo and the bench show a user: a progress display (rich or tqdm
on a terminal, plain lines otherwise), a simulator caveat beside timing
figures, a few meaningful counts, and a targets block that fits 100 columns."""
from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys

import pytest

from cudafd._cli.progress import Progress, backend
from support import REAL

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_progress_prints_a_line_at_each_quarter():
    out = io.StringIO()
    assert backend(out) == "plain"
    with Progress(100, "waits", stream=out) as p:
        for done in range(0, 101, 5):
            p.update(done)
        p.line("a line")
    assert out.getvalue().splitlines() == ["  25/100 waits", "  50/100 waits", "  75/100 waits", "a line"]


def test_plain_progress_without_quarters_prints_only_lines():
    out = io.StringIO()
    with Progress(4, "steps", stream=out, quarters=False) as p:
        for done in range(5):
            p.update(done, "note")
        p.line("[1/4] latency ...")
    assert out.getvalue() == "[1/4] latency ...\n"


def test_progress_forced_plain_on_a_terminal(monkeypatch):
    monkeypatch.setenv("CUDAFD_PROGRESS", "plain")
    assert backend(_Tty()) == "plain"


@pytest.mark.skipif(importlib.util.find_spec("rich") is None, reason="rich is not importable (pip install rich)")
def test_rich_progress_on_a_terminal(monkeypatch):
    monkeypatch.delenv("CUDAFD_PROGRESS", raising=False)
    out = _Tty()
    assert backend(out) == "rich"
    with Progress(10, "waits", stream=out, label="demo") as p:
        p.update(5, "half")
        p.line("above the bar")
    assert "above the bar" in out.getvalue()


@pytest.mark.skipif(REAL, reason="runs the demo on the simulator")
def test_demo_shows_a_few_meaningful_lines_with_the_simulator_caveat():
    env = dict(os.environ, CUDAFD_PROGRESS="plain")
    r = subprocess.run([sys.executable, "-m", "cudafd", "demo", "--sim", "--waits", "2000", "--streams", "8"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    crowd = next(i for i, line in enumerate(lines) if line.startswith("resumed after the kernel's end, 8 at once: p50 "))
    assert lines[crowd + 1].startswith("resumed after the kernel's end, one at a time: p50 "), lines
    assert "simulator" in lines[crowd + 2], lines  # the caveat beside the timing figures
    assert any(" waits/s, process CPU " in line and "(the loop's thread " in line for line in lines), lines
    ended = next(line for line in lines if line.startswith("how the waits ended:"))
    numbers = [int(w.replace(",", "")) for w in ended.replace("(", " ").split() if w.replace(",", "").isdigit()]
    assert sum(numbers[:2]) == 2000, ended  # the loop's own check + the fd's: every wait once
    assert any("CudaError CUDA_ERROR_ILLEGAL_ADDRESS" in line for line in lines), lines
    assert lines[-1].startswith("left open afterwards: nothing"), lines
    assert len(lines) <= 12, lines
    assert all(len(line) <= 110 for line in lines[1:]), [line for line in lines if len(line) > 110]


def test_demo_piped_into_a_reader_that_stops_ends_quietly():
    """``python -m cudafd demo | head -1``: no traceback, SIGPIPE's exit status."""
    env = dict(os.environ, CUDAFD_PROGRESS="plain")
    p = subprocess.Popen([sys.executable, "-m", "cudafd", "demo", "--sim", "--waits", "20000", "--streams", "8"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert p.stdout.readline()  # the first line, then the reader goes away
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_bench_targets_fit_100_columns_and_say_simulator():
    from cudafd._bench import report

    from support import committed_lateness_run

    with open(committed_lateness_run()) as f:
        doc = json.load(f)
    text = report.render(doc)
    block = text[text.index("Targets (docs/performance.md)"):].split("\n\n")[0]
    assert max(len(line) for line in block.splitlines()) <= 100, block
    for row in doc["targets"]:  # every measured figure is there, whole, only wrapped
        assert " ".join(row["measured"].split()) in " ".join(block.split()), row["measured"]
    assert "[simulator" not in text
    doc["environment"]["simulator"] = True
    sim = report.render(doc)
    assert "Lateness, asyncio: the time the awaiting coroutine resumed" in sim
    lines = sim.splitlines()
    titled = [lines[i - 1] for i, line in enumerate(lines) if line == report.SIM_MARK]
    assert any(t.startswith("One stream, asyncio") for t in titled), titled
    assert "(simulator: pass or miss says nothing of a GPU)" in sim


def test_scale_target_and_table_give_the_same_thread_cap():
    from cudafd._bench import report, targets

    res = {"waits": 100, "streams": 10, "all_completed": True, "completed": 100, "thread_cap": 2,
           "peak_native_threads": 3, "bytes_per_wait": 100.0, "drain_per_s": 1e5, "all_pending_when_measured": True}
    row = next(r for r in targets.evaluate({"scale": {"event": res}}) if r["figure"].startswith("scale"))
    assert "peak 3 threads (cap 2)" in row["measured"] and row["status"] == "miss"
    assert "3 (cap 2)" in report._scale({"event": res})
    row = next(r for r in targets.evaluate({"scale": {"event": dict(res, peak_native_threads=2)}}))
    assert row["status"] == "pass"


@pytest.mark.skipif(REAL, reason="runs the demo on the simulator")
@pytest.mark.parametrize("argv, env, status, message", [
    (["--mechanism", "syncfd"], {"CUDAFD_SIM_SYNCFD_FAIL": "device"}, 1, "creating a notifier (mechanism 'syncfd'): the syncfd mechanism is unavailable here"),
    ([], {"CUDAFD_MECHANISM": "telepathy"}, 2, "$CUDAFD_MECHANISM='telepathy' is not a cudafd mechanism"),
    (["--mechanism", "poll"], {"CUDAFD_MECHANISM": "telepathy"}, 0, None),
    ([], {"CUDAFD_MAX_LATENESS": "2ms"}, 2, "$CUDAFD_MAX_LATENESS='2ms' is not a number of seconds"),
], ids=["unusable-mechanism", "bad-mechanism-variable", "variable-overridden", "bad-lateness-variable"])
def test_demo_with_a_mechanism_it_cannot_use_says_why_without_a_traceback(argv, env, status, message):
    r = subprocess.run([sys.executable, "-m", "cudafd", "demo", "--sim", "--waits", "20", "--streams", "2", *argv],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, CUDAFD_PROGRESS="plain", **env))
    assert r.returncode == status, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    if message is not None:
        assert f"python -m cudafd demo: error: {message}" in r.stderr, r.stderr
