import sys
from ctypes import byref, c_int, c_uint, c_void_p
import torch
from cudafd._core import driver as D
drv = D.get(); drv.init()
def state(tag):
    f, a = c_uint(), c_int()
    drv.cuDevicePrimaryCtxGetState(0, byref(f), byref(a))
    print(f"  {tag}: active={a.value}", flush=True)
def torch_ok(tag):
    try:
        x = torch.ones(4, device="cuda") + 1; torch.cuda.synchronize(); print(f"  {tag}: torch ok {float(x.sum())}")
    except Exception as e:
        print(f"  {tag}: torch FAILED {type(e).__name__}: {str(e).splitlines()[0]}")
mode = sys.argv[1]
print(mode)
if mode == "bench":
    from cudafd._bench.lateness import kernels_for
    k = kernels_for({}, [])
    print("  kernels", k.kind)
    state("after setup"); k.close(); state("after close"); torch_ok("after close")
    k2 = kernels_for({}, []); state("second setup"); torch_ok("second")
    sys.exit()
if mode == "torch_first":
    torch.zeros(1, device="cuda"); torch.cuda.synchronize(); state("torch made it")
ctx = c_void_p(); D.check(drv.cuDevicePrimaryCtxRetain(byref(ctx), 0), "retain"); state("retained")
if mode == "retain_first":
    torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize(); state("torch used it")
drv.cuDevicePrimaryCtxRelease(0); state("released")
torch_ok("after release")
