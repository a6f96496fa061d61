"""The Rust crates under rust/: their cargo tests on the simulator, and the
Tokio example (examples/tokio) built on them, run with a fault.

They build offline from Debian's packaged crates (`apt-get install
librust-tokio-dev librust-libc-dev`; .ci/run does it), with a Rust toolchain
(`cargo` on PATH or in ~/.cargo/bin). Both builds share rust/target, so the
second reuses the first's compiled crates."""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUST = os.path.join(ROOT, "rust")
EXAMPLE = os.path.join(ROOT, "examples", "tokio")
TARGET = os.path.join(RUST, "target")
CARGO = shutil.which("cargo") or next(iter(glob.glob(os.path.expanduser("~/.cargo/bin/cargo"))), None)
REGISTRY = glob.glob("/usr/share/cargo/registry/tokio-1.*")

pytestmark = pytest.mark.skipif(
    not (CARGO and REGISTRY),
    reason="needs cargo and Debian's packaged crates (apt-get install librust-tokio-dev librust-libc-dev)",
)


def cargo(*args: str, cwd: str, timeout: float) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDAFD_DRIVER", "CUDAFD_TEST_DRIVER", "CUDAFD_LIB_DIR")}
    env["CARGO_TARGET_DIR"] = TARGET
    r = subprocess.run([CARGO, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"cargo {' '.join(args)} failed ({r.returncode}):\n{out[-6000:]}"
    return out


@pytest.mark.timeout(900)
def test_cargo_test_on_the_simulator():
    out = cargo("test", "--offline", cwd=RUST, timeout=880)
    results = re.findall(r"test result: (\w+)\. (\d+) passed; (\d+) failed", out)
    assert results and all(r[0] == "ok" and r[2] == "0" for r in results), out[-6000:]
    # The integration tests ran (not only doctests that compile without running).
    assert sum(int(r[1]) for r in results) >= 18, out[-6000:]
    for name in ("a_fault_reaches_every_waiter_of_the_context", "dropping_a_pending_wait_cancels_it",
                 "many_tasks_on_a_multi_threaded_runtime_share_one_notifier",
                 "waits_on_one_stream_complete_in_order_and_not_early"):
        assert f"test {name} ... ok" in out, f"{name} did not run:\n{out[-6000:]}"
    # The core builds without Tokio too (fd, dispatch, blocking waits).
    cargo("build", "--offline", "-p", "cudafd", "--no-default-features", "--lib", cwd=RUST, timeout=300)


@pytest.mark.timeout(900)
def test_tokio_example_on_the_simulator():
    cargo("build", "--offline", cwd=EXAMPLE, timeout=880)
    binary = os.path.join(TARGET, "debug", "cudafd-tokio")
    env = {k: v for k, v in os.environ.items() if k != "CUDAFD_DRIVER"}
    r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 0 and "usage: cudafd-tokio" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([binary, "--sim", "--fault"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all checks passed" in r.stdout and "CUDA_ERROR_ILLEGAL_ADDRESS" in r.stdout, r.stdout
    assert r.stdout.count(" ok\n") == 16, r.stdout
    r = subprocess.run([binary, "--tasks", "0"], capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 2 and "need at least 1 task" in r.stderr, r.stdout + r.stderr
