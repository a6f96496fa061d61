"""``python -m cudafd bench``: cudafd against the usual ways of awaiting a CUDA stream.

Latency, idle CPU, stream bubble, throughput, scale and a C-level run, with
the targets of docs/performance.md checked side by side; see :mod:`cudafd._bench`.
``python -m cudafd bench -h`` lists the options.
"""

from __future__ import annotations


def run(argv: list[str]) -> int:
    """Run the suite with these options; returns the exit status."""
    from .._bench.suite import main

    try:
        return main(list(argv))
    except SystemExit as exc:  # argparse: --help, bad options
        return exc.code if isinstance(exc.code, int) else 2
    except KeyboardInterrupt:
        return 130
