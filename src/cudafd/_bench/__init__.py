"""``python -m cudafd bench``: cudafd against the usual ways of awaiting a CUDA stream.

Sections (each one runs in a child process of its own, under a hard time
limit, so a hang or a crash costs that section only and the CPU figures of
one method are not polluted by threads another one left behind):

* ``latency``    tiny kernel + await, p50/p99, every method interleaved in blocks
* ``cpu``        process CPU per wall second while awaiting 2 ms kernels back to back
* ``bubble``     µs a notification point adds between 5 µs kernels on one stream
* ``throughput`` S streams each looping (100 µs kernel, await): awaits/s and cores
* ``scale``      10,000 pending waits over 1,000 streams: threads, memory, drain rate
* ``c``          bench/c/latency.c: the C API against plain driver loops
* ``lateness``   kernels of lengths not known in advance (PyTorch's where it has a GPU), 1 to 64
                 streams: how long after each kernel's end its waiter resumed, and the CPU it cost

The parent (:mod:`.suite`) plans the runs, prints progress and tables, checks
the figures against the targets of docs/performance.md (:mod:`.targets`) and writes a
JSON file and a PNG plot. :mod:`.child` is the child processes' entry point.
"""

SECTIONS = ("latency", "cpu", "bubble", "throughput", "scale", "c", "lateness")
