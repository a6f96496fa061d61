"""The native core through its C API (native/tests/stress.c,
native/tests/token_wrap.c: tokens across the wrap of their generation, and
native/tests/clock_step.c: the watchdog's timed waits across a step of the
wall clock, native/tests/callback_lock.c: the driver's callback thread while the
core's lock is held, native/tests/bad_input.c: bad input to the C API) against
the simulator: plain, under AddressSanitizer, ThreadSanitizer and
UndefinedBehaviorSanitizer. The same commands are documented in
docs/development.md."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NATIVE = os.path.join(ROOT, "native")

pytestmark = pytest.mark.skipif(
    not (shutil.which("make") and shutil.which("cc") and os.path.isdir(NATIVE)),
    reason="needs the source tree, make and a C compiler",
)


@pytest.mark.timeout(660)  # (the run below has its own limit of 600 s)
@pytest.mark.parametrize("sanitizer", ["", "address", "thread", "undefined"])
def test_stress_and_sim_selftest(sanitizer, tmp_path):
    env = dict(os.environ)
    env.pop("CUDAFD_DRIVER", None)
    env["TSAN_OPTIONS"] = "halt_on_error=1 second_deadlock_stack=1"
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0"
    env["UBSAN_OPTIONS"] = "halt_on_error=1 print_stacktrace=1"
    out = str(tmp_path / (sanitizer or "plain"))
    cmd = ["make", "-s", "-C", NATIVE, f"SAN={sanitizer}", f"SANOUT={out}", f"DEST={out}", "check"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-6000:]
    for test in ("sim_selftest", "token_wrap", "clock_step", "callback_lock", "bad_input", "stress"):
        assert re.search(rf"^{test}: [1-9][0-9]* passed, 0 failed$", log, re.M), (test, log[-3000:])
    assert "WARNING: ThreadSanitizer" not in log, log[-6000:]
    assert "ERROR: AddressSanitizer" not in log and "ERROR: LeakSanitizer" not in log, log[-6000:]
