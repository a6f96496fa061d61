"""The parent of a bench run: plans the children, runs each under a time limit, reports.

Order: latency (per loop; the numba-cuda trial first where numba imports),
cpu (per loop), bubble, throughput (per loop), scale (per mechanism), c,
lateness (per loop).
A child that fails or times out costs its own section only; the rest goes
on. The whole suite has a budget too: once it is spent, what is left is
skipped with a note. Exit status: 0 when every section that ran gave its
figures (targets missed or not), 1 when one failed, 2 for bad options, an
--out that cannot be made a folder, or a malformed $CUDAFD_MECHANISM or
$CUDAFD_MAX_LATENESS (every cudafd method's Notifier reads them), refused
with the usage before anything runs.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .._core import lib as _lib
from .._cli._device import choose
from .._cli.progress import Progress
from . import cbench, env, options, plot, plot_lateness, report, targets, waiters
from .methods import BASELINES, CUDAFD
from .options import MECHANISMS_SCALE

__all__ = ["main"]

MIN_CHILD_S = 5.0  # below this much budget left, a child is not started


def _say(text: str) -> None:
    print(text, flush=True)


class Suite:
    def __init__(self, args, plan: dict, simulator: bool) -> None:
        self.args, self.plan, self.simulator = args, plan, simulator
        self.started = time.monotonic()
        self.deadline = self.started + plan["budget_s"]
        self.sections: dict = {}
        self.numba: dict = {}
        self.notes: list[str] = []
        self.failed = False
        self.step = 0
        self.steps = self._count_steps()
        self.ui: Progress | None = None  # the progress bar while run() runs

    def say(self, text: str) -> None:
        if self.ui is not None:
            self.ui.line(text)
        else:
            _say(text)

    def _count_steps(self) -> int:
        per_loop = sum(s in self.args.only for s in ("latency", "cpu", "throughput", "lateness"))
        n = per_loop * len(self.args.loops) + ("bubble" in self.args.only) + ("c" in self.args.only)
        return n + (len(MECHANISMS_SCALE) if "scale" in self.args.only else 0)

    # ---- children ----

    def _child_env(self, section: str) -> dict:
        e = dict(os.environ)
        src = str(Path(__file__).resolve().parents[2])  # the folder holding the cudafd package
        e["PYTHONPATH"] = src + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
        e["PYTHONUNBUFFERED"] = "1"
        if self.simulator:
            e["CUDAFD_SIMULATOR"] = "1"
        if section in ("throughput", "lateness") and "CUDA_DEVICE_MAX_CONNECTIONS" not in e:
            e["CUDA_DEVICE_MAX_CONNECTIONS"] = "32"
        return e

    def child(self, section: str, params: dict, title: str) -> dict:
        """Run one child; its result dict (with "error" on failure, "skipped" when out of budget)."""
        left = self.deadline - time.monotonic()
        if left < MIN_CHILD_S:
            self.notes.append(f"{title}: skipped, the suite's time budget was spent")
            return {"skipped": "the suite's time budget was spent"}
        params = dict(params, hard_s=min(float(params["hard_s"]), left - 2))
        params["soft_s"] = min(float(params.get("soft_s", params["hard_s"])), params["hard_s"] * 0.7)
        with tempfile.TemporaryDirectory(prefix="cudafd-bench-") as tmp:
            path = os.path.join(tmp, "result.json")
            cmd = [sys.executable, "-m", "cudafd._bench.child", section, json.dumps(params), path]
            t0 = time.monotonic()
            rc = self._run_child(cmd, self._child_env(section), params["hard_s"] + 10)
            took = time.monotonic() - t0
            try:
                with open(path) as f:
                    res = json.load(f)
            except (OSError, ValueError):
                res = {
                    "error": f"killed after {took:.0f} s (no result)" if rc is None else f"exit status {rc}, no result"
                }
        res["elapsed_s"] = round(took, 2)
        return res

    def _run_child(self, cmd: list[str], env: dict, timeout: float) -> int | None:
        """Run a child to its end; its exit status, or None if it was killed after ``timeout``.

        Under a progress bar the child's progress lines (on its stderr) become
        the bar's note; any other line it prints is shown as it comes."""
        if self.ui is None or self.ui.kind == "plain":
            try:
                return subprocess.run(cmd, check=False, env=env, stdin=subprocess.DEVNULL, timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                return None
        ui = self.ui
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

        def relay() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                text = line.rstrip()
                if text.startswith("    ") and ": " in text and "TIMED OUT" not in text:
                    ui.update(self.step - 1, text.strip()[:70])
                elif text:
                    ui.line(text)

        reader = threading.Thread(target=relay, name="bench-child-stderr", daemon=True)
        reader.start()
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = None
        reader.join(5)
        return rc

    def _progress(self, title: str) -> None:
        self.step += 1
        self.say(f"[{self.step}/{self.steps}] {title} ...")
        if self.ui is not None:
            self.ui.update(self.step - 1, title)

    def _done(self, section: str, title: str, res: dict) -> dict:
        if res.get("error") and section != "numba_probe":
            self.failed = True
        digest = report.one_line(section, res)
        if self.simulator and not res.get("error"):
            digest += " (simulator)"
        self.say(f"      {title}: {digest} ({res.get('elapsed_s', 0):.1f} s)")
        if self.ui is not None:
            self.ui.update(self.step, "")
        return res

    # ---- sections ----

    def _numba(self, loop: str) -> bool:
        if self.simulator:
            self.numba[loop] = {"ok": False, "error": "not tried on the simulator (numba-cuda drives the real driver)"}
        elif importlib.util.find_spec("numba") is None:
            self.numba[loop] = {"ok": False, "error": "numba is not importable"}
        else:
            self.say(f"      trying numba-cuda Stream.async_done() under {loop} in a child of its own")
            res = self.child("numba_probe", dict(self.plan["numba_probe"], loop=loop), f"numba {loop}")
            self.numba[loop] = self._done("numba_probe", f"numba async_done {loop}", res)
        return bool(self.numba[loop].get("ok"))

    def _per_loop(self, section: str, methods: list[str]) -> None:
        out = self.sections.setdefault(section, {})
        for loop in self.args.loops:
            title = f"{section} {loop}"
            self._progress(title)
            use = list(methods)
            if "numba" in use:
                if loop not in self.numba:
                    self._numba(loop)
                if not self.numba[loop].get("ok"):
                    use.remove("numba")
            params = dict(self.plan[section], loop=loop, methods=use)
            res = self.child(section, params, title)
            if "numba" in use and (res.get("error") or res.get("timed_out")):
                why = {"ok": False, "error": f"the {section} {loop} run with it failed: {res.get('error')}"}
                for other in self.args.loops:  # a deadlock is not the loop's doing: no second try
                    self.numba[other] = dict(why, probe=self.numba.get(other))
                self.say(f"      {title} failed with numba in it; again without numba")
                res = self.child(section, dict(params, methods=[m for m in use if m != "numba"]), title)
            out[loop] = self._done(section, title, res)

    def run(self) -> None:
        only = self.args.only
        if "latency" in only:
            self._per_loop("latency", list(BASELINES) + list(CUDAFD))
        if "cpu" in only:
            self._per_loop("cpu", [m for m in BASELINES if m != "floor"] + list(CUDAFD) + ["bound_sleep", "bound_loop"])
        if "bubble" in only:
            self._progress("bubble")
            variants = ["none", "record"] + list(CUDAFD)
            self.sections["bubble"] = self._done(
                "bubble", "bubble", self.child("bubble", dict(self.plan["bubble"], variants=variants), "bubble")
            )
        if "throughput" in only:
            self._per_loop(
                "throughput",
                ["cudafd_event", "cudafd_spin", "cudafd_hostfunc", "sleep0", "executor_blocking", "bound_yield", "bound_query"],
            )
        if "scale" in only:
            out = self.sections.setdefault("scale", {})
            for mech in MECHANISMS_SCALE:
                title = f"scale {mech}"
                self._progress(title)
                params = dict(self.plan["scale"], mechanism=mech, loop=self.args.loops[0])
                out[mech] = self._done("scale", title, self.child("scale", params, title))
        if "c" in only:
            self._progress("c (bench/c/latency.c)")
            t0 = time.monotonic()
            left = self.deadline - time.monotonic()
            res: dict
            if left < MIN_CHILD_S:
                res = {"skipped": "the suite's time budget was spent"}
            else:
                res = cbench.run(self.plan["c"], self.simulator, min(float(self.plan["c"]["hard_s"]), left), self.say)
            res["elapsed_s"] = round(time.monotonic() - t0, 2)
            if res.get("skipped"):
                self.notes.append(f"C level skipped: {res['skipped']}")
                self.say(f"      c: skipped: {res['skipped']}")
            else:
                self._done("c", "c", res)
            self.sections["c"] = res
        if "lateness" in only:
            self._per_loop("lateness", waiters.all_keys())


def _out_dir(args) -> Path:
    if args.out:
        return Path(args.out)
    return Path.cwd() / ("cudafd-bench-" + _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ"))


def main(argv: list[str]) -> int:
    """``python -m cudafd bench [options]``; returns the exit status."""
    args = options.parse(argv)
    plan = options.plan(args)
    if "uvloop" in args.loops and importlib.util.find_spec("uvloop") is None:
        args.loops = [x for x in args.loops if x != "uvloop"] or ["asyncio"]
        print("uvloop is not importable: measuring under asyncio only", file=sys.stderr)
    setup = choose(args.sim)
    simulator = setup.kind == "sim"
    _lib.load()
    environment = env.collect(simulator)
    environment["loops"] = args.loops
    out_dir = _out_dir(args)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file there, no permission, a read-only file system
        options.error(f"--out {out_dir}: cannot make the folder: {exc.strerror or exc}")
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if simulator:
        _say(report.SIM_BANNER)
    _say(
        f"cudafd bench on {setup.description}; {'quick' if args.quick else 'full'} run; sections {','.join(args.only)}; "
        f"loops {','.join(args.loops)}; results in {out_dir}"
    )
    suite = Suite(args, plan, simulator)
    with Progress(suite.steps, "steps", label="bench", quarters=False) as suite.ui:
        suite.run()
    suite.ui = None
    doc = {
        "schema": 1,
        "tool": "python -m cudafd bench",
        "command": "python -m cudafd bench " + shlex.join(argv),
        "argv": sys.argv,
        "date_utc": date,
        "quick": args.quick,
        "simulator": simulator,
        "meaningful": not simulator and not args.quick,
        "environment": environment,
        "plan": plan,
        "sections": suite.sections,
        "numba": suite.numba,
        "targets": targets.evaluate(suite.sections),
        "notes": suite.notes,
        "elapsed_s": round(time.monotonic() - suite.started, 1),
    }
    if simulator:
        doc["notes"].insert(0, "simulator: the figures are not meaningful as performance numbers")
    why = plot.write(doc, str(out_dir / "bench.png"))
    if why and not (why.startswith("nothing to plot") and suite.sections.get("lateness")):
        doc["notes"].append(f"plot skipped: {why}")
    late_why = plot_lateness.write(doc, str(out_dir / "lateness.png")) if suite.sections.get("lateness") else "no lateness"
    if late_why and suite.sections.get("lateness"):
        doc["notes"].append(f"lateness plot skipped: {late_why}")
    doc["files"] = {
        "json": "bench.json",
        "text": "bench.txt",
        "plot": None if why else "bench.png",
        "lateness_plot": None if late_why else "lateness.png",
    }
    text = report.render(doc)
    (out_dir / "bench.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    (out_dir / "bench.txt").write_text(text)
    _say("\n" + text)
    pngs = "".join(f", {f}" for f in (doc["files"]["plot"], doc["files"]["lateness_plot"]) if f)
    _say(f"done in {doc['elapsed_s']:.0f} s: {out_dir / 'bench.json'}, bench.txt{pngs}")
    return 1 if suite.failed else 0
