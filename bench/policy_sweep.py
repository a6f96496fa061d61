"""The poller's schedule, side by side: lateness and CPU of the default wait
for several builds of the core (POLL_RATIO, POLL_FLOOR_DIV, POLL_YOUNG_DIV)
and budgets.

    python bench/policy_sweep.py OUT_DIR [R:F:BUDGET_US[:Y] ...]

Y (POLL_YOUNG_DIV, default 0: off): a wait younger than the floor is asked
again after its age, but not sooner than BUDGET/Y (its first asks double).

Each variant is built into OUT_DIR/<R-F> with `make -C native` and measured
in a child process (CUDAFD_LIBRARY, CUDAFD_MAX_LATENESS) on the lateness
section's workloads, asyncio only, with the spin floor and sleep(0) polling
in the same rounds. Prints one line per variant and workload.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

WORKLOADS = {"one_stream": [["50us", 50e-6, 240], ["200us", 200e-6, 240], ["1ms", 1e-3, 240],
                            ["2ms", 2e-3, 120], ["5ms", 5e-3, 120],
                            ["10ms", 10e-3, 60], ["random", None, 240]],
             "streams": [4, 64]}


def child(out: str) -> None:
    from cudafd._bench import lateness
    from cudafd._bench.child import Progress

    p = {"loop": "asyncio", "methods": ["spin_floor", "cudafd_default", "sleep0", "thread20us"], "random_s": [50e-6, 3000e-6],
         "rounds": 4, "window_s": 0.4, "multi_rounds": 1, "history": None, "warmup": 5, "torch": True,
         "soft_s": 60, **WORKLOADS, **json.loads(os.environ.get("SWEEP_PARAMS", "{}"))}
    import cudafd

    before = cudafd.stats()
    res = lateness.run(p, Progress("sweep", os.path.join(out, "partial.json"), 90))
    after = cudafd.stats()
    res["core"] = {k: after.get(k, 0) - before.get(k, 0) for k in ("completed", "queries", "wakes")}
    Path(out, "result.json").write_text(json.dumps(res))


def main() -> None:
    if sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    out = Path(sys.argv[1])
    root = Path(__file__).resolve().parent.parent
    for i, spec in enumerate(sys.argv[2:] or ["32:10:200"]):  # a spec may repeat: it runs again
        r, f, budget, *young = spec.split(":")
        y = young[0] if young else "0"
        lib = out / f"lib-{r}-{f}-{y}"
        subprocess.run(["make", "-s", "-C", str(root / "native"), f"DEST={lib}",
                        f"CFLAGS=-O2 -g -DPOLL_RATIO={r} -DPOLL_FLOOR_DIV={f} -DPOLL_YOUNG_DIV={y}"], check=True)
        run_dir = out / f"{i}-v-{r}-{f}-{budget}-{y}"
        run_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, CUDAFD_LIBRARY=str(lib / "libcudafd.so"), CUDAFD_MAX_LATENESS=str(int(budget) * 1e-6))
        subprocess.run([sys.executable, __file__, "--child", str(run_dir)], env=env, check=False, timeout=120)
        try:
            res = json.loads((run_dir / "result.json").read_text())
        except OSError:
            print(spec, "no result")
            continue
        for wl, w in res["workloads"].items():
            cells = []
            for m in ("cudafd_default", "thread20us"):
                v = w["methods"].get(m) or {}
                lat = v.get("net") or v
                cells.append(f"{m} {lat.get('p50', float('nan')):.0f}/{lat.get('p99', float('nan')):.0f} us "
                             f"{v.get('cores', float('nan')):.3f} cores")
            print(f"{spec:>12} {wl:>12}  " + "  ".join(cells), flush=True)
        print(f"{spec:>12} core: {res.get('core')}", flush=True)


if __name__ == "__main__":
    main()
