"""One JSON line of figures for the Ray Serve example: cudafd against
run_in_executor, on PyTorch when a GPU is usable (else the simulator, which
the line says).

    python examples/ray_serve/bench.py --seconds 10            # Ray Serve if importable, else in-process
    python examples/ray_serve/bench.py --seconds 10 --no-ray   # the handler on an asyncio loop, no Ray

The line holds, per mode: req_per_s, p50_ms, p99_ms, cpu_cores (the
replica's process; without Ray, this process with its load generator),
answered/wrong/errors, and cudafd's live counts after close ("leftover").
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from serve_app import check_args, ok, parser, ray_importable, run  # noqa: E402


def main() -> int:
    ap = parser(__doc__)
    a = ap.parse_args()
    check_args(ap, a)
    use_ray = not a.no_ray and ray_importable()
    res = run(a.seconds, a.clients, a.kernel_ms, use_ray=use_ray, force_sim=a.sim)
    if not a.no_ray and not use_ray:
        res["driver"] += "; ray[serve] is not importable"
    print(json.dumps(res))
    return 0 if ok(res) else 1


if __name__ == "__main__":
    sys.exit(main())
