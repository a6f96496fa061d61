"""Does numba-cuda's ``Stream.async_done()`` work on our stream here? A short trial in a child of its own.

numba-cuda resolves the future from a host callback that takes the GIL on
the driver's thread: a known source of deadlocks (its own async tests are
disabled for it). So the parent tries it here first, with every await under
a timeout and the whole child under the hard limit, and only adds it to the
latency and CPU runs when this trial passed. Params: ``loop``, ``rounds``,
``await_timeout_s``. The result says ``ok`` and, where it failed, how.
"""

from __future__ import annotations

import asyncio
import time

from .child import Progress, new_loop
from .gpu import Gpu
from .methods import Kit, make
from .numbers import summary

__all__ = ["run"]


def _version() -> str | None:
    from importlib import metadata

    for dist in ("numba-cuda", "numba"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return None


def run(p: dict, progress: Progress) -> dict:
    out: dict = {"loop": p["loop"], "ok": False, "version": _version()}
    progress.partial = lambda: dict(out)
    try:
        import numba.cuda  # noqa: F401 - only whether it imports
    except Exception as exc:
        out["error"] = f"not importable: {type(exc).__name__}: {exc}"
        return out
    gpu = Gpu()
    kit = Kit(gpu)
    loop = new_loop(p["loop"])
    samples: list[float] = []
    try:
        out["stage"] = "setting up numba.cuda.external_stream on our stream"
        fn = make("numba", kit, gpu.streams(1)[0])

        async def trial() -> None:
            for i in range(int(p["rounds"])):
                out["stage"] = f"await {i + 1}/{p['rounds']}"
                t0 = time.perf_counter()
                await asyncio.wait_for(fn(0.0), float(p["await_timeout_s"]))
                samples.append((time.perf_counter() - t0) * 1e6)
                progress.tick(out["stage"])

        loop.run_until_complete(trial())
        out.update(ok=True, stage="done", p50_us=summary(samples)["p50"])
    except asyncio.TimeoutError:
        out["error"] = f"an await did not finish within {p['await_timeout_s']} s ({out['stage']})"
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc} ({out.get('stage')})"
    finally:
        kit.close()
        loop.close()
        gpu.close()
    return out
