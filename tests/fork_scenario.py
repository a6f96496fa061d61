"""fork() children of a process that uses cudafd, as a script.

    python fork_scenario.py MECHANISM after    # the parent used cudafd before it forked
    python fork_scenario.py MECHANISM before   # the children fork before any use

Each child runs in a fresh interpreter's fork and exits the normal way
(interpreter shutdown, with the parent's Fence and Notifier still pending in
its copy, so their finalizers run there). The parent reaps every child with
a deadline and kills any that outlives it. Prints the outcome as JSON: one
entry per child ("exit N", "hung", or "hung in fork()" for one that never
ran its first line), what each child saw, and whether the parent's own
waits still worked after the forks.
"""
from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
import warnings

import cudafd
from support import REAL, Device, wait_for_zero_counts

CHILDREN = 5
DEADLINE_S = 30.0
STARTED = b"\x01"

if not REAL:
    cudafd.use_simulator()
warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a process with threads: what is tested here


def _expect_refusal(what: str, call, seen: list[str]) -> bool:
    try:
        call()
    except cudafd.ClosedError:
        seen.append(f"{what}: closed")
        return True
    except cudafd.CudafdError as exc:
        text = str(exc)
        seen.append(f"{what}: {type(exc).__name__}: {text}")
        return isinstance(exc, cudafd.CudaError) is False and "spawn" in text
    seen.append(f"{what}: no error")
    return False


def child_after(mechanism: str, stream, notifier: cudafd.Notifier, pending: cudafd.Fence, w) -> int:
    """In a child of a parent that used cudafd: every use refuses clearly."""
    seen: list[str] = []
    ok = _expect_refusal("fence", lambda: cudafd.fence(stream, mechanism=mechanism).wait(10), seen)
    ok &= _expect_refusal("new Notifier", lambda: cudafd.Notifier(mechanism).watch(stream), seen)
    ok &= _expect_refusal("inherited watch", lambda: notifier.watch(stream), seen)
    ok &= _expect_refusal("inherited drain", lambda: (notifier.poll(), notifier.drain()), seen)
    ok &= _expect_refusal("inherited fence", lambda: pending.wait(10), seen)
    # fork() copies only the calling thread, and an inherited Notifier's fileno() with
    # a wait pending starts none (the poll mechanism's helper would ask a driver the
    # child may not use, and die of it). A thread started anyway is recorded and
    # joined, so whether it died (the excepthook) is known at the check.
    started: list[threading.Thread] = []
    crashed: list[str] = []
    threading.excepthook = lambda a: crashed.append(f"{a.thread.name}: {a.exc_type.__name__}")
    start = threading.Thread.start

    def recorded_start(thread: threading.Thread) -> None:
        started.append(thread)
        start(thread)

    threading.Thread.start = recorded_start
    try:
        notifier.fileno()
    except cudafd.CudafdError:
        pass
    finally:
        threading.Thread.start = start
    for thread in started:
        thread.join(10)
    if started or crashed:
        seen.append(f"threads started: {[t.name for t in started]}; died: {crashed}")
        ok = False
    notifier.close()  # closing what it inherited is allowed
    os.write(w, json.dumps(seen).encode())
    return 0 if ok else 3


def child_before(mechanism: str, w) -> int:
    """In a child forked before any use: cudafd works."""
    dev = Device(0)
    try:
        s = dev.stream()
        s.launch(0.02)
        with cudafd.fence(s, mechanism=mechanism) as f:
            done = f.wait(20)
        os.write(w, json.dumps([f"fence: {done}"]).encode())
        return 0 if done and s.idle() else 3
    finally:
        dev.close()


def _where(pid: int) -> str:
    """Where a stuck child is, for the report: each of its threads' kernel wait
    channel and system call (Linux), then its Python stacks, which its
    faulthandler writes to stderr on SIGUSR1 unless nothing in it can run."""
    lines = []
    for task in sorted(os.listdir(f"/proc/{pid}/task")) if os.path.isdir(f"/proc/{pid}/task") else []:
        base = f"/proc/{pid}/task/{task}"
        try:
            with open(f"{base}/comm") as c, open(f"{base}/wchan") as wc, open(f"{base}/syscall") as sc:
                lines.append(f"child {pid} thread {task} ({c.read().strip()}): wchan {wc.read().strip()}, "
                             f"syscall {sc.read().split()[0]}")
        except OSError as exc:
            lines.append(f"child {pid} thread {task}: {exc}")
    os.kill(pid, signal.SIGUSR1)
    # The time its faulthandler is given to write: a signal handler tells no one when
    # it is done, and this report is all that waits on it (the child is killed next).
    time.sleep(1.0)
    return "\n".join(lines)


def fork_children(body) -> tuple[list[str], list[list[str]]]:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # inherited: a stuck child's stacks on demand
    pids = []
    for _ in range(CHILDREN):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, STARTED)  # the child's first line: a child that hangs before it hung in fork()
            os.close(r)
            # a child stuck past half the deadline prints where (stderr) and exits 1
            faulthandler.dump_traceback_later(DEADLINE_S / 2, exit=True)
            code = 4
            try:
                code = body(w)
            except BaseException as exc:  # noqa: BLE001 - the child reports whatever it saw
                os.write(w, json.dumps([f"child raised {type(exc).__name__}: {exc}"]).encode())
            os.close(w)
            sys.exit(code)  # a normal exit: atexit handlers and finalizers run
        os.close(w)
        pids.append((pid, r))
    outcomes, seen = [], []
    deadline = time.monotonic() + DEADLINE_S
    for pid, r in pids:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                outcomes.append(f"exit {os.waitstatus_to_exitcode(status)}")
                break
            if time.monotonic() > deadline:
                print(_where(pid), file=sys.stderr, flush=True)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                outcomes.append("hung")  # (in fork() itself when it never started: see below)
                break
            time.sleep(0.01)
        chunks = []
        while True:
            try:
                chunk = os.read(r, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(r)
        data = b"".join(chunks)
        if not data.startswith(STARTED):
            if outcomes[-1] == "hung":
                outcomes[-1] = "hung in fork(), before its first line"
            seen.append(["never started"])
            continue
        try:
            seen.append(json.loads(data[len(STARTED):] or b"[]"))
        except ValueError:
            seen.append([repr(data)])
    return outcomes, seen


def main(mechanism: str, when: str) -> dict:
    if when == "before":
        outcomes, seen = fork_children(lambda w: child_before(mechanism, w))
        dev = Device(0)
        try:
            s = dev.stream()
            s.launch(0.01)
            parent_ok = cudafd.fence(s, mechanism=mechanism).wait(20)
            left = wait_for_zero_counts()
        finally:
            dev.close()
        return {"children": outcomes, "seen": seen, "parent_ok": parent_ok, "left": left}
    dev = Device(0)
    try:
        s = dev.stream()
        s.launch(0.01)
        assert cudafd.fence(s, mechanism=mechanism).wait(20)
        n = cudafd.Notifier(mechanism)
        s.launch(1.0)
        token = n.watch(s)
        pending = cudafd.fence(s, mechanism=mechanism)
        pending.fileno()  # the poll mechanism's helper thread runs at the fork
        outcomes, seen = fork_children(lambda w: child_after(mechanism, s, n, pending, w))
        parent_ok = pending.wait(20)
        got = []
        deadline = time.monotonic() + 20
        while token not in got and time.monotonic() < deadline:
            n.poll()
            got += [t for t, _ in n.drain()]
            time.sleep(0.005)
        parent_ok = parent_ok and token in got
        s.launch(0.01)
        parent_ok = parent_ok and cudafd.fence(s, mechanism=mechanism).wait(20)
        n.close()
        pending.close()
        return {"children": outcomes, "seen": seen, "parent_ok": bool(parent_ok), "left": wait_for_zero_counts()}
    finally:
        dev.close()


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
