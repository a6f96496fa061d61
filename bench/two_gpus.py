"""Two GPUs of one host: cudafd's lateness with N streams on each device at once, against one device alone.

    python bench/two_gpus.py [--loop asyncio|uvloop] [--streams 32] [--window 1.0] [--rounds 3] [--mechanism event]
    python bench/two_gpus.py --procs [same options]

One process (default): the modes take turns in every round, in an order
rotated each round:

- ``dev0``: N streams of device 0 alone;
- ``dev1``: N streams of device 1 alone;
- ``both``: N streams of each device at once, one Notifier for all of them.

Each stream is a task looping over (``torch.cuda._sleep`` of a length
uniform in 50-3000 µs, ``await cudafd.wait(stream, notifier=n)``) for
``--window`` seconds; ``torch.cuda.Stream(device=d)`` streams, the thread's
current device staying 0 throughout. Lateness: the time the task resumed
minus its kernel's end, read from a timing event recorded after the kernel
against a reference event of the same device anchored to the host clock
(``cudafd._bench.clocks``). Per mode and device: p50/p99 µs and the number
of waits; per mode: the process's CPU cores and the most native threads
cudafd held (``cudafd.stats()["threads"]``, sampled every 10 ms).

``--procs``: a process per GPU. Children of this script, each seeing one GPU
(``CUDA_VISIBLE_DEVICES``) and running ``dev0`` alone, take turns in every
round: device 0's child alone, device 1's alone, then both children at once.
Prints the same figures per child.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import cudafd
from cudafd._bench import torchk
from cudafd._bench.clocks import anchor, end_on_host

MODES = ("dev0", "dev1", "both")


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))] if s else float("nan")


class Device:
    """N streams of one device, their kernels' launcher and the reference event the ends are read against."""

    def __init__(self, torch, index: int, n: int) -> None:  # type: ignore[no-untyped-def]
        self.torch, self.index = torch, index
        self.ref_stream = torch.cuda.Stream(device=index)
        self.streams = [torch.cuda.Stream(device=index) for _ in range(n)]
        with torch.cuda.device(index):
            cps = torchk.calibrate(torch, self.ref_stream)["cycles_per_s"]
        self.cycles_per_s = cps
        self.ref = None
        self.at = 0.0

    def anchor(self) -> None:
        torch = self.torch
        ev = torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        ev.record(self.ref_stream)
        self.at, _ = anchor(ev.query, started=t0)
        self.ref = ev

    def launch(self, stream, seconds: float):  # type: ignore[no-untyped-def]
        torch = self.torch
        end = torch.cuda.Event(enable_timing=True)
        with torch.cuda.device(self.index), torch.cuda.stream(stream):
            torch.cuda._sleep(max(1, int(seconds * self.cycles_per_s)))
        end.record(stream)
        return end

    def end_s(self, end) -> float:  # type: ignore[no-untyped-def]
        return end_on_host(self.at, self.ref.elapsed_time(end))


async def window(devices: list[Device], notifier: cudafd.Notifier, seconds: float, seed: str) -> dict:
    """Every stream of ``devices`` a task looping (kernel, await) for ``seconds``."""
    stop = False
    recs: dict[int, list] = {d.index: [] for d in devices}
    peak = [0]

    async def worker(d: Device, i: int, stream) -> None:  # type: ignore[no-untyped-def]
        rng = random.Random(f"{seed}/{d.index}/{i}")
        while not stop:
            end = d.launch(stream, rng.uniform(50e-6, 3000e-6))
            await cudafd.wait(stream, notifier=notifier)
            if not stop:
                recs[d.index].append((end, time.perf_counter()))

    async def sampler() -> None:
        while not stop:
            peak[0] = max(peak[0], cudafd.stats()["threads"])
            await asyncio.sleep(0.01)

    for d in devices:
        d.anchor()
    c0, w0 = time.process_time(), time.perf_counter()
    tasks = [asyncio.ensure_future(worker(d, i, s)) for d in devices for i, s in enumerate(d.streams)]
    tasks.append(asyncio.ensure_future(sampler()))
    await asyncio.sleep(seconds)
    stop = True
    cores = (time.process_time() - c0) / (time.perf_counter() - w0)
    await asyncio.gather(*tasks)
    for d in devices:
        d.torch.cuda.synchronize(d.index)
    lat = {d.index: [(t - d.end_s(end)) * 1e6 for end, t in recs[d.index]] for d in devices}
    return {"lat": lat, "cores": cores, "threads": peak[0]}


async def one_process(a: argparse.Namespace) -> dict:
    torch, why = torchk.available()
    if torch is None:
        raise SystemExit(why)
    count = torch.cuda.device_count()
    modes = MODES if count >= 2 and not a.alone else ("dev0",)
    devices = [Device(torch, i, a.streams) for i in range(2 if len(modes) > 1 else 1)]
    torch.cuda.set_device(0)
    notifier = cudafd.Notifier(a.mechanism)
    rows: dict[str, dict] = {m: {"lat": {}, "cores": [], "threads": 0} for m in modes}
    await window(devices, notifier, 0.2, "warm")
    for r in range(a.rounds):
        for mode in modes[r % len(modes):] + modes[: r % len(modes)]:
            use = devices if mode == "both" else [devices[int(mode[-1])]]
            res = await window(use, notifier, a.window, f"{mode}/{r}")
            row = rows[mode]
            for k, v in res["lat"].items():
                row["lat"].setdefault(k, []).extend(v)
            row["cores"].append(res["cores"])
            row["threads"] = max(row["threads"], res["threads"])
    notifier.close()
    return {"devices": count, "names": [torch.cuda.get_device_name(i) for i in range(count)], "rows": rows}


def summary(rows: dict) -> list[str]:
    out = []
    for mode, row in rows.items():
        per = "  ".join(f"device {k}: {pct(v, 0.5):.0f}/{pct(v, 0.99):.0f} µs n={len(v)}"
                        for k, v in sorted(row["lat"].items()))
        cores = sorted(row["cores"])
        out.append(f"{mode:>5}  {per}  cores {cores[len(cores) // 2]:.2f}  threads <= {row['threads']}")
    return out


def procs(a: argparse.Namespace) -> None:
    base = [sys.executable, os.path.abspath(__file__), "--alone", "--loop", a.loop,
            "--streams", str(a.streams), "--window", str(a.window), "--rounds", "1", "--mechanism", a.mechanism]
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for turn in (("0",), ("1",), ("0", "1")):
                out = {g: os.path.join(tmp, f"{r}-{len(turn)}-{g}.json") for g in turn}
                children = {g: subprocess.Popen(base + ["--json", out[g]], env=dict(os.environ, CUDA_VISIBLE_DEVICES=g))
                            for g in turn}
                for g, p in children.items():
                    if p.wait(timeout=120):
                        raise SystemExit(f"child for GPU {g} failed: rc {p.returncode}")
                    with open(out[g]) as f:
                        res = json.load(f)["rows"]["dev0"]
                    name = f"gpu{g} {'alone' if len(turn) == 1 else 'at once'}"
                    row = rows.setdefault(name, {"lat": {}, "cores": [], "threads": 0})
                    row["lat"].setdefault(int(g), []).extend(res["lat"]["0"])
                    row["cores"] += res["cores"]
                    row["threads"] = max(row["threads"], res["threads"])
    print(f"{a.loop}, a process per GPU, {a.streams} streams each, {a.rounds} rounds x {a.window} s; "
          "lateness p50/p99, the child's cores, its native threads")
    print("\n".join(summary(rows)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loop", default="asyncio", choices=("asyncio", "uvloop"))
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--window", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mechanism", default="event")
    ap.add_argument("--procs", action="store_true", help="a process per GPU (module docstring)")
    ap.add_argument("--alone", action="store_true", help=argparse.SUPPRESS)  # a --procs child: device 0 only
    ap.add_argument("--json", default=None, help=argparse.SUPPRESS)  # a --procs child: its result goes here
    a = ap.parse_args()
    if a.procs:
        procs(a)
        return
    if a.loop == "uvloop":
        import uvloop

        res = uvloop.run(one_process(a))
    else:
        res = asyncio.run(one_process(a))
    if a.json:  # (a file: uvloop may leave stdout non-blocking, and a long line then loses its tail)
        with open(a.json, "w") as f:
            json.dump(res, f)
        return
    print(f"{a.loop}, {a.mechanism}, {a.streams} streams per device, {a.rounds} rounds x {a.window} s, "
          f"{res['devices']} GPUs {res['names']}; lateness p50/p99, process cores, native threads")
    print("\n".join(summary(res["rows"])))


if __name__ == "__main__":
    main()
