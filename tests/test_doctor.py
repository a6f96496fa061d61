"""``python -m cudafd doctor``: what it tells a user about this machine."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from support import child_env


def _doctor() -> list[str]:
    r = subprocess.run([sys.executable, "-m", "cudafd", "doctor", "--sim"], capture_output=True, text=True,
                       timeout=120, env=child_env())
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.splitlines()


def test_doctor_self_test_passes_on_every_usable_mechanism():
    lines = _doctor()
    assert lines[-1] == "all good", lines
    start = next(i for i, line in enumerate(lines) if line.startswith("self-test"))
    results = dict(line.split(None, 1) for line in lines[start + 1:-1])
    for mechanism in ("event", "hostfunc", "spin", "poll"):
        assert results[mechanism].startswith("ok: await"), results
    assert "raised CUDA_ERROR_ILLEGAL_ADDRESS" in results["fault"], results


def test_doctor_calls_every_loop_with_an_adapter_supported():
    lines = _doctor()
    start = lines.index("event loops")
    loops = {}
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        name, text = line.split(None, 1)
        loops[name] = text
    for name in ("asyncio", "uvloop", "trio", "anyio"):
        if importlib.util.find_spec(name) is not None:
            assert loops[name].startswith("importable (supported"), (name, loops[name])
        else:
            assert loops[name] == "not installed", (name, loops[name])


@pytest.mark.parametrize("variable, value", [("CUDAFD_MECHANISM", "telepathy"), ("CUDAFD_MAX_LATENESS", "2ms")])
def test_doctor_reports_a_bad_variable_as_a_failed_check(variable, value):
    """The fault check waits on the default Notifier, which reads the variable: a
    failed line and exit status 1, not a traceback."""
    r = subprocess.run([sys.executable, "-m", "cudafd", "doctor", "--sim"], capture_output=True, text=True,
                       timeout=120, env=child_env(**{variable: value}))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert f"  {variable:<14} {value}" in lines, lines  # shown with the environment
    env_line = next(line for line in lines if line.startswith("  environment "))
    assert f"FAILED: ${variable}='{value}'" in env_line, env_line  # whether or not a check reads it
    fault = next(line for line in lines if line.startswith("  fault "))
    assert f"FAILED: ValueError: ${variable}='{value}'" in fault, fault
    assert lines[-1] == "some checks FAILED", lines


def test_doctor_marks_the_mechanism_chosen_by_the_environment_as_the_default():
    r = subprocess.run([sys.executable, "-m", "cudafd", "doctor", "--sim"], capture_output=True, text=True,
                       timeout=120, env=child_env(CUDAFD_MECHANISM="spin"))
    assert r.returncode == 0, r.stdout + r.stderr
    marked = [line.split()[0] for line in r.stdout.splitlines() if "(default)" in line]
    assert marked == ["spin"], r.stdout
