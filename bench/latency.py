"""Await latency and idle CPU, cudafd against the workarounds: now a section of ``python -m cudafd bench``.

    python bench/latency.py [bench options]     # = python -m cudafd bench --only latency,cpu [bench options]

Kept so the command recorded with the first H200 results still runs; see
``python -m cudafd bench -h`` (src/cudafd/_bench) for the options and the
other sections (bubble, throughput, scale, C level).
"""

from __future__ import annotations

import os
import sys

_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if os.path.isdir(os.path.join(_SRC, "cudafd")):  # a source checkout: its package, not an installed one
    sys.path.insert(0, _SRC)

from cudafd._bench.suite import main

if __name__ == "__main__":
    sys.exit(main(["--only", "latency,cpu", *sys.argv[1:]]))
