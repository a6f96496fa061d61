"""The cost of one cudafd_stream_key call (cuStreamGetId, which every watch of a stream makes) beside cudafd_stream_done (cuStreamQuery) and a ctypes call that reaches no driver, per call, on an idle and a busy stream.

    python bench/stream_key_cost.py     (a GPU, or the simulator)
"""
import statistics, sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent / "src"))
from cudafd._core import lib as _lib
from cudafd._bench.gpu import Gpu
gpu = Gpu(); lib = _lib.load()
s = gpu.streams(1)[0]
key, done, ver = lib.cudafd_stream_key, lib.cudafd_stream_done, lib.cudafd_abi_version
N = 20000
def per(fn, arg):
    t = time.perf_counter()
    if arg is None:
        for _ in range(N): fn()
    else:
        for _ in range(N): fn(arg)
    return (time.perf_counter() - t) / N * 1e9
for state in ("idle", "busy"):
    rows = {"cudafd_stream_key": [], "cudafd_stream_done": [], "cudafd_abi_version (no driver call)": []}
    for _ in range(7):
        if state == "busy":
            gpu.launch(s, 0.5)
        rows["cudafd_stream_key"].append(per(key, s))
        rows["cudafd_stream_done"].append(per(done, s))
        rows["cudafd_abi_version (no driver call)"].append(per(ver, None))
        gpu.sync_stream(s)
    for k, v in rows.items():
        print(f"{state:5} {k:38} median {statistics.median(v):7.1f} ns  (min {min(v):.1f}, max {max(v):.1f})")
gpu.close()
