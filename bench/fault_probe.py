"""How the driver reports a fault to other streams of the faulted context.

    python bench/fault_probe.py

Streams A..D run 3 s spin kernels; stream F runs a kernel that faults after
10 ms. Prints, every 10 ms for 4 s, what cuEventQuery says of an event after
each stream's kernel, and when each first turned to an error. Run it in its
own process: the fault ends CUDA for the process.
"""
import ctypes
import time

from cudafd import _driver, _kernels


def main():
    drv = _driver.get()
    ctx = ctypes.c_void_p()
    _driver.check(drv.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
    _driver.check(drv.cuCtxSetCurrent(ctx.value))
    names = ["A", "B", "C", "D", "F"]
    streams, events = {}, {}
    for n in names:
        s, e = ctypes.c_void_p(), ctypes.c_void_p()
        _driver.check(drv.cuStreamCreate(ctypes.byref(s), 1))
        _driver.check(drv.cuEventCreate(ctypes.byref(e), 2))
        streams[n], events[n] = s.value, e.value
    for n in names[:-1]:
        _kernels.launch_spin(streams[n], 3.0)
        drv.cuEventRecord(events[n], streams[n])
    t0 = time.monotonic()
    _kernels.launch_spin(streams["F"], 0.01, fault=True)
    drv.cuEventRecord(events["F"], streams["F"])
    first = {}
    while time.monotonic() - t0 < 4.0:
        t = time.monotonic() - t0
        for n in names:
            r = drv.cuEventQuery(events[n])
            if r not in (0, 600) and n not in first:
                first[n] = (round(t, 3), r)
        time.sleep(0.01)
    print("first error per stream (seconds after the faulting launch, CUresult):", first)


if __name__ == "__main__":
    main()
