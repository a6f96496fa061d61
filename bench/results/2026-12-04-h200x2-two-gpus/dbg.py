import asyncio, time, torch, cudafd
from cudafd._core import driver as _driver
from cudafd._core.targets import resolve
drv = _driver.get()
torch.cuda.set_device(0)
a = torch.randn(256, 256, device="cuda:1")
print("primary ctx 0/1", hex(drv.primary_ctx(0)), hex(drv.primary_ctx(1)))
async def main():
    for how in ("default_stream", "current_stream", "tensor"):
        with torch.cuda.device(1):
            torch.cuda._sleep(50_000_000)
        print(how, "current ctx", hex(drv.current_ctx()), "driver device", drv.current_device(), "torch device", torch.cuda.current_device())
        target = {"default_stream": torch.cuda.default_stream(1), "current_stream": torch.cuda.current_stream(1), "tensor": a}[how]
        t = resolve(target)
        print("  target", t, "ctx", hex(t.ctx), "device_index", getattr(target, "device_index", None))
        t0 = time.perf_counter()
        await cudafd.wait(target)
        print("  waited %.1f ms; done %s" % ((time.perf_counter() - t0) * 1e3, torch.cuda.default_stream(1).query()))
        torch.cuda.synchronize(1)
asyncio.run(main())
