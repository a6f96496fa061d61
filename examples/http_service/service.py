"""An asyncio HTTP service that runs GPU work per request, awaited through cudafd.

    python examples/http_service/service.py --bench          # both modes, side by side
    python examples/http_service/service.py --serve --port 8080 --mode cudafd

Each request gets its own CUDA stream from a small pool. The "model" is a
small PyTorch MLP on a GPU when torch and a GPU are there. Otherwise, or with
CUDAFD_SIMULATOR=1, it is a 1 ms kernel on the cudafd simulator, which needs
no GPU. Two ways to wait for
the result are compared under the same load:

* ``cudafd``: ``await cudafd.wait(stream)``. The loop keeps serving meanwhile.
* ``executor``: ``await loop.run_in_executor(None, stream.synchronize)``, which
  costs a thread hop per request.

``--bench`` starts the server in-process and runs a load generator (N
concurrent keep-alive clients over loopback). It prints requests/s and
latency p50/p99 for each mode.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

import cudafd


class Model:
    """Runs one request's work on a stream; `sync(stream)` blocks until done."""

    def __init__(self) -> None:
        try:
            if os.environ.get("CUDAFD_SIMULATOR") == "1":  # cudafd then loads the simulator, not the GPU's driver
                raise ImportError
            import torch

            if not torch.cuda.is_available():
                raise ImportError
            self.torch = torch
            self.net = torch.nn.Sequential(
                torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)
            ).cuda().half()
            self.streams = [torch.cuda.Stream() for _ in range(16)]
            self.where = f"PyTorch on {torch.cuda.get_device_name()}"
        except ImportError:
            self.torch = None
            self.device = cudafd.sim.Device()
            self.streams = [self.device.stream() for _ in range(16)]
            self.where = "the cudafd simulator (1 ms kernel per request)"
        # Streams not in use. A request waits here for one when all are taken;
        # the queue binds to the running loop at its first wait (Python 3.10+).
        self.free: asyncio.Queue = asyncio.Queue()
        for s in self.streams:
            self.free.put_nowait(s)

    def launch(self, stream):
        if self.torch is None:
            stream.launch(0.001)
            return b"ok"
        with self.torch.cuda.stream(stream), self.torch.inference_mode():
            x = self.torch.randn(64, 1024, device="cuda", dtype=self.torch.half)
            return self.net(x).sum()

    def sync(self, stream) -> None:
        stream.synchronize()

    def result(self, out) -> bytes:
        return out if isinstance(out, bytes) else f"{float(out):.3f}".encode()

    def close(self) -> None:
        if self.torch is None:
            self.device.close()
        else:
            self.torch.cuda.synchronize()


async def handle(model: Model, mode: str, reader, writer) -> None:
    loop = asyncio.get_running_loop()
    try:
        while await reader.readuntil(b"\r\n\r\n"):
            stream = await model.free.get()  # backpressure: wait for a stream
            try:
                out = model.launch(stream)
                if mode == "cudafd":
                    await cudafd.wait(stream)
                else:
                    await loop.run_in_executor(None, model.sync, stream)
                body = model.result(out)
            finally:
                model.free.put_nowait(stream)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionResetError):
        pass
    finally:
        writer.close()


async def load(port: int, clients: int, seconds: float) -> list[float]:
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def client() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            writer.write(b"GET /infer HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - t0)
        writer.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies


async def bench(model: Model, clients: int, seconds: float) -> None:
    print(f"model: {model.where}; {clients} clients, {seconds:.0f} s per mode")
    for mode in ("executor", "cudafd"):
        server = await asyncio.start_server(lambda r, w, mode=mode: handle(model, mode, r, w), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        lat = await load(port, clients, seconds)
        server.close()
        await server.wait_closed()
        lat.sort()
        print(f"  {mode:9s} {len(lat) / seconds:9,.0f} req/s   p50 {statistics.median(lat) * 1e3:6.2f} ms"
              f"   p99 {lat[int(0.99 * (len(lat) - 1))] * 1e3:6.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", action="store_true", help="compare both modes under load")
    ap.add_argument("--serve", action="store_true", help="serve until interrupted")
    ap.add_argument("--mode", choices=("cudafd", "executor"), default="cudafd")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    if not a.seconds > 0:
        ap.error("--seconds must be positive")
    if a.clients < 1:
        ap.error("--clients must be at least 1")
    if not 0 <= a.port <= 65535:
        ap.error("--port must be 0 to 65535")
    model = Model()

    async def serve():
        server = await asyncio.start_server(lambda r, w: handle(model, a.mode, r, w), "127.0.0.1", a.port)
        port = server.sockets[0].getsockname()[1]  # the one chosen for --port 0
        print(f"serving on 127.0.0.1:{port} ({a.mode}, {model.where}); Ctrl-C stops", flush=True)
        async with server:
            await server.serve_forever()

    try:
        asyncio.run(serve() if a.serve else bench(model, a.clients, a.seconds))
    except KeyboardInterrupt:  # Ctrl-C: how --serve ends
        print("stopped")
    except OSError as exc:  # the port is taken, or not ours to bind
        sys.exit(f"cannot serve on 127.0.0.1:{a.port}: {exc.strerror or exc}")
    finally:
        model.close()


if __name__ == "__main__":
    main()
