"""The poller's schedule, side by side: lateness and CPU of the default wait
for several builds of the core (POLL_RATIO, POLL_FLOOR_DIV, COALESCE_PCT)
and budgets.

    python bench/policy_sweep.py OUT_DIR [R:F:BUDGET_US[:C] ...]

C (COALESCE_PCT, default 50, the core's): a lane due within C% of its
interval is asked in a round that runs anyway.

Each variant is built into OUT_DIR/<R-F> with `make -C native` and measured
in a child process (CUDAFD_LIBRARY, CUDAFD_MAX_LATENESS) on the lateness
section's workloads, asyncio only, with the spin floor and sleep(0) polling
in the same rounds. Prints one line per variant and workload.

    python bench/policy_sweep.py --plot OUT_DIR PNG

draws one panel per workload from OUT_DIR's runs (folders ``N-v-VARIANT``
as above, or ``N-VARIANT`` of ``--child`` runs made by hand): cudafd's CPU
against its p50 lateness (the default's, else the poll mechanism's), a
point per run coloured by variant, the 20 µs polling thread and sleep(0)
polling in grey. Needs matplotlib.
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

    from cudafd._bench.options import FULL

    p = {**FULL["lateness"], "loop": "asyncio", "methods": ["spin_floor", "cudafd_default", "sleep0", "thread20us"],
         "rounds": 4, "multi_rounds": 1, "history": None, "soft_s": 60, **WORKLOADS,
         **json.loads(os.environ.get("SWEEP_PARAMS", "{}"))}
    import cudafd

    before = cudafd.stats()
    res = lateness.run(p, Progress("sweep", os.path.join(out, "partial.json"), 90))
    after = cudafd.stats()
    res["core"] = {k: after.get(k, 0) - before.get(k, 0) for k in ("completed", "queries", "wakes")}
    Path(out, "result.json").write_text(json.dumps(res))


def plot(out: Path, png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = []  # (variant, result), in run order
    for d in sorted(out.glob("[0-9]*-*"), key=lambda d: int(d.name.split("-")[0])):
        if (d / "result.json").exists():
            variant = d.name.split("-", 1)[1].removeprefix("v-")
            runs.append((variant, json.loads((d / "result.json").read_text())))
    workloads = list(dict.fromkeys(w for _, r in runs for w in r["workloads"]))
    variants = list(dict.fromkeys(v for v, _ in runs))
    fig, axes = plt.subplots(1, len(workloads), figsize=(3.6 * len(workloads), 3.6), squeeze=False)
    for ax, wl in zip(axes[0], workloads):
        for variant, res in runs:
            ms = res["workloads"].get(wl, {}).get("methods", {})
            ours = "cudafd_default" if "cudafd_default" in ms else "cudafd_poll"
            for key, style in ((ours, {}), ("thread20us", {"marker": "x", "color": "0.6"}),
                               ("sleep0", {"marker": "+", "color": "0.3"})):
                m = ms.get(key)
                if m:
                    colour = {"color": f"C{variants.index(variant)}"} if not style else {}
                    ax.scatter([(m.get("net") or m)["p50"]], [m["cores"]], s=18, **style, **colour)
        ax.set_title(wl, fontsize=9)
        ax.set_xlabel("p50 lateness, µs")
    axes[0][0].set_ylabel("process CPU, cores")
    handles = [plt.Line2D([], [], marker="o", ls="", color=f"C{i}", label=f"cudafd, {v}")
               for i, v in enumerate(variants)]
    handles += [plt.Line2D([], [], marker="x", ls="", color="0.6", label="thread polling every 20 µs"),
                plt.Line2D([], [], marker="+", ls="", color="0.3", label="sleep(0) polling")]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(png, dpi=110)


def main() -> None:
    if sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    if sys.argv[1] == "--plot":
        plot(Path(sys.argv[2]), sys.argv[3])
        return
    out = Path(sys.argv[1])
    root = Path(__file__).resolve().parent.parent
    for i, spec in enumerate(sys.argv[2:] or ["32:10:200"]):  # a spec may repeat: it runs again
        r, f, budget, *rest = spec.split(":")
        c = rest[0] if rest else "50"
        lib = out / f"lib-{r}-{f}-{c}"
        subprocess.run(["make", "-s", "-C", str(root / "native"), f"DEST={lib}",
                        f"CFLAGS=-O2 -g -DPOLL_RATIO={r} -DPOLL_FLOOR_DIV={f} -DCOALESCE_PCT={c}"],
                       check=True)
        run_dir = out / f"{i}-v-{r}-{f}-{budget}-{c}"
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
