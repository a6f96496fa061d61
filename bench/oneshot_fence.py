"""What a one-shot fence costs: ``with cudafd.fence(stream) as f: f.wait()`` on an idle stream.

    python bench/oneshot_fence.py [--before DIR] [--n 2000] [--rounds 5] [--mechanisms event,spin,poll]

Each fence opens a Notifier, watches, waits and closes it, so it makes and
frees its context's record in the core (and, in a device's primary
context, takes and gives back a reference to it). Prints one JSON line per
build and mechanism: the median over rounds of the mean µs per fence. With
``--before DIR`` (another build, ``pip install --target DIR``) the two
builds run in alternating fresh processes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
import cudafd
from cudafd._bench.gpu import Gpu
mech, n = sys.argv[1], int(sys.argv[2])
gpu = Gpu()
s = gpu.streams(1)[0]
gpu.launch(s, 0.0)
for _ in range(50):
    with cudafd.fence(s, mech) as f:
        f.wait(10)
t0 = time.perf_counter()
for _ in range(n):
    with cudafd.fence(s, mech) as f:
        f.wait(10)
print(json.dumps({"us": (time.perf_counter() - t0) / n * 1e6, "where": gpu.description}))
"""


def _one(before: str | None, mech: str, n: int) -> dict:
    env = dict(os.environ)
    if before:
        env["PYTHONPATH"] = before + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", CHILD, mech, str(n)], env=env, capture_output=True, text=True,
                       timeout=120)
    if p.returncode != 0:
        return {"failed": p.stderr[-400:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mechanisms", default="event,spin,poll")
    a = ap.parse_args()
    builds = {"after": None, **({"before": a.before} if a.before else {})}
    for mech in a.mechanisms.split(","):
        got: dict[str, list[float]] = {b: [] for b in builds}
        where = ""
        for r in range(a.rounds):
            order = list(builds) if r % 2 == 0 else list(reversed(builds))
            for b in order:
                out = _one(builds[b], mech, a.n)
                if "us" in out:
                    got[b].append(out["us"])
                    where = out["where"]
                else:
                    print(json.dumps({"mechanism": mech, "build": b, **out}))
        for b, us in got.items():
            if us:
                print(json.dumps({"mechanism": mech, "build": b, "us_per_fence_median": round(statistics.median(us), 2),
                                  "rounds": [round(x, 2) for x in us], "where": where}))


if __name__ == "__main__":
    main()
