"""A Ray Serve deployment awaiting its GPU work through cudafd, against the
same deployment waiting with ``run_in_executor`` and a blocking synchronize.

    python examples/ray_serve/serve_app.py                 # Ray Serve, both modes, side by side
    python examples/ray_serve/serve_app.py --no-ray        # the same handler on an in-process asyncio loop
    python examples/ray_serve/serve_app.py --sim --json    # force the simulator; one JSON line

The handler (handler.py) runs a kernel of ``--kernel-ms`` per request on
PyTorch when it sees a GPU, else on cudafd's simulated driver (the output says
which). Each mode is deployed as one replica in turn and loaded by
``--clients`` concurrent callers through a deployment handle for
``--seconds``, after a short warm-up; then the replica closes its Notifier and
reports cudafd's live counts, which must be zero.

CPU: with Ray it is the replica process's own (it serves nothing else); with
``--no-ray`` it is this process's, load generator included.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from handler import LIVE, MODES, Inference, choose_backend, expected  # noqa: E402
from loadgen import drive  # noqa: E402


def _warmup_s(seconds: float) -> float:
    return min(1.0, seconds / 4)


async def _measure(call, info, clients: int, seconds: float) -> dict[str, Any]:
    await drive(call, expected, clients, _warmup_s(seconds))
    before = await info()
    own0 = time.process_time()
    r = await drive(call, expected, clients, seconds)
    after = await info()
    r["cpu_cores"] = round((after["cpu_s"] - before["cpu_s"]) / r["elapsed_s"], 3)
    r["driver_cpu_cores"] = round((time.process_time() - own0) / r["elapsed_s"], 3)
    r["where"] = after["where"]
    return r


def run_local(mode: str, backend: str, kernel_s: float, clients: int, seconds: float) -> dict[str, Any]:
    """The handler driven by an asyncio loop in this process (no Ray)."""

    async def main() -> dict[str, Any]:
        h = Inference(mode, backend, kernel_s)

        async def info() -> dict[str, Any]:
            return h.info()

        try:
            r = await _measure(h, info, clients, seconds)
        finally:
            r_left = await h.close()
        r["leftover"] = r_left
        return r

    return asyncio.run(main())


def _ray_env() -> None:
    """Replica processes inherit the environment of the Ray node started by
    ray.init: they import handler.py (and cudafd, if it is not installed)
    from the same folders as this process."""
    import cudafd

    paths = [HERE, os.path.dirname(os.path.dirname(os.path.abspath(cudafd.__file__)))]
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + ([old] if old else []))


def run_ray(backend: str, kernel_s: float, clients: int, seconds: float) -> dict[str, dict[str, Any]]:
    import ray
    from ray import serve

    _ray_env()
    if backend == "sim":
        os.environ["CUDAFD_SIMULATOR"] = "1"
    # Two CPUs, no dashboard, no HTTP proxy: requests arrive through the handle.
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    out: dict[str, dict[str, Any]] = {}
    try:
        serve.start(http_options={"location": "NoServer"}, logging_config={"log_level": "WARNING"})
        for mode in MODES:
            deployment = serve.deployment(
                Inference,
                name=f"infer_{mode}",
                num_replicas=1,
                max_ongoing_requests=max(8, 2 * clients),
                # The GPU must be asked for: Ray shows an actor only the GPUs it was given.
                ray_actor_options={"num_cpus": 0, "num_gpus": 1 if backend == "torch" else 0},
            )
            handle = serve.run(deployment.bind(mode, backend, kernel_s), name=mode, route_prefix=None)

            async def main(handle: Any = handle) -> dict[str, Any]:
                async def call(x: int) -> Any:
                    return await handle.remote(x)

                async def info() -> dict[str, Any]:
                    return await handle.info.remote()

                r = await _measure(call, info, clients, seconds)
                r["leftover"] = await handle.close.remote()
                return r

            out[mode] = asyncio.run(main())
            serve.delete(mode)
    finally:
        serve.shutdown()
        ray.shutdown()
    return out


def run(seconds: float, clients: int, kernel_ms: float, use_ray: bool, force_sim: bool) -> dict[str, Any]:
    backend = choose_backend(force_sim)
    kernel_s = kernel_ms / 1e3
    if use_ray:
        modes = run_ray(backend, kernel_s, clients, seconds)
        driver = "Ray Serve (one replica per mode, through a deployment handle)"
    else:
        modes = {m: run_local(m, backend, kernel_s, clients, seconds) for m in MODES}
        driver = "an asyncio loop in this process (no Ray)"
    where = next(iter(modes.values()))["where"]
    return {
        "backend": backend,
        "where": where,
        "simulator": backend == "sim",
        "driver": driver,
        "clients": clients,
        "kernel_ms": kernel_ms,
        "seconds": seconds,
        "modes": modes,
    }


def ray_importable() -> bool:
    try:
        import ray  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError:
        return False
    return True


def report(res: dict[str, Any]) -> str:
    lines = [
        f"GPU work: {res['where']}; {res['clients']} clients, {res['kernel_ms']:g} ms kernel per request, "
        f"{res['seconds']:g} s per mode",
        f"served by {res['driver']}",
    ]
    if res["simulator"]:
        lines.append("simulator: the latencies and CPU say how the waits behave, not what a GPU would give")
    lines.append(f"  {'mode':9s} {'req/s':>8s} {'p50 ms':>8s} {'p99 ms':>8s} {'cores':>6s}  answered/wrong/errors  leftover")
    for mode, r in res["modes"].items():
        left = "none" if not any(r["leftover"].values()) else json.dumps(r["leftover"])
        lines.append(
            f"  {mode:9s} {r['req_per_s']:8.0f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['cpu_cores']:6.2f}"
            f"  {r['answered']}/{r['wrong']}/{r['errors']}  {left}"
        )
        if r["first_error"]:
            lines.append(f"    first error: {r['first_error']}")
    return "\n".join(lines)


def ok(res: dict[str, Any]) -> bool:
    """Every request answered, correctly, and nothing of cudafd left live."""
    return all(
        r["answered"] > 0 and r["answered"] == r["sent"] and not r["wrong"] and not r["errors"]
        and set(r["leftover"]) == set(LIVE) and not any(r["leftover"].values())
        for r in res["modes"].values()
    )


def parser(description: str | None = __doc__) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0, help="load per mode, after a warm-up (default 3)")
    ap.add_argument("--clients", type=int, default=32, help="concurrent callers (default 32)")
    ap.add_argument("--kernel-ms", type=float, default=1.0, help="GPU work per request (default 1 ms)")
    ap.add_argument("--sim", action="store_true", help="use the simulator even if a GPU is usable")
    ap.add_argument("--no-ray", action="store_true", help="drive the handler on an asyncio loop in this process")
    ap.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
    return ap


def check_args(ap: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    if not a.seconds > 0:
        ap.error("--seconds must be positive")
    if a.clients < 1:
        ap.error("--clients must be at least 1")
    if not a.kernel_ms >= 0:
        ap.error("--kernel-ms must be zero or positive")


def main() -> int:
    ap = parser()
    a = ap.parse_args()
    check_args(ap, a)
    if not a.no_ray and not ray_importable():
        ap.error("Ray Serve is not importable (pip install 'ray[serve]'), or run with --no-ray")
    res = run(a.seconds, a.clients, a.kernel_ms, use_ray=not a.no_ray, force_sim=a.sim)
    print(json.dumps(res) if a.json else report(res))
    return 0 if ok(res) else 1


if __name__ == "__main__":
    sys.exit(main())
