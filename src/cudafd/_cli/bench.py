"""``python -m cudafd bench``: not written yet."""

from __future__ import annotations

import sys


def run(argv: list[str]) -> int:
    print("cudafd bench: not yet (see the project's issue tracker: the benchmark is being written)", file=sys.stderr)
    return 2
