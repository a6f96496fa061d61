"""Two builds of cudafd side by side: the lateness of the default wait, in paired rounds.

    python bench/paired_lateness.py --before DIR [--rounds 4] [--loop asyncio] [--streams 16]

DIR holds another build of the package (``pip install --target DIR``); the
one on the path is "after". Each round runs, in a fresh process per build,
alternating which goes first, a short lateness run (``cudafd._bench.lateness``)
of the default wait and ``sleep(0)`` polling: one stream of 1 ms and of
random 50-3000 us kernels, and N streams (``--streams``, default 16) of random kernels. Prints one JSON
line per process, then per workload the median over rounds of after minus
before (p50 lateness, us; CPU cores), each beside the spread of the same
figure for ``sleep(0)`` between the two processes of a round, which changed
nothing: a difference inside that spread is noise.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys
from cudafd._bench import lateness
from cudafd._bench.child import Progress
p = {"loop": sys.argv[1], "methods": ["cudafd_default", "sleep0", "spin_floor"],
     "one_stream": [["1ms", 1e-3, 120], ["random", None, 120]], "random_s": [50e-6, 3000e-6],
     "rounds": 3, "streams": [int(sys.argv[3])], "window_s": 0.4, "multi_rounds": 1, "timed_every": 8, "history": None,
     "warmup": 3, "torch": True, "soft_s": 60, "hard_s": 90}
out = lateness.run(p, Progress("paired", sys.argv[2], 90))
rows = {}
for name, wl in out["workloads"].items():
    for key, m in wl["methods"].items():
        lat = m.get("net") or m  # one stream: minus the spin floor's p50
        rows[f"{name}/{key}"] = {"p50": lat.get("p50"), "p99": lat.get("p99"), "cores": m.get("cores")}
print(json.dumps({"errors": out["errors"], "rows": rows}))
"""


def _one(which: str, before: str, loop: str, streams: int) -> dict:
    env = dict(os.environ)
    if which == "before":
        env["PYTHONPATH"] = before + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run([sys.executable, "-c", CHILD, loop, os.path.join(tmp, "r.json"), str(streams)], env=env,
                           capture_output=True, text=True, timeout=150, cwd=tmp)
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        return {"which": which, "failed": p.stderr[-600:]}
    return {"which": which, **json.loads(lines[-1])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--loop", default="asyncio")
    ap.add_argument("--streams", type=int, default=16)
    a = ap.parse_args()
    pairs = []
    for r in range(a.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        got = {w: _one(w, a.before, a.loop, a.streams) for w in order}
        for w in order:
            print(json.dumps({"round": r, **got[w]}), flush=True)
        pairs.append(got)
    ok = [g for g in pairs if "rows" in g["before"] and "rows" in g["after"]]
    if not ok:
        print("no round completed in both builds")
        return
    for wl in ("1x1ms", "1xrandom", f"{a.streams}x_random"):
        for q in ("p50", "cores"):
            diff, noise = [], []
            for g in ok:
                b, f = g["before"]["rows"], g["after"]["rows"]
                k, s = f"{wl}/cudafd_default", f"{wl}/sleep0"
                if k in b and k in f and b[k][q] is not None and f[k][q] is not None:
                    diff.append(f[k][q] - b[k][q])
                if s in b and s in f and b[s][q] is not None and f[s][q] is not None:
                    noise.append(abs(f[s][q] - b[s][q]))
            if diff:
                print(f"{wl} {q}: after - before, median of {len(diff)} rounds: {statistics.median(diff):+.3g} "
                      f"(range {min(diff):+.3g}..{max(diff):+.3g}); sleep(0) between the two processes: "
                      f"median |diff| {statistics.median(noise) if noise else float('nan'):.3g}")


if __name__ == "__main__":
    main()
